"""Dropping a stream's stale cached files: exactly those of changed objects, found in one scan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardstream.cache.provenance import drop_stale_files, present_sources
from shardstream.format.index import FileInfo, ShardEntry


def entry(raw: str, zipped: str | None = None) -> ShardEntry:
    """An MDS entry naming ``raw`` (and its compressed file ``zipped``)."""
    return ShardEntry(
        format="mds",
        samples=1,
        raw_data=FileInfo(raw, 20),
        zip_data=None if zipped is None else FileInfo(zipped, 12),
        compression=None if zipped is None else "zstd",
        hashes=(),
        size_limit=None,
        columns={"id": "int"},
    )


def files(root: Path) -> set[str]:
    """Every entry under ``root`` but the state folder, as paths relative to it."""
    found = set()
    for folder, folders, names in os.walk(root):
        folders[:] = [name for name in folders if name != ".shardstream"]
        for name in names:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def test_the_scan_drops_exactly_the_stale_files(tmp_path: Path):
    local = tmp_path / "cache"
    (local / "sub").mkdir(parents=True)
    entries = [
        entry("a.mds"),  # stale, cached
        entry("b.mds"),  # fresh, cached
        entry("c.mds"),  # stale, not cached
        entry("sub/d.mds"),  # stale, cached in a subfolder
        entry("sub/e.mds"),  # fresh, in a subfolder
        entry("f.mds", "f.mds.zstd"),  # stale through its compressed object, both cached
        entry("g.mds", "g.mds.zstd"),  # its raw name is listed as stale: not its source
        entry("h.mds"),  # stale: a dangling link planted at its name goes too
        entry("nofolder/i.mds"),  # stale, its folder absent
    ]
    for name in ("a.mds", "b.mds", "sub/d.mds", "sub/e.mds", "f.mds", "f.mds.zstd"):
        (local / name).write_bytes(b"x")
    for name in ("g.mds", "g.mds.zstd", "unrelated.bin", "sub/unrelated.bin"):
        (local / name).write_bytes(b"x")
    (local / "h.mds").symlink_to(tmp_path / "nowhere")
    stale = {"a.mds", "c.mds", "sub/d.mds", "f.mds.zstd", "g.mds", "h.mds", "nofolder/i.mds"}

    dropped = drop_stale_files(str(local), entries, stale, lock_timeout=5)

    assert files(local) == {
        "b.mds", "sub/e.mds", "g.mds", "g.mds.zstd", "unrelated.bin", "sub/unrelated.bin",
    }  # fmt: skip
    assert dropped == 5  # a, sub/d, f and f.zstd, the link h


def test_files_of_unknown_origin_all_go(tmp_path: Path):
    local = tmp_path / "cache"
    local.mkdir()
    for name in ("a.mds", "b.mds", "other.bin"):
        (local / name).write_bytes(b"x")
    dropped = drop_stale_files(
        str(local), [entry("a.mds"), entry("b.mds"), entry("c.mds")], None, lock_timeout=5
    )
    assert dropped == 2
    assert files(local) == {"other.bin"}  # not the index's: left alone


@pytest.mark.parametrize("present", [False, True])
def test_one_scan_of_the_folder_not_a_look_per_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: bool
):
    """A large index on an empty (or unrelated) cache costs one folder scan, no ``lstat`` each."""
    local = tmp_path / "cache"
    if present:
        local.mkdir()
        (local / "other.bin").write_bytes(b"x")
    entries = [entry(f"shard.{k:05d}.mds") for k in range(2000)]
    looks = []
    real_lstat = os.lstat

    def counted(path: object, *args: object, **kwargs: object) -> os.stat_result:
        looks.append(path)
        return real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", counted)
    assert drop_stale_files(str(local), entries, None, lock_timeout=5) == 0
    assert len(looks) < 10  # the base looked at each of the 2,000 shards' paths


def test_present_sources_names_the_source_of_each_shard_with_a_cached_file(tmp_path: Path):
    local = tmp_path / "cache"
    (local / "sub").mkdir(parents=True)
    entries = [
        entry("a.mds"),  # cached
        entry("b.mds"),  # not cached
        entry("sub/c.mds"),  # cached in a subfolder
        entry("d.mds", "d.mds.zstd"),  # only its compressed file: its source
        entry("e.mds", "e.mds.zstd"),  # only its decompressed file: the source all the same
        entry("nofolder/f.mds"),
    ]
    for name in ("a.mds", "sub/c.mds", "d.mds.zstd", "e.mds", "unrelated.mds"):
        (local / name).write_bytes(b"x")
    assert present_sources(str(local), entries) == {
        "a.mds",
        "sub/c.mds",
        "d.mds.zstd",
        "e.mds.zstd",
    }
    assert present_sources(str(tmp_path / "absent"), entries) == set()
