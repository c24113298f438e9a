"""The writer's errors: each a shardstream error naming the column, the sample and the dataset.

A full disk on a real (tiny) filesystem is in tests/integration/test_writer_disk_full.py.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import LocalDataset, MDSWriter
from shardstream.errors import (
    ConfigurationError,
    DiskFullError,
    MissingColumnError,
    SampleEncodingError,
    SampleTooDeepError,
    SampleTypeError,
    ShardstreamError,
    UnencodableTextError,
    UnknownColumnError,
)
from shardstream.storage import atomic_write as real_atomic_write

WRITER_ATOMIC_WRITE = "shardstream.writer.mds_writer.atomic_write"
# Small enough that the 7 samples before the bad one fill several shards.
SIZE_LIMIT = 200


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def write_then(
    out: Path, bad: dict[str, Any], **kwargs: Any
) -> pytest.ExceptionInfo[ShardstreamError]:
    """Write samples 0..6, then ``bad`` (sample 7), and return what it raised.

    The writer must stay usable: sample 7 is then written properly and the dataset checked.
    """
    kwargs.setdefault("columns", COLUMNS)
    with MDSWriter(out=out, size_limit=SIZE_LIMIT, **kwargs) as writer:
        for i in range(7):
            writer.write(sample(i))
        with pytest.raises(ShardstreamError) as info:
            writer.write(bad)
        writer.write(sample(7))
    check_dataset(out, 8)
    assert len(LocalDataset(out).shards) > 1  # the sample number counts across shards
    return info


def assert_names_sample_and_folder(message: str, out: Path) -> None:
    assert "sample 7 (counting from 0)" in message, message
    assert str(out) in message, message


def test_a_lone_surrogate_is_a_unicode_error_naming_column_sample_and_folder(tmp_path: Path):
    out = tmp_path / "ds"
    info = write_then(out, {**sample(7), "text": "caf\udce9 au lait"})
    error = info.value
    assert isinstance(error, UnencodableTextError)
    assert isinstance(error, SampleEncodingError)
    assert isinstance(error, UnicodeError)  # what str.encode would have raised
    assert isinstance(error.__cause__, UnicodeEncodeError)
    message = str(error)
    assert_names_sample_and_folder(message, out)
    assert "column 'text'" in message
    assert "'\\udce9' at character 3" in message
    assert "os.fsencode" in message  # what to do


@pytest.mark.parametrize("encoding", ["json", "pkl"])
def test_nesting_past_the_recursion_limit_names_column_sample_and_folder(
    tmp_path: Path, encoding: str
):
    out = tmp_path / "ds"
    columns = {**COLUMNS, "tree": encoding}
    samples = [{**sample(i), "tree": [i]} for i in range(8)]
    with MDSWriter(out=out, columns=columns, size_limit=SIZE_LIMIT) as writer:
        for item in samples[:7]:
            writer.write(item)
        with pytest.raises(SampleTooDeepError) as info:
            writer.write({**samples[7], "tree": nested(sys.getrecursionlimit() + 50)})
        writer.write(samples[7])
    error = info.value
    assert isinstance(error, RecursionError)  # what json.dumps and pickle.dumps raise
    assert isinstance(error, SampleEncodingError)
    message = str(error)
    assert_names_sample_and_folder(message, out)
    assert f"column 'tree': encoding {encoding!r}" in message
    assert "recursion limit" in message
    assert "flatten it" in message
    with LocalDataset(out, allow_unsafe_types=True) as ds:
        assert [ds[i]["tree"] for i in range(8)] == [[i] for i in range(8)]


def test_a_missing_column_names_the_sample_and_folder(tmp_path: Path):
    out = tmp_path / "ds"
    info = write_then(out, {"id": 7, "text": "no vec"})
    assert isinstance(info.value, MissingColumnError)
    assert isinstance(info.value, KeyError)
    message = str(info.value)
    assert_names_sample_and_folder(message, out)
    assert "sample has no column 'vec'" in message


def test_a_wrong_type_keeps_its_class_and_names_the_sample(tmp_path: Path):
    out = tmp_path / "ds"
    info = write_then(out, {**sample(7), "id": "seven"})
    assert type(info.value) is SampleTypeError  # an AttributeError too, as the reference raises
    message = str(info.value)
    assert_names_sample_and_folder(message, out)
    assert "column 'id': encoding 'int' expects int" in message


# --- keys that are not columns ------------------------------------------------------------------


def test_keys_that_are_not_columns_are_an_error_by_default(tmp_path: Path):
    out = tmp_path / "ds"
    info = write_then(out, {**sample(7), "label": 3, "lang": "en"})
    error = info.value
    assert isinstance(error, UnknownColumnError)
    assert isinstance(error, ValueError)
    message = str(error)
    assert_names_sample_and_folder(message, out)
    assert "['label', 'lang']" in message
    assert "extra_keys='drop'" in message  # what to do


def test_extra_keys_drop_leaves_them_out(tmp_path: Path):
    out = tmp_path / "ds"
    with MDSWriter(out=out, columns=COLUMNS, extra_keys="drop") as writer:
        for i in range(5):
            writer.write({**sample(i), "label": i, "source": "web"})
    check_dataset(out, 5)
    with LocalDataset(out) as ds:
        assert set(ds[0]) == set(COLUMNS)


def encoded_columns(n: int, **extra: list[bytes]) -> dict[str, list[bytes]]:
    """``n`` samples as :meth:`MDSWriter.write_columns` takes them."""
    return {
        "id": [int(i).to_bytes(8, "little") for i in range(n)],
        "text": [b"t%d" % i for i in range(n)],
        "vec": [np.full(4, i, np.float32).tobytes() for i in range(n)],
        **extra,
    }


def test_write_columns_refuses_extra_columns_unless_dropped(tmp_path: Path):
    with (
        MDSWriter(out=tmp_path / "a", columns=COLUMNS) as writer,
        pytest.raises(ConfigurationError, match=r"exactly the columns.*extra_keys='drop'"),
    ):
        writer.write_columns(encoded_columns(2, label=[b"x", b"y"]))
    with MDSWriter(out=tmp_path / "b", columns=COLUMNS, extra_keys="drop") as writer:
        writer.write_columns(encoded_columns(2, label=[b"x", b"y"]))
    with LocalDataset(tmp_path / "b") as ds:
        assert [ds[i]["text"] for i in range(2)] == ["t0", "t1"]
        assert set(ds[1]) == set(COLUMNS)


def test_write_columns_names_the_sample_of_a_wrong_size(tmp_path: Path):
    out = tmp_path / "ds"
    columns = encoded_columns(3)
    columns["vec"][1] = b"\0" * 15
    with MDSWriter(out=out, columns=COLUMNS) as writer:
        writer.write(sample(0))
        writer.write(sample(1))
        with pytest.raises(SampleEncodingError) as info:
            writer.write_columns(columns)
    message = str(info.value)
    assert "sample 3 (counting from 0)" in message
    assert str(out) in message
    assert "column 'vec': values must be 16 bytes each" in message


@pytest.mark.parametrize("value", ["ignore", None, True])
def test_extra_keys_must_be_error_or_drop(tmp_path: Path, value: Any):
    with pytest.raises(ConfigurationError, match="extra_keys must be 'error' or 'drop'"):
        MDSWriter(out=tmp_path / "ds", columns=COLUMNS, extra_keys=value)


# --- a full disk --------------------------------------------------------------------------------


def test_a_full_disk_under_the_index_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def atomic_write(path: str, parts: Any) -> int:
        if path.endswith("index.json"):  # the shards fit; the index does not
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        return real_atomic_write(path, parts)

    monkeypatch.setattr(WRITER_ATOMIC_WRITE, atomic_write)
    out = tmp_path / "ds"
    writer = MDSWriter(out=out, columns=COLUMNS)
    for i in range(3):
        writer.write(sample(i))
    with pytest.raises(DiskFullError) as info:
        writer.finish()
    error = info.value
    assert isinstance(error, OSError)
    assert error.errno == errno.EDQUOT
    message = str(error)
    assert f"no space left in {out} for index.json" in message
    assert "bytes free now" in message
    assert "no index.json was published" in message
    assert sorted(path.name for path in out.iterdir()) == ["shard.00000.mds"]


def test_other_os_errors_pass_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def atomic_write(path: str, parts: Any) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(WRITER_ATOMIC_WRITE, atomic_write)
    writer = MDSWriter(out=tmp_path / "ds", columns=COLUMNS)
    writer.write(sample(0))
    with pytest.raises(PermissionError) as info:
        writer.finish()
    assert not isinstance(info.value, DiskFullError)
