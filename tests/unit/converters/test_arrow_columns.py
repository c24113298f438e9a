"""The converters' whole-column fast path writes exactly the bytes of the per-sample path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from shardstream import MDSWriter
from shardstream.converters import BatchConverter
from shardstream.converters.batches import write_batches
from shardstream.errors import ConfigurationError, SampleEncodingError

ROWS = 600


def table() -> pa.Table:
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 300, ROWS)  # some arrays longer than 255: a wider shape prefix
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return pa.table(
        {
            "id": pa.array(np.arange(ROWS, dtype=np.int64)),
            "small": pa.array(rng.integers(-128, 128, ROWS, dtype=np.int8)),
            "half": pa.array(rng.random(ROWS).astype(np.float16)),
            "x": pa.array(rng.random(ROWS, dtype=np.float32)),
            "y": pa.array(rng.standard_normal(ROWS)),
            "text": pa.array([f"row {i} é" * (i % 5) for i in range(ROWS)]),
            "big_text": pa.array([f"{i}" for i in range(ROWS)], pa.large_string()),
            "blob": pa.array([rng.bytes(int(n)) for n in lengths]),
            "big_blob": pa.array([rng.bytes(3)] * ROWS, pa.large_binary()),
            "fixed": pa.array([rng.bytes(4) for _ in range(ROWS)], pa.binary(4)),
            "vec": pa.ListArray.from_arrays(
                pa.array(np.arange(ROWS + 1, dtype=np.int32) * 16),
                pa.array(rng.random(ROWS * 16, dtype=np.float32)),
            ),
            "longs": pa.LargeListArray.from_arrays(
                pa.array(offsets), pa.array(rng.integers(0, 1 << 40, offsets[-1]))
            ),
        }
    )


COLUMNS = {
    "id": "int",
    "small": "int8",
    "half": "float16",
    "x": "float32",
    "y": "float64",
    "text": "str",
    "big_text": "str",
    "blob": "bytes",
    "big_blob": "bytes",
    "fixed": "bytes",
    "vec": "ndarray:float32",
    "longs": "ndarray:int64",
}


def files(folder: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(folder))
    }


def write(
    batches: list[Any], out: Path, columns: dict[str, str], *, columnar: bool, **kwargs: Any
) -> dict[str, str]:
    if not columnar:
        original = BatchConverter.encode
        BatchConverter.encode = BatchConverter.samples  # type: ignore[method-assign]
    try:
        write_batches(batches, batches[0].schema, {"out": str(out), "columns": columns, **kwargs})
    finally:
        if not columnar:
            BatchConverter.encode = original  # type: ignore[method-assign]
    return files(out)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_whole_columns_write_the_bytes_of_the_per_sample_path(tmp_path: Path, compression: Any):
    data = table()
    assert BatchConverter(data.schema, COLUMNS).columnar
    # Sliced batches (offsets into shared buffers) and a size limit that cuts many shards.
    batches = [data.slice(start, 70).to_batches()[0] for start in range(0, ROWS, 70)]
    kwargs = {"compression": compression, "size_limit": 1 << 15, "hashes": ["sha1"]}
    fast = write(batches, tmp_path / "fast", COLUMNS, columnar=True, **kwargs)
    slow = write(batches, tmp_path / "slow", COLUMNS, columnar=False, **kwargs)
    assert len(fast) > 5
    assert fast == slow


def test_batches_the_fast_path_leaves_alone_are_written_the_same(tmp_path: Path):
    nan = pa.table({"x": pa.array([1.0, float("nan"), 2.0], pa.float32()), "s": ["a", "b", "c"]})
    columns = {"x": "float32", "s": "str"}
    assert BatchConverter(nan.schema, columns).encode(nan.to_batches()[0]) == [
        {"x": 1.0, "s": "a"},
        {"x": pytest.approx(float("nan"), nan_ok=True), "s": "b"},
        {"x": 2.0, "s": "c"},
    ]
    batches = nan.to_batches()
    fast = write(batches, tmp_path / "fast", columns, columnar=True)
    assert fast == write(batches, tmp_path / "slow", columns, columnar=False)


def test_only_exact_pairings_take_the_fast_path():
    schema = pa.schema(
        [("i", pa.int32()), ("f", pa.list_(pa.float64())), ("j", pa.string()), ("b", pa.bool_())]
    )
    assert BatchConverter(schema, {"i": "int32", "f": "ndarray:float64"}).columnar
    assert not BatchConverter(schema, {"i": "int64"}).columnar  # a cast: per sample
    assert not BatchConverter(schema, {"f": "ndarray"}).columnar  # a dtype code per value
    assert not BatchConverter(schema, {"f": "ndarray:float64:4"}).columnar  # a shape
    assert not BatchConverter(schema, {"j": "json"}).columnar
    assert not BatchConverter(schema, {"b": "uint8"}).columnar


def test_an_empty_array_still_names_its_row():
    data = pa.table({"v": pa.array([[1.0], [], [2.0]], pa.list_(pa.float32()))})
    converter = BatchConverter(data.schema, {"v": "ndarray:float32"})
    assert converter.columnar
    with pytest.raises(SampleEncodingError, match="row 11"):
        converter.encode(data.to_batches()[0], first_row=10)


def test_nulls_are_skipped_before_encoding_whole_columns():
    data = pa.table({"i": pa.array([1, None, 3], pa.int64()), "s": ["a", "b", None]})
    converter = BatchConverter(data.schema, {"i": "int64", "s": "str"}, on_null="skip")
    encoded = converter.encode(data.to_batches()[0])
    assert encoded == {"i": [(1).to_bytes(8, "little")], "s": [b"a"]}
    assert converter.skipped == 2


def test_write_columns_checks_its_input(tmp_path: Path):
    columns = {"a": "int32", "b": "str"}
    with MDSWriter(out=str(tmp_path / "w"), columns=columns) as writer:
        with pytest.raises(ConfigurationError, match="exactly the columns"):
            writer.write_columns({"a": [b"\0\0\0\0"]})
        with pytest.raises(ConfigurationError, match="one length"):
            writer.write_columns({"a": [b"\0\0\0\0"], "b": []})
        with pytest.raises(SampleEncodingError, match="'a'"):
            writer.write_columns({"a": [b"\0"], "b": [b"x"]})
        writer.write_columns({"a": [], "b": []})
        writer.write_columns({"a": [(7).to_bytes(4, "little")], "b": ["é".encode()]})
    with MDSWriter(out=str(tmp_path / "s"), columns=columns) as writer:
        writer.write({"a": 7, "b": "é"})
    assert files(tmp_path / "w") == files(tmp_path / "s")
