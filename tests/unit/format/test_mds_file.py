"""Shards read with pread (MDSFileView) decode exactly as mapped ones (MDSShardView)."""

from __future__ import annotations

import errno
import gc
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.mds_shards import (
    COLUMNS,
    SCHEMA,
    corrupt_shard,
    file_of,
    mapped_view,
    sample,
    shard_bytes,
)
from tests.memory import HAS_PROC_STATUS, rss_file_kib

from shardstream.errors import ShardFormatError
from shardstream.format.mds import MDSSchema, MDSShardView
from shardstream.format.mds_file import MDSFileView, SampleRuns, ShardFile, read_samples
from shardstream.format.sample_codec import SPLIT_READ_BYTES


def file_view(path: Path, samples: int, schema: MDSSchema = SCHEMA, **kwargs: Any) -> MDSFileView:
    fd = os.open(path, os.O_RDONLY)
    return MDSFileView(
        ShardFile(fd, os.fstat(fd).st_size), schema, samples, source=str(path), **kwargs
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


# --- a large value read on its own, straight into its bytes ------------------------------------

#: Schemas whose one variable-size column is raw bytes, with fixed columns before, after, both
#: sides or neither: their large values are read apart from the rest of their sample.
SPLIT_SCHEMAS = [
    {"data": "bytes", "label": "int"},
    {"a": "ndarray:int16:3", "b": "bytes"},
    {"a": "int8", "b": "bytes", "c": "float64", "d": "ndarray:uint8:5"},
    {"only": "bytes"},
]
LARGE = SPLIT_READ_BYTES


def split_sample(columns: dict[str, str], k: int, blob: bytes) -> dict[str, Any]:
    fixed = {
        "int": k - 3,
        "int8": k % 100 - 50,
        "float64": k / 3,
        "ndarray:int16:3": np.arange(3, dtype=np.int16) * k,
        "ndarray:uint8:5": np.full(5, k % 256, np.uint8),
    }
    return {name: blob if spec == "bytes" else fixed[spec] for name, spec in columns.items()}


def split_shard(tmp_path: Path, columns: dict[str, str], blobs: list[bytes]) -> Path:
    schema = MDSSchema(columns)
    path = tmp_path / "split.mds"
    samples = [split_sample(columns, k, blob) for k, blob in enumerate(blobs)]
    path.write_bytes(shard_bytes(samples, schema))
    return path


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    columns=st.sampled_from(SPLIT_SCHEMAS),
    sizes=st.lists(
        st.one_of(st.integers(0, 64), st.integers(LARGE - 40, LARGE + 40)), min_size=1, max_size=6
    ),
    zero_copy=st.booleans(),
)
def test_large_values_read_on_their_own_decode_as_mapped(tmp_path: Path, columns, sizes, zero_copy):
    blobs = [bytes([k % 251]) * size + bytes([size % 256]) for k, size in enumerate(sizes)]
    path = split_shard(tmp_path, columns, blobs)
    data = path.read_bytes()
    mapped = MDSShardView(data, MDSSchema(columns), len(blobs), source="s", zero_copy=zero_copy)
    view = file_view(path, len(blobs), MDSSchema(columns), zero_copy=zero_copy)
    for k in range(len(blobs)):
        assert same(view.get(k), mapped.get(k))
    picks = list(range(len(blobs)))[::-1]
    for got, wanted in zip(view.get_many(picks), mapped.get_many(picks), strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(got, wanted, strict=True))


def outcome(get: Any, index: int) -> Any:
    try:
        return get(index)
    except ShardFormatError as exc:
        return type(exc), str(exc).split(": cannot decode: ")[-1]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    columns=st.sampled_from(SPLIT_SCHEMAS),
    flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6),
)
def test_a_damaged_shard_reads_as_the_mapped_view_reads_it(tmp_path: Path, columns, flips):
    """Any bytes changed: each sample decodes to the same values, or fails for the same reason."""
    path = split_shard(tmp_path, columns, [b"a" * (LARGE + 9), b"b" * 7, b"c" * 2 * LARGE])
    data = bytearray(path.read_bytes())
    for where, byte in flips:
        data[20 + int(where * (len(data) - 20))] = byte  # past the offset table
    path.write_bytes(bytes(data))
    mapped = MDSShardView(bytes(data), MDSSchema(columns), 3, source="s")
    view = file_view(path, 3, MDSSchema(columns))
    for k in range(3):
        got, wanted = outcome(view.get, k), outcome(mapped.get, k)
        assert same(got, wanted) if isinstance(wanted, dict) else got == wanted


