from __future__ import annotations

import os
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import zstandard

from shardstream import MDSWriter
from shardstream.cache.shard_files import ShardFiles
from shardstream.errors import (
    ChecksumError,
    ConfigurationError,
    ShardFormatError,
    ShardNotFoundError,
)
from shardstream.format.index import ShardEntry, parse_index
from shardstream.format.mds import MDSSchema, MDSShardView


def make(folder: Path, n: int = 6, **kwargs: Any) -> tuple[ShardEntry, MDSSchema]:
    with MDSWriter(out=folder, columns={"id": "int", "text": "str"}, **kwargs) as writer:
        for i in range(n):
            writer.write({"id": i, "text": f"t{i}"})
    entry = parse_index((folder / "index.json").read_bytes(), source="index.json")[0]
    return entry, MDSSchema(entry.columns, sort=False)


def samples(view: Any) -> list[dict[str, Any]]:
    return [view[i] for i in range(len(view))]


EXPECTED = [{"id": i, "text": f"t{i}"} for i in range(6)]


def test_unknown_validate_hash_is_refused_up_front(tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"validate_hash='sha0' is not a known algorithm"):
        ShardFiles(str(tmp_path), validate_hash="sha0")


def test_open_an_uncompressed_shard(tmp_path: Path):
    entry, schema = make(tmp_path)
    view = ShardFiles(str(tmp_path)).open(entry, schema)
    assert isinstance(view, MDSShardView)
    assert samples(view) == EXPECTED
    assert view.source == os.path.join(str(tmp_path), "shard.00000.mds")


def test_missing_shard_names_the_file(tmp_path: Path):
    entry, schema = make(tmp_path)
    os.remove(tmp_path / "shard.00000.mds")
    with pytest.raises(
        ShardNotFoundError, match=f"shard file {tmp_path}/shard.00000.mds is missing"
    ) as info:
        ShardFiles(str(tmp_path)).open(entry, schema)
    assert isinstance(info.value, FileNotFoundError)


def test_shard_of_the_wrong_size(tmp_path: Path):
    entry, schema = make(tmp_path)
    path = tmp_path / "shard.00000.mds"
    path.write_bytes(path.read_bytes()[:-3])
    size = entry.raw_data.bytes
    message = rf"{path} is {size - 3} bytes but index.json says {size}"
    with pytest.raises(ShardFormatError, match=message):
        ShardFiles(str(tmp_path)).open(entry, schema)


def test_empty_shard_file(tmp_path: Path):
    entry, schema = make(tmp_path)
    (tmp_path / "shard.00000.mds").write_bytes(b"")
    with pytest.raises(ShardFormatError, match=r"is 0 bytes but index.json says"):
        ShardFiles(str(tmp_path)).open(entry, schema)


def test_compressed_shard_is_decompressed_into_the_cache(tmp_path: Path):
    root, cache = tmp_path / "ds", tmp_path / "cache"
    entry, schema = make(root, compression="zstd")
    files = ShardFiles(str(root), str(cache))
    assert samples(files.open(entry, schema)) == EXPECTED
    assert os.listdir(cache) == ["shard.00000.mds"]  # renamed into place: no temporary left
    assert (cache / "shard.00000.mds").stat().st_size == entry.raw_data.bytes
    assert sorted(os.listdir(root)) == ["index.json", "shard.00000.mds.zstd"]


def test_decompressed_shard_is_reused(tmp_path: Path):
    root, cache = tmp_path / "ds", tmp_path / "cache"
    entry, schema = make(root, compression="gz")
    ShardFiles(str(root), str(cache)).open(entry, schema)
    stamp = (cache / "shard.00000.mds").stat().st_mtime_ns
    os.remove(root / "shard.00000.mds.gz")  # only the decompressed copy is left
    assert samples(ShardFiles(str(root), str(cache)).open(entry, schema)) == EXPECTED
    assert (cache / "shard.00000.mds").stat().st_mtime_ns == stamp


def test_cache_defaults_to_the_dataset_folder(tmp_path: Path):
    entry, schema = make(tmp_path, compression="bz2")
    ShardFiles(str(tmp_path)).open(entry, schema)
    assert (tmp_path / "shard.00000.mds").stat().st_size == entry.raw_data.bytes


def test_a_cached_copy_of_the_wrong_size_is_replaced(tmp_path: Path):
    root, cache = tmp_path / "ds", tmp_path / "cache"
    entry, schema = make(root, compression="zstd")
    cache.mkdir()
    (cache / "shard.00000.mds").write_bytes(b"half a shard")
    assert samples(ShardFiles(str(root), str(cache)).open(entry, schema)) == EXPECTED


def test_corrupt_compressed_shard(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    path = tmp_path / "shard.00000.mds.zstd"
    path.write_bytes(b"\x00" * entry.zip_data.bytes)  # type: ignore[union-attr]
    with pytest.raises(ShardFormatError, match=rf"{path} is not valid zstd data"):
        ShardFiles(str(tmp_path), str(tmp_path / "cache")).open(entry, schema)
    assert not (tmp_path / "cache" / "shard.00000.mds").exists()


def test_compressed_shard_of_the_wrong_size(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    path = tmp_path / "shard.00000.mds.zstd"
    path.write_bytes(path.read_bytes() + b"\x00")
    with pytest.raises(ShardFormatError, match=rf"{path} is {entry.zip_data.bytes + 1} bytes"):  # type: ignore[union-attr]
        ShardFiles(str(tmp_path)).open(entry, schema)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_validate_hash_accepts_intact_files(tmp_path: Path, compression: str | None):
    entry, schema = make(tmp_path, compression=compression, hashes=["sha1", "xxh64"])
    for algorithm in ("sha1", "xxh64"):
        assert (
            samples(
                ShardFiles(str(tmp_path), str(tmp_path / algorithm), algorithm).open(entry, schema)
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
        ShardFiles(str(tmp_path), str(tmp_path / "cache"), "sha1").open(entry, schema)
    assert not (tmp_path / "cache").exists()


def test_validate_hash_not_in_the_index(tmp_path: Path):
    entry, schema = make(tmp_path, hashes=["sha1"])
    with pytest.raises(
        ConfigurationError,
        match=r"validate_hash='md5', but index.json records only \['sha1'\] digests for",
    ):
        ShardFiles(str(tmp_path), validate_hash="md5").open(entry, schema)


def test_validate_hash_without_any_digest(tmp_path: Path):
    entry, schema = make(tmp_path)
    with pytest.raises(ConfigurationError, match="records only no digests"):
        ShardFiles(str(tmp_path), validate_hash="sha1").open(entry, schema)


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
        ShardFiles(str(tmp_path)).open(renamed(entry, basename), schema)


def test_a_compressed_basename_that_names_no_file_is_a_missing_shard(tmp_path: Path):
    entry, schema = make(tmp_path, compression="zstd")
    with pytest.raises(ShardNotFoundError, match="is missing \\(or not a file\\)"):
        ShardFiles(str(tmp_path)).open(renamed(entry, "x" * 300, "zip_data"), schema)


@pytest.mark.parametrize("basename", ["x" * 300, "shard.00000.mds.zstd/inner", "folder"])
def test_a_decompressed_basename_that_cannot_be_a_file(tmp_path: Path, basename: str):
    entry, schema = make(tmp_path, compression="zstd")
    (tmp_path / "folder").mkdir()
    with pytest.raises(ShardFormatError, match="cannot store the decompressed shard at"):
        ShardFiles(str(tmp_path)).open(renamed(entry, basename), schema)


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
            ShardFiles(str(tmp_path)).open(entry, schema)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
