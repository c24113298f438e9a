from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.memory import HAS_PROC_STATUS, rss_file_kib
from tests.streaming_data import write_dataset

from shardstream import LocalDataset, MDSWriter, StreamingDataset
from shardstream.cache.layout import IN_PLACE_FOLDER, in_place_cache
from shardstream.cache.shard_files import ShardFiles
from shardstream.errors import (
    ChecksumError,
    ConfigurationError,
    ShardFormatError,
    ShardNotFoundError,
)
from shardstream.format.compression import get_compression
from shardstream.format.index import FileInfo, ShardEntry, parse_index
from shardstream.format.mds import MDSSchema, MDSShardView
from shardstream.format.mds_file import MDSFileView
from shardstream.pipeline.policy import ReadPolicy


def make(folder: Path, n: int = 6, **kwargs: Any) -> tuple[ShardEntry, MDSSchema]:
    with MDSWriter(out=folder, columns={"id": "int", "text": "str"}, **kwargs) as writer:
        for i in range(n):
            writer.write({"id": i, "text": f"t{i}"})
    entry = parse_index((folder / "index.json").read_bytes(), source="index.json")[0]
    return entry, MDSSchema(entry.columns, sort=False)


def samples(view: Any) -> list[dict[str, Any]]:
    return [view[i] for i in range(len(view))]


EXPECTED = [{"id": i, "text": f"t{i}"} for i in range(6)]


def files_of(*args: Any, **kwargs: Any) -> ShardFiles:
    """Shard files opened as a reader with the default read policy opens them."""
    return ShardFiles(*args, policy=ReadPolicy(), **kwargs)


def test_files_no_reader_reads_are_mapped_or_read_in_place_without_thresholds(tmp_path: Path):
    # The cache's own ShardFiles (decompress, check) is given no policy: it decides nothing.
    entry, schema = make(tmp_path)
    view = ShardFiles(str(tmp_path)).open(entry, schema)  # read in place: pread, never mapped
    assert isinstance(view, MDSFileView)
    assert samples(view) == EXPECTED


@pytest.fixture(autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's cache root, where a dataset read in place has its decompressed copies."""
    root = tmp_path_factory.mktemp("user-cache")
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(root))
    return root


def test_unknown_validate_hash_is_refused_up_front(tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"validate_hash='sha0' is not a known algorithm"):
        files_of(str(tmp_path), validate_hash="sha0")


def test_open_an_uncompressed_shard(tmp_path: Path):
    entry, schema = make(tmp_path)
    view = files_of(str(tmp_path)).open(entry, schema)
    assert isinstance(view, MDSShardView)
    assert samples(view) == EXPECTED
    assert view.source == os.path.join(str(tmp_path), "shard.00000.mds")


def test_missing_shard_names_the_file(tmp_path: Path):
    entry, schema = make(tmp_path)
    os.remove(tmp_path / "shard.00000.mds")
    with pytest.raises(
        ShardNotFoundError, match=f"shard file {tmp_path}/shard.00000.mds is missing"
    ) as info:
        files_of(str(tmp_path)).open(entry, schema)
    assert isinstance(info.value, FileNotFoundError)


def test_shard_of_the_wrong_size(tmp_path: Path):
    entry, schema = make(tmp_path)
    path = tmp_path / "shard.00000.mds"
    path.write_bytes(path.read_bytes()[:-3])
    size = entry.raw_data.bytes
    message = rf"{path} is {size - 3} bytes but index.json says {size}"
    with pytest.raises(ShardFormatError, match=message):
        files_of(str(tmp_path)).open(entry, schema)


def test_empty_shard_file(tmp_path: Path):
    entry, schema = make(tmp_path)
    (tmp_path / "shard.00000.mds").write_bytes(b"")
    with pytest.raises(ShardFormatError, match=r"is 0 bytes but index.json says"):
        files_of(str(tmp_path)).open(entry, schema)


def test_compressed_shard_is_decompressed_into_the_cache(tmp_path: Path):
    root, cache = tmp_path / "ds", tmp_path / "cache"
    entry, schema = make(root, compression="zstd")
    files = files_of(str(root), str(cache))
    assert samples(files.open(entry, schema)) == EXPECTED
    assert os.listdir(cache) == ["shard.00000.mds"]  # renamed into place: no temporary left
    assert (cache / "shard.00000.mds").stat().st_size == entry.raw_data.bytes
    assert sorted(os.listdir(root)) == ["index.json", "shard.00000.mds.zstd"]


