"""Shards read with pread (MDSFileView) decode exactly as mapped ones (MDSShardView)."""

from __future__ import annotations

import gc
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import ShardFormatError
from shardstream.format.mds import MDSSchema, MDSShardView, shard_header
from shardstream.format.mds_file import MDSFileView, ShardFile

COLUMNS = {
    "blob": "bytes",
    "f": "float32",
    "label": "int",
    "meta": "json",
    "name": "str",
    "vec": "ndarray:int16:3",
}
SCHEMA = MDSSchema(COLUMNS)


def sample(k: int, blob: bytes = b"") -> dict[str, Any]:
    return {
        "blob": blob or bytes([k % 251]) * (k * 37 % 500),
        "f": np.float32(k / 4),
        "label": k - 3,
        "meta": {"k": [k, str(k)]},
        "name": f"n{k}" * (k % 4),
        "vec": np.arange(3, dtype=np.int16) * k,
    }


def shard_bytes(samples: list[dict[str, Any]], schema: MDSSchema = SCHEMA) -> bytes:
    encoded = [b"".join(schema.encode_sample(s)) for s in samples]
    return shard_header(b"{}", [len(e) for e in encoded]) + b"".join(encoded)


def file_view(path: Path, samples: int, **kwargs: Any) -> MDSFileView:
    fd = os.open(path, os.O_RDONLY)
    return MDSFileView(
        ShardFile(fd, os.fstat(fd).st_size), SCHEMA, samples, source=str(path), **kwargs
    )


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    blobs=st.lists(st.binary(max_size=3000), min_size=1, max_size=12),
    picks=st.lists(st.integers(0, 1000), max_size=40),
    zero_copy=st.booleans(),
)
def test_reads_what_the_mapped_view_reads(tmp_path: Path, blobs, picks, zero_copy):
    samples = [sample(k, blob) for k, blob in enumerate(blobs)]
    data = shard_bytes(samples)
    path = tmp_path / "shard.mds"
    path.write_bytes(data)
    mapped = MDSShardView(data, SCHEMA, len(samples), source="s", zero_copy=zero_copy)
    view = file_view(path, len(samples), zero_copy=zero_copy)
    assert len(view) == len(samples)
    for k in range(len(samples)):
        assert same(view.get(k), mapped.get(k))
        assert same(view[k - len(samples)], mapped[k])
        assert view.sample_bytes(k) == mapped.sample_bytes(k)
    indices = [pick % len(samples) for pick in picks]
    got, expected = view.get_many(indices), mapped.get_many(indices)
    assert len(got) == len(COLUMNS)
    for column, wanted in zip(got, expected, strict=True):
        assert len(column) == len(wanted) == len(indices)
        for value, other in zip(column, wanted, strict=True):
            assert np.array_equal(value, other) if isinstance(value, np.ndarray) else value == other
    blob = SCHEMA.names.index("blob")
    want = memoryview if zero_copy else bytes
    assert all(type(value) is want for value in got[blob])
    assert view.get_many_views(indices)[blob] == got[blob]


def test_empty_batch_has_every_column(tmp_path: Path):
    path = tmp_path / "shard.mds"
    path.write_bytes(shard_bytes([sample(1)]))
    assert file_view(path, 1).get_many([]) == [[] for _ in COLUMNS]


def test_out_of_range(tmp_path: Path):
    path = tmp_path / "shard.mds"
    path.write_bytes(shard_bytes([sample(1), sample(2)]))
    view = file_view(path, 2)
    with pytest.raises(IndexError):
        view.get(2)
    with pytest.raises(IndexError, match="out of range"):
        view[-3]


def test_a_file_cut_short_while_open_is_a_corrupt_sample(tmp_path: Path):
    path = tmp_path / "shard.mds"
    path.write_bytes(shard_bytes([sample(k) for k in range(5)]))
    view = file_view(path, 5)
    assert view.get(4)["label"] == 1
    os.truncate(path, os.path.getsize(path) - 3)
    message = rf"{path}, sample 4: cannot decode: read \d+ of \d+ bytes: the file was cut short"
    with pytest.raises(ShardFormatError, match=message):
        view.get(4)
    with pytest.raises(ShardFormatError, match="cut short"):
        view.sample_bytes(4)
    assert view.get(0)["label"] == -3  # the samples before the cut still read


def test_a_size_header_that_disagrees_with_the_offsets(tmp_path: Path):
    data = bytearray(shard_bytes([sample(k) for k in range(3)]))
    first = struct.unpack_from("<I", data, 4 + 4)[0]  # sample 1's offset
    struct.pack_into("<I", data, first, 7)  # its blob claims 7 bytes
    path = tmp_path / "shard.mds"
    path.write_bytes(bytes(data))
    view = file_view(path, 3)
    with pytest.raises(ShardFormatError, match=rf"{path}, sample 1: cannot decode: sample is"):
        view.get(1)
    with pytest.raises(ShardFormatError, match="sample 1"):
        view.get_many([0, 1])
    assert view.get(2)["label"] == -1


@pytest.mark.parametrize(
    ("data", "samples", "message"),
    [
        (b"\x01\x00", 1, "too short for an MDS shard"),
        (None, 4, "holds 3 samples but index.json says 4"),
        ("cut", 3, "truncated offset table"),
        ("grown", 3, "corrupt offset table"),
    ],
)
def test_a_bad_header_is_refused_on_open(tmp_path: Path, data, samples, message):
    good = shard_bytes([sample(k) for k in range(3)])
    body = {None: good, "cut": good[:10], "grown": good + b"x"}.get(data, data)
    path = tmp_path / "shard.mds"
    path.write_bytes(body)
    with pytest.raises(ShardFormatError, match=message):
        file_view(path, samples)


def test_the_file_closes_when_its_last_reader_goes(tmp_path: Path):
    path = tmp_path / "shard.mds"
    path.write_bytes(shard_bytes([sample(k) for k in range(3)]))
    view = file_view(path, 3)
    fd = view._file.fd
    get = view.get
    view.release()
    with pytest.raises(ValueError, match="released"):
        view.get(0)
    with pytest.raises(ValueError, match="released"):
        view.get_many([0])
    del view
    gc.collect()
    assert get(2)["label"] == -1  # a getter taken before release still reads its file
    os.fstat(fd)
    del get
    gc.collect()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)


def test_chunks_cover_the_file(tmp_path: Path):
    path = tmp_path / "shard.mds"
    data = shard_bytes([sample(k) for k in range(40)])
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    file = ShardFile(fd, len(data))
    assert b"".join(file.chunks("s", chunk=100)) == data
    file.close()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
