"""The cache follows what the remote holds now: regenerated datasets, other remotes, requests."""

from __future__ import annotations

import json
import os
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.cache import sync_index
from shardstream.cache.provenance import SOURCE_RECORD, read_record
from shardstream.errors import (
    CacheConflictError,
    IndexFormatError,
    ShardFormatError,
    StorageError,
)
from shardstream.storage import DownloadOptions, store_base
from shardstream.storage.base import ObjectInfo
from shardstream.storage.local import LocalStore

COLUMNS = {"id": "int", "text": "str"}


def write(root: Path, label: str, samples: int = 30, compression: str | None = None) -> None:
    """A dataset without hashes (MDSWriter's default) whose text is ``label`` + the id.

    Every label has the same length, so datasets written with different labels have the same
    shard names and sizes, and byte-identical indexes.
    """
    with MDSWriter(
        out=str(root), columns=COLUMNS, size_limit=400, compression=compression, exist_ok=True
    ) as writer:
        for i in range(samples):
            writer.write({"id": i, "text": f"{label}-{i:04d}"})


def texts(remote: Path, local: Path) -> list[str]:
    dataset = StreamingDataset(remote=str(remote), local=str(local), batch_size=1)
    return [sample["text"] for sample in dataset]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_dataset_regenerated_in_place_is_read_anew(tmp_path: Path, compression: str | None):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa", compression=compression)
    index = (remote / "index.json").read_bytes()
    assert all(text.startswith("aaa-") for text in texts(remote, local))

    # Same names and sizes, so the same index.json: compressed, some labels give other sizes.
    for label in (c * 3 for c in string.ascii_lowercase[1:]):
        write(remote, label, compression=compression)
        if (remote / "index.json").read_bytes() == index:
            break
    else:
        raise AssertionError("no label rewrites the dataset with the same index")

    assert texts(remote, local) == [f"{label}-{i:04d}" for i in range(30)]


def test_another_remote_through_the_same_folder_is_refused(tmp_path: Path):
    first, second, local = tmp_path / "a", tmp_path / "b", tmp_path / "cache"
    write(first, "aaa")
    write(second, "bbb")
    assert texts(first, local)[0] == "aaa-0000"
    with pytest.raises(CacheConflictError) as caught:
        texts(second, local)
    message = str(caught.value)
    assert str(local) in message
    assert str(first) in message
    assert str(second) in message
    assert texts(first, local)[0] == "aaa-0000"  # the folder still serves its own remote


def test_cache_of_unknown_origin_is_not_trusted(tmp_path: Path):
    """Files cached before any record (an older version, another tool) are fetched anew."""
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old")
    texts(remote, local)
    os.remove(local / ".shardstream" / SOURCE_RECORD)
    write(remote, "new")
    assert texts(remote, local)[0] == "new-0000"