def test_a_large_value_is_one_read_of_exactly_its_bytes(tmp_path: Path, monkeypatch):
    columns = {"a": "int", "data": "bytes", "z": "float64"}
    blob = os.urandom(3 * LARGE)
    path = split_shard(tmp_path, columns, [b"small", blob])
    reads: list[int] = []
    real = os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:
        reads.append(size)
        return real(fd, size, offset)

    monkeypatch.setattr(os, "pread", counted)  # read when the getters are built
    view = file_view(path, 2, MDSSchema(columns))
    del reads[:]
    assert view.get(1) == {"a": -2, "data": blob, "z": 1 / 3}
    assert reads == [4 + 8, len(blob), 8]  # size header and a; the value; z
    del reads[:]
    assert view.get(0)["data"] == b"small"
    assert reads == [4 + 8 + 5 + 8]  # a small sample is one read of the whole sample
    zero_copy = file_view(path, 2, MDSSchema(columns), zero_copy=True)
    del reads[:]
    assert bytes(zero_copy.get(1)["data"]) == blob
    assert reads == [4 + 8 + len(blob) + 8]  # a view's bytes were read once already


@pytest.mark.parametrize("cut", [1, 8, LARGE])  # in the last column, at its start, in the value
def test_a_large_value_cut_short_while_open_is_a_corrupt_sample(tmp_path: Path, cut):
    columns = {"data": "bytes", "label": "int"}
    path = split_shard(tmp_path, columns, [b"x" * 2 * LARGE] * 2)
    view = file_view(path, 2, MDSSchema(columns))
    assert view.get(1)["label"] == -2
    os.truncate(path, os.path.getsize(path) - cut)
    message = rf"{path}, sample 1: cannot decode: read \d+ of \d+ bytes: the file was cut short"
    with pytest.raises(ShardFormatError, match=message):
        view.get(1)
    with pytest.raises(ShardFormatError, match="sample 1"):
        view.get_many([0, 1])
    assert view.get(0)["data"] == b"x" * 2 * LARGE


@pytest.mark.parametrize("claimed", [0, LARGE, 2 * LARGE + 1, 1 << 31])
def test_a_large_value_whose_size_header_disagrees(tmp_path: Path, claimed):
    columns = {"a": "int8", "b": "bytes", "c": "float64"}
    size = 2 * LARGE
    data = bytearray(
        shard_bytes([split_sample(columns, k, b"v" * size) for k in range(2)], MDSSchema(columns))
    )
    second = struct.unpack_from("<I", data, 4 + 4)[0]
    struct.pack_into("<I", data, second, claimed)
    path = tmp_path / "split.mds"
    path.write_bytes(bytes(data))
    view = file_view(path, 2, MDSSchema(columns))
    message = (
        rf"{path}, sample 1: cannot decode: sample is {4 + 1 + size + 8} bytes but its "
        rf"columns add up to {4 + 1 + claimed + 8}"
    )
    with pytest.raises(ShardFormatError, match=message):
        view.get(1)
    assert view.get(0)["b"] == b"v" * size


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
    inode = os.fstat(fd).st_ino
    del get
    gc.collect()
    # Closed: the number names nothing, or what another thread was given since.
    assert _inode(fd) != inode


def _inode(fd: int) -> int | None:
    """The inode the descriptor ``fd`` names, or ``None`` if it names nothing."""
    try:
        return os.fstat(fd).st_ino
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
        return None


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


# --- read_samples: mapped shards' samples read from their files --------------------------------


def read(sources: list[tuple[MDSShardView, ShardFile]], picks: list[tuple[int, int]]) -> Any:
    which = np.asarray([shard for shard, _ in picks], np.int64)
    indices = np.asarray([index for _, index in picks], np.int64)
    return read_samples([file_of(*source) for source in sources], which, indices)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shards=st.lists(
        st.lists(st.binary(max_size=3000), min_size=1, max_size=8), min_size=1, max_size=3
    ),
    picks=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), max_size=40),
    run=st.booleans(),
)
def test_read_samples_decodes_what_the_mappings_decode(tmp_path: Path, shards, picks, run):
    sources = []
    for number, blobs in enumerate(shards):
        path = tmp_path / f"shard{number}.mds"
        path.write_bytes(shard_bytes([sample(k, blob) for k, blob in enumerate(blobs)]))
        view = mapped_view(path, len(blobs))
        assert view.path == str(path)
        sources.append((view, ShardFile.open(str(path))))
    wanted = [(s % len(shards), 0) for s, _ in picks]
    wanted = [(s, k % len(shards[s])) for (s, _), (_, k) in zip(wanted, picks, strict=True)]
    if run and wanted:  # samples adjacent in one file, read with one pread; then the next file
        last = wanted[-1][0]
        wanted += [(last, k) for k in range(len(shards[last]))]
        wanted += [((last + 1) % len(shards), 0)]
    got = read(sources, wanted)
    assert len(got) == len(COLUMNS)
    for column, name in zip(got, SCHEMA.names, strict=True):
        assert len(column) == len(wanted)
        for value, (shard, index) in zip(column, wanted, strict=True):
            other = sources[shard][0].get(index)[name]
            assert type(value) is type(other) or isinstance(column, np.ndarray)
            assert np.array_equal(value, other) if isinstance(other, np.ndarray) else value == other


