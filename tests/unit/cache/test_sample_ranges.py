"""Samples read by byte ranges: equal to a whole read, only those read handed out, never cached.

The remote here is a local folder (a real ``LocalStore``, ranged reads and all); the requests
through a real server, and their counts, are in ``tests/integration/test_first_batch_ranges.py``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from shardstream import MDSWriter
from shardstream.cache import CacheStream, ShardCache
from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.listing_check import ListingCheck
from shardstream.cache.provenance import SourceRecord, identity
from shardstream.cache.sample_ranges import SampleRanges
from shardstream.errors import ObjectChangedError, ShardFormatError
from shardstream.format.index import parse_index
from shardstream.format.mds import MDSSchema, MDSShardView
from shardstream.format.shard_view import ShardView
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage._workers import WorkerPool
from shardstream.storage.base import ObjectInfo
from shardstream.storage.filesystems import is_local_disk
from shardstream.storage.local import LocalStore

PAYLOAD = 30_000  # 20 samples a shard: a shard over the one-range size


POLICY = ReadPolicy()


def _ranges(cache: ShardCache) -> SampleRanges:
    """The range reader a pipeline builds from the default policy."""
    return SampleRanges(
        cache, whole_bytes=POLICY.range_whole_bytes, gap_bytes=POLICY.range_gap_bytes
    )


def _write(folder: Path, samples: int = 40, seed: int = 0) -> None:
    columns = {"id": "int", "pad": "bytes", "vec": "ndarray:float32:3"}
    with MDSWriter(out=str(folder), columns=columns, size_limit=620_000) as writer:
        for i in range(samples):
            rng = np.random.default_rng(seed + i)
            writer.write({
                "id": i,
                "pad": rng.integers(0, 256, PAYLOAD + i, dtype=np.uint8).tobytes(),
                "vec": rng.standard_normal(3).astype(np.float32),
            })  # fmt: skip


def _cache(remote: Path, local: Path, store: LocalStore | None = None) -> ShardCache:
    store = LocalStore(str(remote)) if store is None else store
    entries = parse_index((remote / "index.json").read_bytes(), source=str(remote))
    _record(store, local)
    return ShardCache([CacheStream(str(local), store, entries)])


def _record(store: LocalStore, local: Path) -> None:
    """The cache's record of a listing of ``store`` now, as a start writes it."""
    listing = {key: identity(info) for key, info in store.list_info().items()}
    os.makedirs(local / STATE_FOLDER, exist_ok=True)
    SourceRecord(store.url(""), listing, complete=True).write(str(local / STATE_FOLDER))


def _whole(remote: Path, cache: ShardCache, shard: int) -> MDSShardView:
    _, entry = cache.locate(shard)
    data = (remote / entry.raw_data.basename).read_bytes()
    return MDSShardView(data, MDSSchema(entry.columns, sort=False), entry.samples, source="whole")


def _schema(cache: ShardCache):
    return lambda shard: MDSSchema(cache.locate(shard)[1].columns, sort=False)