def test_decompressed_shard_is_reused(tmp_path: Path):
    root, cache = tmp_path / "ds", tmp_path / "cache"
    entry, schema = make(root, compression="gz")
    files_of(str(root), str(cache)).open(entry, schema)
    stamp = (cache / "shard.00000.mds").stat().st_mtime_ns
    os.remove(root / "shard.00000.mds.gz")  # only the decompressed copy is left
    assert samples(files_of(str(root), str(cache)).open(entry, schema)) == EXPECTED
    assert (cache / "shard.00000.mds").stat().st_mtime_ns == stamp


def test_cache_defaults_to_a_folder_of_the_dataset_s_own_outside_it(
    tmp_path: Path, user_cache: Path
):
    entry, schema = make(tmp_path / "ds", compression="bz2")
    files = files_of(str(tmp_path / "ds"))
    assert samples(files.open(entry, schema)) == EXPECTED
    assert sorted(os.listdir(tmp_path / "ds")) == ["index.json", "shard.00000.mds.bz2"]
    assert files.cache_root == in_place_cache(str(tmp_path / "ds"))
    assert Path(files.cache_root).parent.parent == user_cache / IN_PLACE_FOLDER
    assert os.listdir(files.cache_root) == ["shard.00000.mds"]


def test_the_default_cache_is_looked_up_only_for_compressed_shards(
    tmp_path: Path, user_cache: Path
):
    entry, schema = make(tmp_path, compression=None)
    assert samples(files_of(str(tmp_path)).open(entry, schema)) == EXPECTED
    assert os.listdir(user_cache) == []


def test_a_dataset_rewritten_in_place_gets_a_fresh_cache(tmp_path: Path):
    root = tmp_path / "ds"
    make(root, compression="zstd")
    first = in_place_cache(str(root))
    assert in_place_cache(str(root)) == first
    os.symlink(root, tmp_path / "link")
    assert in_place_cache(str(tmp_path / "link")) == first  # the real path counts
    assert in_place_cache(str(tmp_path / "other")) != first
    shutil.rmtree(root)
    make(root, n=7, compression="zstd")
    assert in_place_cache(str(root)) != first


def test_a_dataset_rewritten_in_place_leaves_one_set_of_copies(tmp_path: Path, user_cache: Path):
    # fb0f0a9 kept each version's decompressed copies, in a folder of its own, forever.
    root = tmp_path / "ds"
    for version in range(4):
        shutil.rmtree(root, ignore_errors=True)
        write_dataset(root, 60, size_limit=1024, compression="zstd", first=100 * version)
        dataset = StreamingDataset(local=str(root), batch_size=1)
        assert sorted(int(sample["id"]) for sample in dataset) == [
            100 * version + i for i in range(60)
        ]
    shards = len(list(root.glob("shard.*.mds.zstd")))
    copies = list((user_cache / IN_PLACE_FOLDER).rglob("shard.*.mds"))
    assert len(copies) == shards  # the last version's, once
    assert {path.parent for path in copies} == {Path(in_place_cache(str(root)))}


def test_a_cached_copy_of_the_wrong_size_is_replaced(tmp_path: Path):
    root, cache = tmp_path / "ds", tmp_path / "cache"
    entry, schema = make(root, compression="zstd")
    cache.mkdir()
    (cache / "shard.00000.mds").write_bytes(b"half a shard")
    assert samples(files_of(str(root), str(cache)).open(entry, schema)) == EXPECTED