class CountingStore:
    """A local store that counts its requests, as a remote's bill would."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalStore(str(root))
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not callable(attribute) or name == "url":
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attribute(*args, **kwargs)

        return counted


def test_one_listing_per_start_and_no_request_per_shard(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old", samples=200)
    shards = len(json.loads((remote / "index.json").read_bytes())["shards"])
    assert shards > 10
    options = DownloadOptions()
    store = CountingStore(remote)
    assert sync_index(store, str(local), options) is not None
    assert store.calls == {"list_info": 1, "get_bytes": 1}

    store.calls.clear()
    assert sync_index(store, str(local), options) is None
    assert store.calls == {"list_info": 1}  # unchanged: one listing, nothing fetched

    write(remote, "new", samples=200)
    store.calls.clear()
    sync_index(store, str(local), options)
    assert store.calls == {"list_info": 1, "get_bytes": 1}  # the index object was rewritten


class SplittingStore(LocalStore):
    """A local store that lists in key ranges, as S3 does, and keeps the keys it split at."""

    _lists_from_key = True

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.splits: list[list[str]] = []

    def list_info(
        self, prefix: str = "", *, split_at: Sequence[str] = (), in_flight: int | None = None
    ) -> dict[str, ObjectInfo]:
        self.splits.append(list(split_at))
        return super().list_info(prefix, split_at=split_at, in_flight=in_flight)


def test_a_start_lists_in_ranges_split_at_the_names_it_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 2)
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old", samples=200)
    names = sorted(p.name for p in remote.iterdir())
    store = SplittingStore(remote)
    assert sync_index(store, str(local), DownloadOptions()) is not None
    # Nothing known yet: the index, fetched first, names the shards.
    assert [sorted(split) for split in store.splits] == [[n for n in names if n != "index.json"]]
    assert sync_index(store, str(local), DownloadOptions()) is None  # the same listing
    assert sorted(store.splits[-1]) == names  # split at the names the record holds
    os.remove(local / ".shardstream" / SOURCE_RECORD)
    sync_index(store, str(local), DownloadOptions())
    # No record: the cached index names the shards.
    assert sorted(store.splits[-1]) == [name for name in names if name != "index.json"]


def test_a_changed_shard_is_dropped_and_the_others_kept(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old")
    texts(remote, local)
    cached = sorted(p.name for p in local.glob("shard.*.mds"))
    before = {name: (local / name).stat().st_ino for name in cached}
    target = remote / cached[1]
    target.write_bytes(target.read_bytes())  # rewritten in place: same bytes, a new identity

    sync_index(LocalStore(str(remote)), str(local), DownloadOptions())
    assert not (local / cached[1]).exists()
    assert {n: (local / n).stat().st_ino for n in cached if n != cached[1]} == {
        n: i for n, i in before.items() if n != cached[1]
    }


def test_record_names_the_remote_and_every_object(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old")
    sync_index(LocalStore(str(remote)), str(local), DownloadOptions())
    record = read_record(str(local / ".shardstream"))
    assert record is not None
    assert record.complete
    assert record.remote == LocalStore(str(remote)).url("")
    assert set(record.objects) == {p.name for p in remote.iterdir()}


class UnlistableStore(CountingStore):
    """A store that cannot list, as HTTP cannot: the index alone is checked."""

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        from shardstream.errors import UnsupportedURLError

        self.calls["list_info"] = self.calls.get("list_info", 0) + 1
        raise UnsupportedURLError("no listing here")


def test_a_store_without_listing_checks_the_index(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old")
    store = UnlistableStore(remote)
    sync_index(store, str(local), DownloadOptions())
    store.calls.clear()
    assert sync_index(store, str(local), DownloadOptions()) is None
    assert store.calls == {"list_info": 1, "info": 1}
    record = read_record(str(local / ".shardstream"))
    assert record is not None
    assert not record.complete
    assert set(record.objects) == {"index.json"}


def test_a_store_without_listing_drops_the_shards_whose_index_entry_changed(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    with MDSWriter(out=str(remote), columns=COLUMNS, size_limit=400, hashes=["xxh64"]) as writer:
        for i in range(30):
            writer.write({"id": i, "text": f"aaa-{i:04d}"})
    store = UnlistableStore(remote)
    sync_index(store, str(local), DownloadOptions())
    for shard in remote.glob("shard.*.mds"):  # cached, as a read would leave them
        (local / shard.name).write_bytes(shard.read_bytes())
    first = sorted(remote.glob("shard.*.mds"))[0].name
    with MDSWriter(
        out=str(remote), columns=COLUMNS, size_limit=400, hashes=["xxh64"], exist_ok=True
    ) as writer:
        for i in range(30):
            writer.write({"id": i, "text": f"{'b' if i == 0 else 'a'}aa-{i:04d}"})
    sync_index(store, str(local), DownloadOptions())
    assert not (local / first).exists()  # its hash changed in the new index
    assert len(list(local.glob("shard.*.mds"))) == len(list(remote.glob("shard.*.mds"))) - 1


# --- freshness never rests on a clock -----------------------------------------------------------

FAR_FUTURE_NS = 4_000_000_000 * 10**9  # the year 2096
FAR_PAST_NS = 10**9  # 1970


def rewrite_with_the_same_index(remote: Path) -> str:
    """Rewrite ``remote`` (written with label ``aaa``) so that index.json is byte-identical."""
    index = (remote / "index.json").read_bytes()
    for label in (c * 3 for c in string.ascii_lowercase[1:]):
        write(remote, label)
        if (remote / "index.json").read_bytes() == index:
            return label
    raise AssertionError("no label rewrites the dataset with the same index")


def test_a_record_stamped_by_a_clock_ahead_does_not_hide_a_rewrite(tmp_path: Path):
    # The state folder was written while the clock ran ahead (an NTP step back since, or
    # another node's clock over a shared folder): its times lie in this process's future.
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    assert texts(remote, local)[0] == "aaa-0000"
    path = local / ".shardstream" / SOURCE_RECORD
    document = json.loads(path.read_text())
    document["listed_ns"] = FAR_FUTURE_NS  # what fb0f0a9 compared with its own clock
    path.write_text(json.dumps(document))
    for folder, _, names in os.walk(local):
        for name in names:
            os.utime(os.path.join(folder, name), ns=(FAR_FUTURE_NS, FAR_FUTURE_NS))

    label = rewrite_with_the_same_index(remote)
    assert texts(remote, local) == [f"{label}-{i:04d}" for i in range(30)]


def test_a_rewrite_stamped_by_a_clock_behind_is_noticed(tmp_path: Path):
    # The writer's clock is far behind: the new objects look older than the cached copies.
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    assert texts(remote, local)[0] == "aaa-0000"
    label = rewrite_with_the_same_index(remote)
    for item in remote.iterdir():
        os.utime(item, ns=(FAR_PAST_NS, FAR_PAST_NS))
    assert texts(remote, local) == [f"{label}-{i:04d}" for i in range(30)]


def test_an_earlier_versions_record_is_generation_0_and_the_next_write_bumps_it(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    store = LocalStore(str(remote))
    sync_index(store, str(local), DownloadOptions())
    state = local / ".shardstream"
    first = read_record(str(state))
    assert first is not None
    assert first.generation == 1
    path = state / SOURCE_RECORD
    document = json.loads(path.read_text())
    del document["generation"]
    document["listed_ns"] = FAR_FUTURE_NS
    path.write_text(json.dumps(document))
    legacy = read_record(str(state))
    assert legacy is not None
    assert legacy.generation == 0
    assert sync_index(store, str(local), DownloadOptions()) is None  # unchanged: no write
    rewrite_with_the_same_index(remote)
    sync_index(store, str(local), DownloadOptions())
    after = read_record(str(state))
    assert after is not None
    assert after.generation == 1
    assert dict(after.objects) == {
        key: f"{info.size}:{info.etag}" for key, info in store.list_info().items()
    }


class RacedStore(CountingStore):
    """A store rewritten, and synced by another process, right after its first listing."""

    def __init__(self, root: Path, local: Path) -> None:
        super().__init__(root)
        self.root, self.local = root, local
        self.label = ""

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        listing = self.inner.list_info(prefix)
        self.calls["list_info"] = self.calls.get("list_info", 0) + 1
        if self.calls["list_info"] == 1:  # ours is now the older listing
            self.label = rewrite_with_the_same_index(self.root)
            sync_index(LocalStore(str(self.root)), str(self.local), DownloadOptions())
        return listing


def test_a_listing_older_than_the_recorded_one_is_not_recorded(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    texts(remote, local)
    before = read_record(str(local / ".shardstream"))
    store = RacedStore(remote, local)
    sync_index(store, str(local), DownloadOptions())
    assert store.calls["list_info"] == 2  # listed again under the lock
    record = read_record(str(local / ".shardstream"))
    assert before is not None
    assert record is not None
    assert record.generation == before.generation + 1  # the other process's write alone
    current = {key: f"{i.size}:{i.etag}" for key, i in LocalStore(str(remote)).list_info().items()}
    assert dict(record.objects) == current
    assert texts(remote, local) == [f"{store.label}-{i:04d}" for i in range(30)]


def test_a_rewrite_in_place_that_restores_the_modification_times_is_noticed(tmp_path: Path):
    # `cp -p new/* remote/` writes into the same inodes, same sizes, and sets the old times back:
    # only the change time, which no user can set, tells the files apart.
    remote, local, other = tmp_path / "remote", tmp_path / "cache", tmp_path / "other"
    write(remote, "aaa")
    assert texts(remote, local)[0] == "aaa-0000"
    write(other, "aaa")
    label = rewrite_with_the_same_index(other)
    for source in other.iterdir():
        target = remote / source.name
        before = target.stat()
        with open(target, "r+b") as handle:  # the same inode, as cp writes over a file
            handle.write(source.read_bytes())
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = target.stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
        )
    assert texts(remote, local) == [f"{label}-{i:04d}" for i in range(30)]


@pytest.mark.parametrize(
    "generation",
    ["Infinity", "-Infinity", "NaN", '"12"', "true", "-7", "1e400", "9" * 5000],
)
def test_a_record_whose_generation_lies_is_ignored_or_compared_never_a_crash(
    tmp_path: Path, generation: str
):
    # source.json is the cache's own file, but read as untrusted: a generation that is not an
    # integer makes the record malformed (its files are then not trusted), and any integer is
    # only compared for equality, so none can crash a start or hide a rewrite.
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    assert texts(remote, local)[0] == "aaa-0000"
    path = local / ".shardstream" / SOURCE_RECORD
    text = path.read_text()
    document = json.loads(text)
    path.write_text(
        text.replace(f'"generation": {document["generation"]}', f'"generation": {generation}')
    )
    assert texts(remote, local)[0] == "aaa-0000"
    label = rewrite_with_the_same_index(remote)
    assert texts(remote, local) == [f"{label}-{i:04d}" for i in range(30)]


def test_a_record_nested_past_the_parsers_limit_is_ignored(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    assert texts(remote, local)[0] == "aaa-0000"
    (local / ".shardstream" / SOURCE_RECORD).write_text("[" * 100_000 + "]" * 100_000)
    label = rewrite_with_the_same_index(remote)
    assert texts(remote, local) == [f"{label}-{i:04d}" for i in range(30)]


def test_an_index_whose_shard_sizes_the_listing_belies_is_refused_before_any_plan(
    tmp_path: Path,
):
    # A lying index (or one of other files) claims a shard far larger than the object the
    # store lists, with samples to match: e03e338 sized the epoch by the claim (a billion
    # samples: gigabytes of ids) before the shard was fetched and found short.
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "aaa")
    index = json.loads((remote / "index.json").read_text())
    shard = index["shards"][1]
    name, real = shard["raw_data"]["basename"], shard["raw_data"]["bytes"]
    shard["samples"], shard["raw_data"]["bytes"] = 10**6, 4 * 10**6 + 100
    (remote / "index.json").write_text(json.dumps(index))
    dataset = StreamingDataset(remote=str(remote), local=str(local), batch_size=1)
    with pytest.raises(ShardFormatError) as caught:
        len(dataset)
    message = str(caught.value)
    assert f"shard 1 ({name})" in message
    assert f"{4 * 10**6 + 100} bytes" in message
    assert f"lists {real} bytes" in message


class IndexFirstStore(SplittingStore):
    """A store that lists in ranges and tells what its reads return; counts its requests.

    ``on_read`` runs after each whole read with identity (the index's, at a first start), and
    ``on_list`` after each listing, as a writer rewriting the dataset at that moment would.
    """

    def __init__(
        self,
        root: Path,
        on_read: Any = None,
        tagged: bool = True,
        on_list: Any = None,
        lists_tags: bool = True,
    ) -> None:
        super().__init__(root)
        self.calls: list[str] = []
        self.on_read = on_read
        self.on_list = on_list
        self.tagged = tagged
        self.lists_tags = lists_tags

    def get_bytes_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        self.calls.append(f"get_bytes_info {key}")
        data, info = super().get_bytes_info(key)
        if self.on_read is not None:
            self.on_read()
        return data, (info if self.tagged else ObjectInfo(info.size))

    def get_bytes(self, key: str) -> bytes:
        self.calls.append(f"get_bytes {key}")
        return super().get_bytes(key)

    def list_info(
        self, prefix: str = "", *, split_at: Sequence[str] = (), in_flight: int | None = None
    ) -> dict[str, ObjectInfo]:
        self.calls.append("list_info")
        listing = super().list_info(prefix, split_at=split_at, in_flight=in_flight)
        if self.on_list is not None:
            self.on_list()
        if not self.lists_tags:
            return {key: ObjectInfo(info.size) for key, info in listing.items()}
        return listing


def test_a_first_start_fetches_the_index_once_then_lists_split_at_its_names(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old", samples=200)
    store = IndexFirstStore(remote)
    entries = sync_index(store, str(local), DownloadOptions())
    assert entries is not None
    assert store.calls == ["get_bytes_info index.json", "list_info"]
    assert len(store.splits[0]) == len(entries) > 10
    record = read_record(str(local / ".shardstream"))
    assert record is not None
    assert dict(record.objects) == {k: f"{i.size}:{i.etag}" for k, i in store.list_info().items()}
    assert sync_index(store, str(local), DownloadOptions()) is None  # the record holds


def test_an_index_rewritten_between_its_fetch_and_the_listing_is_fetched_again(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old", samples=30)
    reads = []

    def rewrite_once() -> None:
        reads.append(1)
        if len(reads) == 1:
            write(remote, "new", samples=90)

    store = IndexFirstStore(remote, on_read=rewrite_once)
    entries = sync_index(store, str(local), DownloadOptions())
    assert store.calls == ["get_bytes_info index.json", "list_info", "get_bytes_info index.json"]
    # The index kept is the one the listing lists, not the one read before the rewrite.
    assert (local / "index.json").read_bytes() == (remote / "index.json").read_bytes()
    assert entries is not None
    assert sum(entry.samples for entry in entries) == 90
    assert texts(remote, local)[-1] == "new-0089"


def test_an_index_that_changes_at_every_read_is_an_error_after_a_few_rounds(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old")
    sizes = iter(range(31, 100))  # another shard count each time: another index

    def rewrite() -> None:
        write(remote, "new", samples=next(sizes))

    # Rewritten after each read and each listing: no read ever matches the last listing.
    store = IndexFirstStore(remote, on_read=rewrite, on_list=rewrite)
    with pytest.raises(StorageError, match=r"index\.json.*changed 3 times.*a writer"):
        sync_index(store, str(local), DownloadOptions())
    assert store.calls.count("list_info") == 3
    assert store.calls.count("get_bytes_info index.json") == 4
    assert not (local / "index.json").exists()
    assert read_record(str(local / ".shardstream")) is None  # nothing recorded as current


@pytest.mark.parametrize("untagged", ["read", "listing"])
def test_a_first_read_without_a_version_tag_is_fetched_again_after_the_listing(
    tmp_path: Path, untagged: str
):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old", samples=200)
    # A size alone cannot tell a rewrite: the two are not matched.
    store = IndexFirstStore(remote, tagged=untagged != "read", lists_tags=untagged != "listing")
    assert sync_index(store, str(local), DownloadOptions()) is not None
    assert store.calls == ["get_bytes_info index.json", "list_info", "get_bytes index.json"]
    assert store.splits[0]  # its names still split the listing


def test_a_first_read_that_is_no_index_is_decided_by_the_listing(tmp_path: Path):
    remote, local = tmp_path / "remote", tmp_path / "cache"
    write(remote, "old")
    (remote / "index.json").write_bytes(b"<html>not an index</html>")
    store = IndexFirstStore(remote)
    with pytest.raises(IndexFormatError):  # the listing vouches for these bytes: the remote's
        sync_index(store, str(local), DownloadOptions())
    assert store.calls == ["get_bytes_info index.json", "list_info"]
    assert store.splits == [[]]
