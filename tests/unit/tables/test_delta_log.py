"""The Delta log's copy in the cache: what a store lists is not trusted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.delta_data import rows, same_sized_commits, write

from shardstream import StreamingDataset
from shardstream.errors import ConfigurationError
from shardstream.storage import DownloadOptions, open_store
from shardstream.storage.base import ObjectInfo
from shardstream.tables.delta_log import _mirror


def test_a_listed_log_key_that_climbs_out_of_the_log_is_refused(tmp_path: Path) -> None:
    remote = tmp_path / "table"
    (remote / "_delta_log").mkdir(parents=True)
    (remote / "_delta_log" / "00000000000000000000.json").write_text("{}\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    listing = {
        "_delta_log/00000000000000000000.json": ObjectInfo(size=3, etag=None),
        "_delta_log/../../shard.00000.mds": ObjectInfo(size=3, etag=None),
    }
    with pytest.raises(ConfigurationError, match=r"must not climb with '\.\.'"):
        _mirror(open_store(str(remote)), listing, str(cache), DownloadOptions(), str(remote))
    assert not (cache / "shard.00000.mds").exists()


# --- a copy is kept by the identity of what it was copied from ----------------------------------


def recreated(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A table, a table of other rows with commits of the same names and sizes, a cache."""
    table, new = tmp_path / "table", tmp_path / "new"
    write(table, rows(10, 40))
    write(table, rows(60, 10))
    write(new, rows(50, 40))
    write(new, rows(90, 10))
    same_sized_commits(table, new)
    return table, new, tmp_path / "cache"


def stream_ids(table: Path, cache: Path) -> list[int]:
    ds = StreamingDataset(remote=str(table), local=str(cache), batch_size=4)
    return sorted(int(sample["id"]) for sample in ds)


def test_a_table_written_again_at_its_path_is_not_read_through_the_old_log(tmp_path: Path):
    table, new, cache = recreated(tmp_path)
    assert stream_ids(table, cache) == [*range(10, 50), *range(60, 70)]
    shutil.rmtree(table)
    shutil.copytree(new, table)  # versions 0 and 1 again, of other rows
    assert stream_ids(table, cache) == list(range(50, 100))


def test_a_log_object_rewritten_with_its_mtime_set_back_is_fetched_again(tmp_path: Path):
    # A copy is trusted by equality of identity, so a commit file rewritten in place whose
    # mtime was set back (a clock behind, a copy tool keeping times) is fetched again.
    table, new, cache = recreated(tmp_path)
    commit = table / "_delta_log" / "00000000000000000001.json"
    stamp = commit.stat().st_mtime_ns
    assert stream_ids(table, cache) == [*range(10, 50), *range(60, 70)]
    for item in (new / "_delta_log").iterdir():  # the log rewritten in place, files kept
        (table / "_delta_log" / item.name).write_bytes(item.read_bytes())
    for item in new.glob("*.parquet"):
        shutil.copy(item, table / item.name)
    os.utime(commit, ns=(stamp - 10**12, stamp - 10**12))
    assert stream_ids(table, cache) == list(range(50, 100))


class UntaggedStore:
    """A local store whose objects carry no version tag (as some backends list them)."""

    def __init__(self, root: Path) -> None:
        self.inner = open_store(str(root))
        self.gets: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        return {k: ObjectInfo(i.size) for k, i in self.inner.list_info(prefix).items()}

    def get_bytes(self, key: str) -> bytes:
        self.gets.append(key)
        data: bytes = self.inner.get_bytes(key)
        return data


def test_log_copies_are_fetched_once_when_tagged_and_each_time_when_not(tmp_path: Path):
    table, _, cache = recreated(tmp_path)
    store = open_store(str(table))
    commits = {f"_delta_log/{p.name}" for p in (table / "_delta_log").iterdir()}
    _mirror(store, store.list_info(""), str(cache), DownloadOptions(), str(table))
    copied = json.loads((cache / ".shardstream" / "delta-log.json").read_text())["files"]
    assert set(copied) == commits
    untagged = UntaggedStore(table)
    listing = untagged.list_info("")
    before = {p: p.stat().st_ino for p in (cache / ".shardstream" / "delta-log").rglob("*.json")}
    _mirror(store, store.list_info(""), str(cache), DownloadOptions(), str(table))
    after = {p: p.stat().st_ino for p in (cache / ".shardstream" / "delta-log").rglob("*.json")}
    assert after == before  # unchanged: nothing fetched again
    _mirror(untagged, listing, str(cache), DownloadOptions(), str(table))
    assert set(untagged.gets) == commits


# --- the record of copies is read as untrusted ---------------------------------------------------


def copied_once(tmp_path: Path) -> tuple[Any, Path, Path, Path]:
    """A table's log copied once into a cache: the store, table, cache and record path."""
    table, cache = tmp_path / "table", tmp_path / "cache"
    write(table, rows(10, 40))
    store = open_store(str(table))
    _mirror(store, store.list_info(""), str(cache), DownloadOptions(), str(table))
    return store, table, cache, cache / ".shardstream" / "delta-log.json"


def test_a_record_naming_a_file_outside_the_copy_deletes_nothing_there(tmp_path: Path):
    # delta-log.json lies (edited, corrupted, restored from elsewhere): a key that climbs out of
    # the copy named a file the next start deleted, as a key no longer in the table.
    store, table, cache, record = copied_once(tmp_path)
    victim = tmp_path / "notes.txt"
    victim.write_text("mine")
    document = json.loads(record.read_text())
    document["files"]["../../../notes.txt"] = "4:x"
    document["files"]["/" + str(victim).lstrip("/")] = "4:x"
    record.write_text(json.dumps(document))
    _mirror(store, store.list_info(""), str(cache), DownloadOptions(), str(table))
    assert victim.read_text() == "mine"
    assert stream_ids(table, cache) == list(range(10, 50))  # and the table reads as before


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 1, "files": [1, 2]}',
        '{"version": 1, "files": {"_delta_log/x.json": Infinity}}',
        "[" * 100_000 + "]" * 100_000,  # nested past the parser's recursion limit
        "\xff\xfe not json",
    ],
    ids=["list", "infinity", "deep", "bytes"],
)
def test_a_malformed_record_of_copies_is_ignored_and_the_log_fetched_again(
    tmp_path: Path, text: str
):
    store, table, cache, record = copied_once(tmp_path)
    record.write_bytes(text.encode("utf-8", "surrogateescape"))
    _mirror(store, store.list_info(""), str(cache), DownloadOptions(), str(table))
    copied = json.loads(record.read_text())["files"]
    assert set(copied) == {f"_delta_log/{p.name}" for p in (table / "_delta_log").iterdir()}