def test_runs_never_span_two_files(tmp_path: Path):
    # Shard b's sample 1 begins at the offset where shard a's sample 0 ends (the same header
    # and first sample): read one after the other, they are still two runs of two files.
    path = tmp_path / "a.mds"
    path.write_bytes(shard_bytes([sample(k) for k in range(3)]))
    other = tmp_path / "b.mds"
    other.write_bytes(shard_bytes([sample(0), sample(11), sample(12)]))
    first, second = mapped_view(path, 3), mapped_view(other, 3)
    assert second.offset_table[1] == first.offset_table[1]
    sources = [(first, ShardFile.open(str(path))), (second, ShardFile.open(str(other)))]
    labels = read(sources, [(0, 0), (1, 1), (0, 1), (1, 2)])[SCHEMA.names.index("label")]
    assert list(labels) == [-3, 8, -2, 9]


def test_read_samples_names_a_corrupt_sample_by_its_index_in_its_shard(tmp_path: Path):
    path = corrupt_shard(tmp_path / "shard.mds")
    sources = [(mapped_view(path, 6), ShardFile.open(str(path)))]
    assert list(read(sources, [(0, 1), (0, 3)])[SCHEMA.names.index("label")]) == [-2, 0]
    with pytest.raises(ShardFormatError, match=rf"{path}, sample 4: cannot decode"):
        read(sources, [(0, 2), (0, 4), (0, 0)])


def test_read_samples_from_a_file_cut_short(tmp_path: Path):
    path = tmp_path / "shard.mds"
    path.write_bytes(shard_bytes([sample(k) for k in range(5)]))
    view = mapped_view(path, 5)
    short = tmp_path / "short.mds"
    short.write_bytes(path.read_bytes()[:-3])
    sources = [(view, ShardFile.open(str(short)))]
    with pytest.raises(ShardFormatError, match=rf"{path}: read \d+ of \d+ bytes at offset"):
        read(sources, [(0, 0), (0, 4)])
    assert read(sources, [])[0] == []


@pytest.mark.skipif(not HAS_PROC_STATUS, reason="reads Linux's /proc")
def test_read_samples_leaves_the_mapping_unread(tmp_path: Path):
    """Shuffled batches of 24 MiB of token arrays: read_samples maps nothing.

    get_many, the control, leaves the pages it read resident.
    """
    schema = MDSSchema({"id": "int", "tokens": "ndarray:uint16:2048"})
    count = 6144
    samples = [{"id": k, "tokens": np.full(2048, k, np.uint16)} for k in range(count)]
    path = tmp_path / "tokens.mds"
    path.write_bytes(shard_bytes(samples, schema))
    order = np.random.default_rng(7).permutation(count).reshape(-1, 256)
    grown = {}
    for how in ("read_samples", "get_many"):
        view = mapped_view(path, count, schema)
        file = ShardFile.open(str(path))
        before = rss_file_kib()
        for batch in order:
            if how == "read_samples":
                ids, tokens = read_samples([file_of(view, file)], np.zeros_like(batch), batch)
            else:
                ids, tokens = view.get_many(batch.tolist())
            assert list(ids) == batch.tolist()
            assert np.array_equal(np.asarray(tokens)[:, 0], batch.astype(np.uint16))
        grown[how] = rss_file_kib() - before
        view.release()
    assert grown["read_samples"] < 2 << 10, grown  # KiB: the offset table, a few pages of code
    assert grown["get_many"] > 16 << 10, grown  # the control: the pages read stay mapped


def test_a_batch_read_as_runs_decodes_each_sample_as_its_view_gets_it(tmp_path: Path):
    paths = [tmp_path / f"s{n}.mds" for n in range(2)]
    for n, path in enumerate(paths):
        path.write_bytes(shard_bytes([sample(10 * n + k) for k in range(6)]))
    views = [file_view(path, 6, runs=True) for path in paths]
    files = [view.sample_file() for view in views]
    assert all(view.reads_runs for view in views)
    which, indices = np.array([1, 0, 0, 1, 0]), np.array([5, 0, 1, 2, 3])
    runs = SampleRuns([file for file in files if file is not None], which, indices)
    assert len(runs.sources) == 2
    got = list(runs.samples(runs.read()))
    expected = [views[n].get(k) for n, k in zip(which.tolist(), indices.tolist(), strict=True)]
    assert len(got) == len(expected)
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))


def test_a_corrupt_sample_of_a_batch_read_as_runs_names_its_file(tmp_path: Path):
    path = corrupt_shard(tmp_path / "bad.mds")
    view = file_view(path, 6, runs=True)
    file = view.sample_file()
    assert file is not None
    runs = SampleRuns([file], np.zeros(3, np.int64), np.array([3, 4, 5]))
    with pytest.raises(ShardFormatError, match=rf"{path}, sample 4"):
        list(runs.samples(runs.read()))