def test_samples_read_by_range_equal_a_whole_read_and_only_they_come_out(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    cache = _cache(remote, local)
    assert cache.locate(0)[1].raw_data.bytes > POLICY.range_whole_bytes
    # Neighbours coalesce; the test reads far-apart ones too.
    assert POLICY.range_gap_bytes > PAYLOAD
    wanted = {0: [1, 2, 17], 1: [0, 19]}
    with ThreadPoolExecutor(4) as pool:
        views = _ranges(cache).views(wanted, _schema(cache), pool)

    for shard, indices in wanted.items():
        whole = _whole(remote, cache, shard)
        view = views[shard]
        assert view.in_memory
        assert view.sample_file() is None
        for index in indices:
            got, want = view.get(index), whole.get(index)
            assert got["id"] == want["id"]
            assert bytes(got["pad"]) == bytes(want["pad"])
            assert got["vec"].tobytes() == want["vec"].tobytes()
        columns = view.read_columns(indices)
        expected = whole.read_columns(indices)
        assert [bytes(value) for value in columns[1]] == [bytes(value) for value in expected[1]]
        assert np.array_equal(np.asarray(columns[0]), np.asarray(expected[0]))
        with pytest.raises(IndexError, match=r"shard\.0000\d\.mds.*not read by range"):
            view.get(5)  # never the zeros of an unread sample
        with pytest.raises(IndexError, match="not read by range"):
            view.read_columns([indices[0], 6])
    assert not list(local.rglob("*.mds"))  # nothing cached


def test_a_small_shard_is_read_in_one_range_and_every_sample_is_there(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    with MDSWriter(out=str(remote), columns={"id": "int"}, size_limit=1 << 12) as writer:
        for i in range(50):
            writer.write({"id": i})
    cache = _cache(remote, local)
    with ThreadPoolExecutor(2) as pool:
        view = _ranges(cache).views({0: [3]}, _schema(cache), pool)[0]
    assert [view.get(i)["id"] for i in range(len(view))] == list(range(len(view)))


def test_a_shard_that_disagrees_with_its_index_is_an_error_naming_it(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    cache = _cache(remote, local)
    name = cache.locate(1)[1].raw_data.basename
    path = remote / name
    data = bytearray(path.read_bytes())
    data[0:4] = (int.from_bytes(data[0:4], "little") - 1).to_bytes(4, "little")  # header lies
    path.write_bytes(bytes(data))
    _record(LocalStore(str(remote)), local)  # listed so: the ranges are of the listed version
    with ThreadPoolExecutor(2) as pool, pytest.raises(ShardFormatError, match=name):
        _ranges(cache).views({1: [0]}, _schema(cache), pool)
    os.truncate(path, 1000)  # shorter than the index says: its first answer says so
    with ThreadPoolExecutor(2) as pool:  # no view: read whole, where the size is reported
        assert _ranges(cache).views({1: [0]}, _schema(cache), pool) == {}


def test_only_uncompressed_remote_mds_shards_not_in_the_cache_are_readable(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    cache = _cache(remote, local)
    ranges = _ranges(cache)
    # A folder on this machine's disk is copied whole: a range saves nothing.
    assert ranges.readable(0) != is_local_disk(LocalStore(str(remote)))
    zipped = tmp_path / "zipped"
    with MDSWriter(out=str(zipped), columns={"id": "int"}, compression="zstd") as writer:
        writer.write({"id": 1})
    assert not _ranges(_cache(zipped, tmp_path / "zlocal")).readable(0)


class _CountingStore(LocalStore):
    """A folder store that records every range it is asked for."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.asked: list[tuple[int, int]] = []

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        self.asked.append((start, end))
        return super().get_range(key, start, end, if_match=if_match)

    def get_range_info(self, key: str, start: int, end: int) -> tuple[bytes, ObjectInfo | None]:
        self.asked.append((start, end))
        return super().get_range_info(key, start, end)


@pytest.mark.parametrize(
    ("whole_bytes", "gap_bytes", "requests"),
    [
        (1 << 30, 0, 1),  # the policy calls the shard small: one range, header and samples
        (0, 1 << 20, 2),  # the offset table, then both samples in one coalesced range
        (0, 0, 3),  # the offset table, then each far-apart sample on its own
    ],
)
def test_the_policy_sizes_decide_the_ranges(tmp_path, whole_bytes, gap_bytes, requests):
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    store = _CountingStore(str(remote))
    cache = _cache(remote, local, store)
    reader = SampleRanges(cache, whole_bytes=whole_bytes, gap_bytes=gap_bytes)
    with ThreadPoolExecutor(2) as pool:
        view = reader.views({0: [1, 17]}, _schema(cache), pool)[0]
    assert len(store.asked) == requests
    whole = _whole(remote, cache, 0)
    assert bytes(view.get(17)["pad"]) == bytes(whole.get(17)["pad"])


class _RewritingStore(LocalStore):
    """A folder store whose one shard is rewritten in place right after its header is read."""

    def __init__(self, root: str, key: str, new: bytes) -> None:
        super().__init__(root)
        self.key, self.new, self.rewritten = key, new, False

    def get_range_info(self, key: str, start: int, end: int) -> tuple[bytes, ObjectInfo | None]:
        answer = super().get_range_info(key, start, end)
        if key == self.key and start == 0 and not self.rewritten:
            self.rewritten = True
            with open(os.path.join(self.root, key), "r+b") as handle:  # in place, same size
                handle.write(self.new)
        return answer


def test_a_shard_rewritten_between_its_header_and_its_samples_is_never_mixed(tmp_path, caplog):
    remote, local, other = tmp_path / "remote", tmp_path / "local", tmp_path / "other"
    _write(remote)
    _write(other, seed=1000)  # the same sizes and offsets, other payloads
    name = "shard.00000.mds"
    new = (other / name).read_bytes()
    old = (remote / name).read_bytes()
    assert len(new) == len(old)
    assert new != old
    assert new[:200] == old[:200]
    store = _RewritingStore(str(remote), name, new)
    cache = _cache(remote, local, store)
    wanted = {0: [1, 17], 1: [0, 19]}
    with ThreadPoolExecutor(1) as pool:  # the header's range, then the samples': in order
        views = _ranges(cache).views(wanted, _schema(cache), pool)
    assert store.rewritten
    # The rewritten shard has no view (its samples come from its whole download); the other
    # is read as listed.
    if 0 in views:  # never the new version's samples under the old header
        old_view = MDSShardView(old, _schema(cache)(0), len(views[0]), source="old")
        for index in wanted[0]:
            assert bytes(views[0].get(index)["pad"]) == bytes(old_view.get(index)["pad"])
    assert 0 not in views
    whole = _whole(remote, cache, 1)
    for index in wanted[1]:
        assert bytes(views[1].get(index)["pad"]) == bytes(whole.get(index)["pad"])
    assert any(name in r.getMessage() and "rewritten" in r.getMessage() for r in caplog.records)


def test_ranges_need_no_listing_not_even_one_under_way(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    store = LocalStore(str(remote))
    entries = parse_index((remote / "index.json").read_bytes(), source=str(remote))
    listed = threading.Event()

    def lister(split_at: list[str]) -> tuple[dict[str, str], bool]:
        listed.wait(60)  # a listing of many thousand keys, still under way
        return {key: identity(info) for key, info in store.list_info().items()}, True

    check = ListingCheck(
        lister, [], state=str(local / STATE_FOLDER), local=str(local), remote=store.url(""),
        entries=entries, index_identity="", unsure=set(), settle=lambda *_: set(),
        lock=contextlib.nullcontext, lock_timeout=5, seen=0,
    ).start()  # fmt: skip
    cache = ShardCache([CacheStream(str(local), store, entries, check=check)])  # no record
    ranges = _ranges(cache)
    got: dict[int, ShardView] = {}
    reading = threading.Thread(
        target=lambda: got.update(ranges.views({0: [3], 1: [2]}, _schema(cache), _POOL))
    )
    try:
        reading.start()
        reading.join(30)  # a deadline is the point: the ranges must not wait for the listing
        assert not reading.is_alive()
        assert not check.done
    finally:
        listed.set()
    assert set(got) == {0, 1}
    assert bytes(got[1].get(2)["pad"]) == bytes(_whole(remote, cache, 1).get(2)["pad"])


_POOL = ThreadPoolExecutor(2)


def test_bytes_handed_out_by_range_are_confirmed_against_the_whole_file(tmp_path):
    remote, local, other = tmp_path / "remote", tmp_path / "local", tmp_path / "other"
    _write(remote, samples=80)
    _write(other, samples=80, seed=1000)  # the same sizes and offsets, other payloads
    cache = _cache(remote, local)
    ranges = _ranges(cache)
    wanted = {0: [1, 17], 1: [0, 19], 2: [0]}
    with ThreadPoolExecutor(2) as pool:
        assert set(ranges.views(wanted, _schema(cache), pool)) == {0, 1, 2}
    name = cache.locate(0)[1].raw_data.basename
    # Rewritten after its ranges, before its whole download (in place: the same size).
    (remote / name).write_bytes((other / name).read_bytes())
    # Another rewritten only in bytes not handed out (its last sample's last byte).
    path = remote / cache.locate(2)[1].raw_data.basename
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    for shard in wanted:
        cache.ensure(shard)
    with pytest.raises(ObjectChangedError, match=rf"{name}.*read by range from version"):
        ranges.confirm(0)
    ranges.confirm(0)  # said once
    ranges.confirm(1)  # unchanged
    ranges.confirm(2)  # what was handed out is the file's: nothing mixed
    with ThreadPoolExecutor(2) as pool:
        assert set(ranges.views({3: [0]}, _schema(cache), pool)) == {3}
    ranges.forget()  # a new epoch reads every shard whole: nothing to compare
    entry = cache.locate(3)[1]
    (remote / entry.raw_data.basename).write_bytes((other / entry.raw_data.basename).read_bytes())
    cache.ensure(3)
    ranges.confirm(3)


def test_a_shard_read_in_one_range_is_confirmed_by_the_samples_handed_out(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    _write(remote)
    cache = _cache(remote, local)
    ranges = SampleRanges(cache, whole_bytes=1 << 30, gap_bytes=0)  # each shard in one range
    last = cache.locate(0)[1].samples - 1
    with ThreadPoolExecutor(2) as pool:
        assert set(ranges.views({0: [1], 1: [last]}, _schema(cache), pool)) == {0, 1}
    for shard in (0, 1):  # each rewritten in its last sample's last byte
        path = remote / cache.locate(shard)[1].raw_data.basename
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
        cache.ensure(shard)
    ranges.confirm(0)  # its last sample was read, never handed out: nothing mixed
    with pytest.raises(ObjectChangedError, match="rewritten while this epoch read it"):
        ranges.confirm(1)  # handed out, and the file now holds another


class _TogetherStore(LocalStore):
    """A folder store whose first ranges answer only once ``together`` of them are in flight."""

    def __init__(self, root: str, together: int) -> None:
        super().__init__(root)
        self.barrier = threading.Barrier(together, timeout=60)

    def get_range_info(self, key: str, start: int, end: int) -> tuple[bytes, ObjectInfo | None]:
        self.barrier.wait()  # every first range of the batch out at once, as over a distant link
        return super().get_range_info(key, start, end)


def _download_workers() -> WorkerPool:
    """The download's shared, reused worker threads (whichever module holds them)."""
    for name in ("shardstream.storage._attempt", "shardstream.storage.download"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_WORKERS"):
            workers: WorkerPool = module._WORKERS
            return workers
    raise AssertionError("no download worker pool")


def test_a_batch_of_many_ranges_starts_no_thread_per_range(tmp_path, monkeypatch):
    # A batch of N shards in one range each, all in flight at once (the store answers none
    # before all are out). The requests run in the download's reused worker threads, waited
    # for by the caller: a second batch starts (almost) no thread, rather than one per range.
    remote, local = tmp_path / "remote", tmp_path / "local"
    with MDSWriter(out=str(remote), columns={"pad": "bytes"}, size_limit=3000) as writer:
        for i in range(96):
            writer.write({"pad": bytes([i]) * 1000})
    store = _TogetherStore(str(remote), together=1)
    cache = _cache(remote, local, store)
    shards = cache.num_shards
    assert shards >= 40
    half = shards // 2
    store.barrier = threading.Barrier(half, timeout=60)
    ranges = SampleRanges(cache, whole_bytes=1 << 30, gap_bytes=0, in_flight=128)
    workers = _download_workers()
    with ThreadPoolExecutor(2) as pool:
        assert len(ranges.views({s: [0] for s in range(half)}, _schema(cache), pool)) == half
        # The first batch's workers go idle (a wait for a state, not a timing).
        deadline = time.monotonic() + 30
        while workers._idle < half and time.monotonic() < deadline:
            time.sleep(0.01)
        started: list[str] = []
        start = threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            started.append(thread.name)
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", counted)
        second = {s: [0] for s in range(half, 2 * half)}
        views = ranges.views(second, _schema(cache), pool)
        monkeypatch.undo()
    assert set(views) == set(second)
    assert bytes(views[half].get(0)["pad"]) == bytes(_whole(remote, cache, half).get(0)["pad"])
    assert len(started) <= 4, f"{len(started)} threads started for {half} ranges: {started[:5]}"