def test_corrupt_compressed_shard(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    path = tmp_path / "shard.00000.mds.zstd"
    path.write_bytes(b"\x00" * entry.zip_data.bytes)  # type: ignore[union-attr]
    with pytest.raises(ShardFormatError, match=rf"{path} is not valid zstd data"):
        files_of(str(tmp_path), str(tmp_path / "cache")).open(entry, schema)
    assert not (tmp_path / "cache" / "shard.00000.mds").exists()


def test_compressed_shard_of_the_wrong_size(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    path = tmp_path / "shard.00000.mds.zstd"
    path.write_bytes(path.read_bytes() + b"\x00")
    with pytest.raises(ShardFormatError, match=rf"{path} is {entry.zip_data.bytes + 1} bytes"):  # type: ignore[union-attr]
        files_of(str(tmp_path)).open(entry, schema)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_validate_hash_accepts_intact_files(tmp_path: Path, compression: str | None):
    entry, schema = make(tmp_path, compression=compression, hashes=["sha1", "xxh64"])
    for algorithm in ("sha1", "xxh64"):
        assert (
            samples(
                files_of(str(tmp_path), str(tmp_path / algorithm), algorithm).open(entry, schema)
            )
            == EXPECTED
        )


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_validate_hash_mismatch(tmp_path: Path, compression: str | None):
    entry, schema = make(tmp_path, compression=compression, hashes=["sha1"])
    path = tmp_path / entry.data_file.basename
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    expected = entry.data_file.hashes["sha1"]
    message = rf"{path}: sha1 digest is \w+ but index.json says {expected}"
    with pytest.raises(ChecksumError, match=message):
        files_of(str(tmp_path), str(tmp_path / "cache"), "sha1").open(entry, schema)
    assert not (tmp_path / "cache").exists()


def test_validate_hash_not_in_the_index(tmp_path: Path):
    entry, schema = make(tmp_path, hashes=["sha1"])
    with pytest.raises(
        ConfigurationError,
        match=r"validate_hash='md5', but index.json records only \['sha1'\] digests for",
    ):
        files_of(str(tmp_path), validate_hash="md5").open(entry, schema)


def test_validate_hash_without_any_digest(tmp_path: Path):
    entry, schema = make(tmp_path)
    with pytest.raises(ConfigurationError, match="records only no digests"):
        files_of(str(tmp_path), validate_hash="sha1").open(entry, schema)


# --- hostile input (found by tests/property/test_fuzz_reader.py) -----------------------------


def renamed(entry: ShardEntry, basename: str, which: str = "raw_data") -> ShardEntry:
    info = getattr(entry, which)
    return replace(entry, **{which: replace(info, basename=basename)})


@pytest.mark.parametrize(
    "basename",
    [
        "x" * 300,  # ENAMETOOLONG
        "shard.00000.mds/inner",  # ENOTDIR: under a file
        "folder",  # EISDIR
    ],
)
def test_a_basename_that_names_no_file_is_a_missing_shard(tmp_path: Path, basename: str):
    entry, schema = make(tmp_path)
    (tmp_path / "folder").mkdir()
    with pytest.raises(ShardNotFoundError, match="is missing \\(or not a file\\)"):
        files_of(str(tmp_path)).open(renamed(entry, basename), schema)


def test_a_compressed_basename_that_names_no_file_is_a_missing_shard(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    with pytest.raises(ShardNotFoundError, match="is missing \\(or not a file\\)"):
        files_of(str(tmp_path)).open(renamed(entry, "x" * 300, "zip_data"), schema)


@pytest.mark.parametrize("basename", ["x" * 300, "shard.00000.mds.zstd/inner", "folder"])
def test_a_decompressed_basename_that_cannot_be_a_file(tmp_path: Path, basename: str):
    entry, schema = make(tmp_path, compression="zstd")
    (tmp_path / "folder").mkdir()
    with pytest.raises(ShardFormatError, match="cannot store the decompressed shard at"):
        files_of(str(tmp_path), str(tmp_path)).open(renamed(entry, basename), schema)


def test_decompression_stops_at_the_size_the_index_records(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    path = tmp_path / "shard.00000.mds.zstd"
    bomb = zstandard.ZstdCompressor().compress(bytes(256 << 20))  # 256 MiB in a few KiB
    path.write_bytes(bomb)
    entry = replace(entry, zip_data=replace(entry.zip_data, bytes=len(bomb)))  # type: ignore[type-var]
    tracemalloc.start()
    try:
        with pytest.raises(
            ShardFormatError,
            match=rf"{path} decompresses to more than the {entry.raw_data.bytes} bytes index.json",
        ):
            files_of(str(tmp_path)).open(entry, schema)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


@pytest.mark.parametrize("code", ["br", "snappy"])
def test_every_codec_stops_at_the_size_the_index_records(tmp_path: Path, code: str):
    entry, schema = make(tmp_path, compression=code)
    path = tmp_path / f"shard.00000.mds.{code}"
    bomb = get_compression(code).compress(bytes(64 << 20))
    path.write_bytes(bomb)
    entry = replace(entry, zip_data=replace(entry.zip_data, bytes=len(bomb)))  # type: ignore[type-var]
    with pytest.raises(ShardFormatError, match="decompresses to more than the"):
        files_of(str(tmp_path), str(tmp_path)).open(entry, schema)
    assert not (tmp_path / "shard.00000.mds").exists()


def test_a_large_shard_is_decompressed_a_piece_at_a_time(tmp_path: Path):
    data = bytes(range(256)) * (128 << 10)  # a 32 MiB "shard": materialize reads no samples
    (tmp_path / "shard.00000.mds.zstd").write_bytes(zstandard.ZstdCompressor().compress(data))
    raw = FileInfo("shard.00000.mds", len(data))
    packed = FileInfo("shard.00000.mds.zstd", (tmp_path / "shard.00000.mds.zstd").stat().st_size)
    entry = ShardEntry("mds", 0, raw, packed, "zstd", (), None, {})
    tracemalloc.start()
    try:
        files_of(str(tmp_path), str(tmp_path / "cache")).materialize(entry)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "cache" / "shard.00000.mds").read_bytes() == data
    assert peak < 8 << 20  # a few pieces of a MiB, not the shard (twice, before)


def test_a_shard_that_decompresses_short_is_not_kept(tmp_path: Path):
    data = bytes(1000)
    (tmp_path / "s.mds.zstd").write_bytes(zstandard.ZstdCompressor().compress(data))
    raw = FileInfo("s.mds", 1001)
    packed = FileInfo("s.mds.zstd", (tmp_path / "s.mds.zstd").stat().st_size)
    entry = ShardEntry("mds", 0, raw, packed, "zstd", (), None, {})
    with pytest.raises(ShardFormatError, match=r"to 1000 bytes but index\.json says 1001"):
        files_of(str(tmp_path), str(tmp_path)).materialize(entry)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.mds.zstd"]


# --- shards of large samples are read with pread, not mapped ----------------------------------


def make_large(folder: Path, n: int = 8, size: int = 20 << 10, **kwargs: Any):
    with MDSWriter(out=folder, columns={"blob": "bytes", "id": "int"}, **kwargs) as writer:
        for i in range(n):
            writer.write({"blob": bytes([i % 256]) * size, "id": i})
    entries = parse_index((folder / "index.json").read_bytes(), source="index.json")
    return entries, MDSSchema(entries[0].columns, sort=False)


#: Every non-empty shard is mapped or read with pread, as files over 8 MiB are.
NO_READ_WHOLE = ReadPolicy(read_whole_bytes=0)
PREAD_MEAN = NO_READ_WHOLE.pread_mean_bytes


@pytest.mark.parametrize(
    ("size", "zero_copy", "kind"),
    [
        (PREAD_MEAN, False, MDSFileView),
        (PREAD_MEAN // 2, False, MDSShardView),
        (PREAD_MEAN, True, MDSShardView),
    ],
)
def test_large_samples_are_read_not_mapped(tmp_path: Path, size: int, zero_copy: bool, kind):
    entries, schema = make_large(tmp_path, size=size)
    policy = NO_READ_WHOLE.replace(zero_copy=zero_copy)
    # A cache's copy (the cache folder is the folder): data read in place is never mapped.
    view = ShardFiles(str(tmp_path), str(tmp_path), policy=policy).open(entries[0], schema)
    assert type(view) is kind
    assert [bytes(view.get(i)["blob"]) for i in range(8)] == [bytes([i]) * size for i in range(8)]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_validate_hash_of_a_shard_read_with_pread(tmp_path: Path, compression: str | None):
    size = PREAD_MEAN
    entries, schema = make_large(tmp_path, compression=compression, hashes=["sha1"], size=size)
    files = ShardFiles(str(tmp_path), str(tmp_path / "cache"), "sha1", policy=NO_READ_WHOLE)
    view = files.open(entries[0], schema)
    assert type(view) is MDSFileView
    assert view[7]["id"] == 7
    path = tmp_path / entries[0].data_file.basename
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    with pytest.raises(ChecksumError, match=rf"{path}: sha1 digest is \w+ but index.json says"):
        ShardFiles(str(tmp_path), str(tmp_path / "cache"), "sha1", policy=NO_READ_WHOLE).open(
            entries[0], schema
        )


@pytest.mark.skipif(not HAS_PROC_STATUS, reason="reads Linux's /proc")
def test_reading_large_samples_does_not_grow_resident_memory(tmp_path: Path):
    """Reading 40 MiB of 64 KiB samples leaves the process's file-backed memory as it was.

    Mapping the same shards (zero_copy) makes it grow by the bytes read: the control.
    """
    entries, _ = make_large(tmp_path, n=640, size=64 << 10, size_limit=20 << 20)
    assert len(entries) >= 2
    assert entries[0].raw_data.bytes > 8 << 20  # the real sizes, nothing patched
    grown = {}
    for zero_copy in (False, True):
        with LocalDataset(str(tmp_path), zero_copy=zero_copy, cache_dir=str(tmp_path)) as ds:
            before = rss_file_kib()
            for batch in range(0, len(ds), 64):
                ids = list(range(batch, min(batch + 64, len(ds))))
                rows = [ds[i] for i in ids]
                assert [row["id"] for row in rows] == ids
                assert all(
                    bytes(row["blob"][:1]) == bytes([i % 256])
                    for i, row in zip(ids, rows, strict=True)
                )
                del rows
            grown[zero_copy] = rss_file_kib() - before
    assert grown[False] < 4 << 10, grown  # KiB: a few pages of code at most
    assert grown[True] > 32 << 10, grown  # the control: mapped, the 40 MiB read stay resident


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_damaged_dataset_read_in_place_is_never_to_be_deleted(
    tmp_path: Path, user_cache: Path, compression: str | None
):
    # fb0f0a9 said "delete it so it is fetched again" of the user's only copy.
    root = write_dataset(tmp_path / "ds", 60, size_limit=1024, compression=compression)
    damaged = sorted(root.glob("shard.00000.mds*"))[0]
    damaged.write_bytes(damaged.read_bytes()[:-7])
    with pytest.raises(ShardFormatError) as caught:
        list(StreamingDataset(local=str(root), batch_size=1, shuffle=False))
    message = str(caught.value)
    assert str(damaged) in message
    assert "delete" not in message
    assert "restore the file" in message


# --- data read in place may change under the reader ------------------------------------------

#: Reads a dataset in place in a child process, cuts its first shard short after the first
#: sample, reads on, and prints the error: a mapped shard would kill the child with SIGBUS.
CUT_SHORT_READER = """
import os, sys
from shardstream import ReadPolicy, StreamingDataset
from shardstream.errors import ShardFormatError
root, shard, shuffle, zero_copy = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
# As shards over 8 MiB of a dataset too large to read whole are opened:
policy = ReadPolicy(read_whole_bytes=0, in_place_whole_bytes=0, zero_copy=zero_copy)
ds = StreamingDataset(local=root, batch_size=8, shuffle=shuffle, read_policy=policy)
samples = iter(ds)
next(samples)
os.truncate(shard, 100)  # cp over the shard truncates it first
try:
    print("read", sum(1 for _ in samples))
except ShardFormatError as exc:
    print("ShardFormatError:", exc)
"""


@pytest.mark.parametrize(("shuffle", "zero_copy"), [(False, False), (True, False), (False, True)])
def test_a_shard_cut_short_while_read_in_place_is_a_format_error_not_sigbus(
    tmp_path: Path, shuffle: bool, zero_copy: bool
):
    root = tmp_path / "ds"
    with MDSWriter(out=root, columns={"id": "int", "blob": "bytes"}, size_limit=1 << 20) as w:
        for i in range(2000):
            w.write({"id": i, "blob": bytes([i % 256]) * 1000})
    shard = root / "shard.00000.mds"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [str(root), str(shard), str(int(shuffle)), str(int(zero_copy))]
    child = subprocess.run([sys.executable, "-c", CUT_SHORT_READER, *args], env=env,
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])  # -7: SIGBUS
    assert f"ShardFormatError: {shard}" in child.stdout, child.stdout
    assert "cut short" in child.stdout


#: As :data:`CUT_SHORT_READER`, in order, with the policy's own bound: each shard is read
#: whole when opened. Cuts every shard short after the first sample and prints each sample
#: read after (id, and whether its blob is right), then the error.
CUT_SHORT_WHOLE_READER = """
import os, sys
from shardstream import ReadPolicy, StreamingDataset
from shardstream.errors import ShardFormatError
root, shards = sys.argv[1], sys.argv[2:]
# As shards over 8 MiB of a small dataset are opened; the first batch too (not with pread, so
# that the first shard is read whole before it is cut short, not by a thread at some point):
policy = ReadPolicy(read_whole_bytes=0, first_batch_ranges=False)
ds = StreamingDataset(local=root, batch_size=8, shuffle=False, read_policy=policy)
samples = iter(ds)
next(samples)
for shard in shards:
    os.truncate(shard, 100)
try:
    for sample in samples:
        good = bytes(sample["blob"]) == bytes([sample["id"] % 256]) * 1000
        print("sample", sample["id"], good)
except ShardFormatError as exc:
    print("ShardFormatError:", exc)
"""


def test_a_small_dataset_read_in_place_is_read_whole_and_a_cut_short_shard_is_an_error(
    tmp_path: Path,
):
    root = tmp_path / "ds"
    with MDSWriter(out=root, columns={"id": "int", "blob": "bytes"}, size_limit=1 << 20) as w:
        for i in range(2000):
            w.write({"id": i, "blob": bytes([i % 256]) * 1000})
    shards = sorted(root.glob("shard.*.mds"))
    assert len(shards) >= 2
    first = parse_index((root / "index.json").read_bytes(), source="index.json")[0].samples
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", CUT_SHORT_WHOLE_READER, str(root), *map(str, shards)]
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                           check=False)  # fmt: skip
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])  # -7: SIGBUS
    lines = child.stdout.splitlines()
    # The first shard was read whole when opened: each sample of it comes out, exact, up to
    # the batch (of 8) that needs the next shard too.
    assert lines[:-1] == [f"sample {i} True" for i in range(1, first // 8 * 8)], lines[-3:]
    # The next one is opened after it was cut short: its whole read comes back short.
    assert lines[-1].startswith(f"ShardFormatError: {shards[1]} is 100 bytes but index.json")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_shard_read_whole_in_place_gives_each_samples_bytes(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A real shard over read_whole_bytes, of small samples of random sizes and bytes: read
    # whole, and read as runs with pread, each batch gives each sample's bytes, in order.
    folder = tmp_path_factory.mktemp("whole")
    payloads = _random_payloads(data.draw(st.integers(0, 2**32 - 1)))
    with MDSWriter(out=folder, columns={"blob": "bytes", "id": "int"}) as writer:
        for index, payload in enumerate(payloads):
            writer.write({"blob": payload, "id": index})
    entry = parse_index((folder / "index.json").read_bytes(), source="index.json")[0]
    schema = MDSSchema(entry.columns, sort=False)
    raw = (folder / entry.data_file.basename).read_bytes()
    offsets = np.frombuffer(raw, np.uint32, entry.samples + 1, 4).tolist()
    size = entry.raw_data.bytes
    views = {  # the dataset within the policy's bound, and over it
        whole: ShardFiles(
            str(folder), policy=ReadPolicy(read_whole_bytes=0, in_place_whole_bytes=size * whole)
        ).open(entry, schema, shared_bytes=size)
        for whole in (True, False)
    }
    whole = views[True]
    assert isinstance(whole, MDSShardView)
    assert whole.mapped is None  # read whole, never mapped
    assert not whole.in_memory  # another process reads it as cheaply: may go by id
    assert type(views[False]) is MDSFileView
    assert views[False].reads_runs
    for index in range(entry.samples):  # the whole read holds the file's bytes
        assert whole.sample_bytes(index) == raw[offsets[index] : offsets[index + 1]]
    batches = st.lists(st.integers(0, entry.samples - 1), min_size=1, max_size=300)
    for batch in data.draw(st.lists(batches, min_size=1, max_size=4)):
        for view in views.values():
            blobs, ids = view.read_columns(batch)
            assert list(ids) == batch
            assert [bytes(blob) for blob in blobs] == [payloads[index] for index in batch]


def _random_payloads(seed: int) -> list[bytes]:
    """Between 200 and 800 samples of 0-1500 random bytes each."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 1500, rng.integers(200, 800)).tolist()
    return [rng.bytes(size) for size in sizes]
