"""Batch decoding (``MDSShardView.get_many``) gives exactly what the per-sample getter gives."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.errors import ShardFormatError
from shardstream.format import batch_decode
from shardstream.format.mds import MDSSchema, MDSShardView, shard_header

# Column encodings and strategies for their values.
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bytes": st.binary(max_size=40),
    "str": st.text(max_size=20),
    "int": st.integers(-(2**63), 2**63 - 1),
    "uint8": st.integers(0, 255),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "float32": st.floats(width=32, allow_nan=False),
    "float64": st.floats(allow_nan=False),
    "str_int": st.integers(-(10**30), 10**30),
    "json": st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    "ndarray:int32:3": st.lists(st.integers(-1000, 1000), min_size=3, max_size=3).map(
        lambda xs: np.array(xs, np.int32)
    ),
    "ndarray:uint16:2,3": st.lists(st.integers(0, 2**16 - 1), min_size=6, max_size=6).map(
        lambda xs: np.array(xs, np.uint16).reshape(2, 3)
    ),
}


def build_view(
    columns: dict[str, str], samples: list[dict[str, Any]], *, zero_copy: bool = False
) -> MDSShardView:
    schema = MDSSchema(columns, sort=False)
    payloads = [b"".join(schema.encode_sample(sample)) for sample in samples]
    data = shard_header(
        schema.config_bytes(compression=None, hashes=[], size_limit=1 << 26),
        [len(p) for p in payloads],
    ) + b"".join(payloads)
    return MDSShardView(data, schema, len(samples), source="test.mds", zero_copy=zero_copy)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, memoryview):
        return isinstance(b, memoryview) and bytes(a) == bytes(b)
    return type(a) is type(b) and a == b


@st.composite
def shards(draw: st.DrawFn) -> tuple[dict[str, str], list[dict[str, Any]], list[int], bool]:
    names = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=5, unique=True))
    columns = {f"c{k}": name for k, name in enumerate(names)}
    count = draw(st.integers(1, 12))
    samples = [
        {column: draw(VALUES[encoding]) for column, encoding in columns.items()}
        for _ in range(count)
    ]
    picks = draw(st.lists(st.integers(0, count - 1), max_size=20))
    return columns, samples, picks, draw(st.booleans())


@settings(max_examples=120, deadline=None)
@given(shards(), st.sampled_from([-1, batch_decode.SMALL_BATCH, 100]))
def test_get_many_equals_the_per_sample_getter(case, small_batch):
    # small_batch -1: always the bulk (numpy) path; 100: always the per-sample path.
    columns, samples, picks, zero_copy = case
    view = build_view(columns, samples, zero_copy=zero_copy)
    default = batch_decode.SMALL_BATCH
    batch_decode.SMALL_BATCH = small_batch
    try:
        decoded = view.get_many(picks)
        views = view.get_many_views(picks)
    finally:
        batch_decode.SMALL_BATCH = default
    assert len(decoded) == len(views) == len(columns)
    for column, name in enumerate(view.schema.names):
        assert len(decoded[column]) == len(views[column]) == len(picks)
        values = decoded[column]
        numbers = values.dtype if isinstance(values, np.ndarray) and values.ndim == 1 else None
        for value, seen, pick in zip(decoded[column], views[column], picks, strict=True):
            expected = view.get(pick)[name]
            if numbers is not None:  # one array of numbers: the tensor default_collate makes
                assert np.asarray(expected).dtype == numbers
                assert value == expected
                continue
            assert same(value, expected)
            if isinstance(seen, memoryview):  # bytes columns come back as views of the shard
                assert columns[name] == "bytes"
                assert seen.readonly
                assert bytes(seen) == bytes(expected)
            else:
                assert same(seen, expected)


def test_a_corrupt_sample_is_reported_not_decoded():
    view = build_view({"a": "bytes", "b": "int"}, [{"a": b"xy", "b": 1}, {"a": b"z", "b": 2}])
    data = bytearray(view._view)
    first = view._offsets[1]
    struct.pack_into("<I", data, first, 500)  # sample 1's bytes column claims 500 bytes
    corrupt = MDSShardView(bytes(data), view.schema, 2, source="bad.mds")
    assert corrupt.get_many([0]) == [[b"xy"], [1]]
    with pytest.raises(ShardFormatError, match=r"bad\.mds, sample 1"):
        corrupt.get_many([0, 1])


def test_indices_out_of_range_raise_index_error():
    view = build_view({"a": "int"}, [{"a": 5}])
    with pytest.raises(IndexError):
        view.get_many([1])


def test_a_column_wider_than_the_shard_is_a_shard_error_not_an_overflow():
    # A corrupt index can declare a fixed size beyond any shard (found by the reader fuzzer:
    # 'ndarray:uint8:4294967296,4294967296'); the batch decoder must fall back to the
    # per-sample getter, which reports it, instead of building a window that wide.
    view = build_view({"c0": "uint8"}, [{"c0": k} for k in range(20)])
    wide = MDSSchema({"c0": "ndarray:uint8:4294967296,4294967296"}, sort=False)
    corrupt = MDSShardView(bytes(view._view), wide, 20, source="bad.mds")
    with pytest.raises(ShardFormatError, match=r"bad\.mds"):
        corrupt.get_many(list(range(20)))  # more than SMALL_BATCH: the windowed path


def test_a_fixed_shape_array_column_comes_as_one_array_of_its_values():
    columns = {"tokens": "ndarray:uint16:2,3", "text": "str"}
    samples: list[dict[str, Any]] = [
        {"tokens": np.arange(6, dtype=np.uint16).reshape(2, 3) + k, "text": str(k)}
        for k in range(40)
    ]
    view = build_view(columns, samples)
    picks = [39, 0, 7, 7, 20] * 5  # more than SMALL_BATCH: the bulk path
    tokens, text = view.get_many(picks)
    assert isinstance(tokens, np.ndarray)
    assert tokens.shape == (len(picks), 2, 3)
    assert tokens.dtype == np.dtype("<u2")
    assert np.array_equal(tokens, np.stack([samples[k]["tokens"] for k in picks]))
    assert tokens.flags.writeable
    assert not np.shares_memory(tokens, np.frombuffer(view._view, np.uint8))  # its own memory
    assert text == [str(k) for k in picks]
