"""The node-local cache across real processes: one fetch per shard, crashes, limits, run files."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.cache import STATE_FOLDER, CacheStream, EpochStart, FileLock, RunState, ShardCache
from shardstream.cache.layout import IN_PLACE_FOLDER, in_place_cache, shard_lock_path
from shardstream.cache.locks import try_lock_file
from shardstream.dataset.local import LocalDataset
from shardstream.errors import CacheTimeoutError
from shardstream.storage import DownloadOptions, LocalStore
from shardstream.storage import cancel as cancel_module


class CountingStore(LocalStore):
    """A local folder as a remote that appends every object it serves to a log file."""

    def __init__(self, root: str, log: str) -> None:
        super().__init__(root)
        self.log = log

    def _note(self, key: str) -> None:
        with open(self.log, "a") as handle:
            handle.write(key + "\n")

    def get_bytes(self, key: str) -> bytes:
        self._note(key)
        return super().get_bytes(key)

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        if start == 0:
            self._note(key)
        return super().get_range(key, start, end, if_match=if_match)

    def copy_into(self, key: str, fd: int) -> int:  # how a folder on a local disk is fetched
        self._note(key)
        return super().copy_into(key, fd)


def make_cache(remote: Path, local: Path, log: Path, limit: int | None = None) -> ShardCache:
    entries = LocalDataset(remote).shards
    store = CountingStore(str(remote), str(log))
    return ShardCache([CacheStream(str(local), store, entries)], limit=limit)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "remote", 200, size_limit=1024)


def ensure_all(remote: str, local: str, log: str) -> None:
    cache = make_cache(Path(remote), Path(local), Path(log))
    for shard in range(cache.num_shards):
        cache.ensure(shard)


def test_processes_of_a_node_fetch_each_shard_once(remote: Path, tmp_path: Path):
    log = tmp_path / "fetches.log"
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=ensure_all, args=(str(remote), str(tmp_path / "c"), str(log)))
        for _ in range(3)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    fetched = log.read_text().split()
    assert len(fetched) == len(set(fetched)) == len(LocalDataset(remote).shards)


def test_open_fetched_says_whether_it_fetched(remote: Path, tmp_path: Path):
    log = tmp_path / "fetches.log"
    cache = make_cache(remote, tmp_path / "c", log)
    local = LocalDataset(tmp_path / "c", entries=cache.streams[0].entries)
    view, fetched = cache.open_fetched(3, lambda: local.shard_view(3))
    assert fetched
    assert len(view) == cache.streams[0].entries[3].samples
    again, fetched = cache.open_fetched(3, lambda: local.shard_view(3))
    assert not fetched
    assert again is view
    assert not cache.ensure(3)
    assert log.read_text().split() == [cache.streams[0].entries[3].raw_data.basename]
    os.remove(tmp_path / "c" / cache.streams[0].entries[3].raw_data.basename)
    local.release(3)
    _, fetched = cache.open_fetched(3, lambda: local.shard_view(3))  # gone: fetched again
    assert fetched
    assert len(log.read_text().split()) == 2


def hold_lock_then_hang(path: str, temporary: str, ready: str) -> None:
    lock = FileLock(path)
    lock.acquire(timeout=5)
    os.pwrite(lock.fd, b"999999 shard.00000.mds\n", 0)  # a reservation, as a fetch makes
    Path(temporary).write_bytes(b"half a shard")
    Path(ready).touch()
    time.sleep(600)


def test_a_fetch_killed_mid_way_leaves_nothing_that_blocks(remote: Path, tmp_path: Path):
    local = tmp_path / "c"
    cache = make_cache(remote, local, tmp_path / "log", limit=10**6)
    lock_path = cache._lock_path(0, cache.streams[0].entries[0])
    temporary = local / ".shard.00000.mds.tmp-0123456789ab"
    local.mkdir()
    ready = tmp_path / "ready"
    context = multiprocessing.get_context("fork")
    holder = context.Process(
        target=hold_lock_then_hang, args=(lock_path, str(temporary), str(ready))
    )
    holder.start()
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert try_lock_file(lock_path) is None  # held by the live process
    assert cache.usage() >= 999999  # its reservation counts while it lives
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    assert cache.usage() < 999999  # the dead process's reservation is dropped
    cache.ensure(0)
    assert cache.is_present(0)
    assert not temporary.exists()  # its half-written file is gone
    assert try_lock_file(lock_path) is not None


def test_waiting_for_a_stuck_fetch_times_out_with_a_clear_error(tmp_path: Path):
    path = str(tmp_path / "x.lock")
    held = FileLock(path)
    held.acquire(timeout=1)
    try:
        with pytest.raises(CacheTimeoutError, match=r"x\.lock"):
            FileLock(path).acquire(timeout=0.1, what="shard x")
    finally:
        held.release()
    FileLock(path).acquire(timeout=0.1)


def test_eviction_spares_a_shard_being_fetched(remote: Path, tmp_path: Path):
    local = tmp_path / "c"
    cache = make_cache(remote, local, tmp_path / "log")
    cache.ensure(0)
    lock = try_lock_file(cache._lock_path(0, cache.streams[0].entries[0]))
    assert lock is not None
    try:
        assert cache.evict(0) == 0  # busy: left alone
    finally:
        lock.release()
    assert cache.evict(0) > 0
    assert not cache.is_present(0)


def test_run_files_give_each_worker_its_epochs_and_a_resume_once(tmp_path: Path):
    state = RunState(str(tmp_path / "runs"), os.getpid(), "ds")
    resume = EpochStart(3, 40)
    assert state.begin(0, 2, next_epoch=0, resume=resume) == resume
    assert state.begin(0, 2, next_epoch=0, resume=resume) == EpochStart(4)
    assert state.begin(1, 2, next_epoch=0, resume=resume) == resume  # worker 1 takes it too
    assert state.begin(1, 2, next_epoch=0, resume=None) == EpochStart(4)
    assert state.current() == EpochStart(4)
    state.update(next_epoch=7, resume=None)
    assert [state.begin(w, 2, next_epoch=0, resume=None) for w in (1, 0)] == [EpochStart(7)] * 2


def test_run_files_of_finished_processes_are_removed(tmp_path: Path):
    folder = tmp_path / "runs"
    context = multiprocessing.get_context("fork")
    child = context.Process(target=time.sleep, args=(0,))
    child.start()
    child.join()
    assert child.pid is not None
    RunState(str(folder), child.pid, "ds").begin(0, 1, next_epoch=0, resume=None)
    assert len(list(folder.iterdir())) == 1
    RunState(str(folder), os.getpid(), "other").begin(0, 1, next_epoch=0, resume=None)
    assert [p.name.split("-")[0] for p in folder.iterdir()] == [str(os.getpid())]


def test_state_stays_inside_the_cache_folder(remote: Path, tmp_path: Path):
    local = tmp_path / "c"
    cache = make_cache(remote, local, tmp_path / "log", limit=10**6)
    for shard in range(cache.num_shards):
        cache.ensure(shard)
    assert (local / STATE_FOLDER / "locks").is_dir()
    # No download slots: copies from a folder on a local disk take none.
    assert sorted(p.name for p in (local / STATE_FOLDER).iterdir()) == ["cache.lock", "locks"]


class SlowNetworkStore:
    """A remote that is not a local disk: each request takes a while; counts those at once.

    ``gather``: each request waits (30 s at most) until that many have been in flight at once,
    so that a test sees the most the cache allows by count, not by sleeps that happen to
    overlap on a busy machine.
    """

    def __init__(self, root: str, gather: int = 0) -> None:
        self.local = LocalStore(root)
        self.lock = threading.Condition()
        self.now = self.most = 0
        self.gather = gather

    def url(self, key: str) -> str:
        return f"slow://{key}"

    def _request(self, read: Callable[[], bytes]) -> bytes:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.lock.notify_all()
            gathering = self.most < self.gather
            if gathering:
                self.lock.wait_for(lambda: self.most >= self.gather, timeout=30)
        try:
            # Gathered requests stay a moment beside each other, so that one past the cap
            # would show; without ``gather``, each request takes a while.
            time.sleep(0.05)
            return read()
        finally:
            with self.lock:
                self.now -= 1

    def get_bytes(self, key: str) -> bytes:
        return self._request(lambda: self.local.get_bytes(key))

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        return self._request(lambda: self.local.get_range(key, start, end))

    def __getattr__(self, name: str) -> Any:  # info, exists, list, put_file...
        return getattr(self.local, name)


def test_downloads_from_a_network_store_take_the_nodes_slots(remote: Path, tmp_path: Path):
    # Shards larger than a part (ranges, one at a time here) fill a slot each: two at once.
    store = SlowNetworkStore(str(remote), gather=2)
    entries = LocalDataset(remote).shards
    assert len(entries) >= 6
    assert min(entry.data_file.bytes for entry in entries[:6]) > 384
    options = DownloadOptions(part_size=384, concurrency=1)
    cache = ShardCache(
        [CacheStream(str(tmp_path / "c"), store, entries, options)], download_slots=2
    )
    slots = tmp_path / "c" / STATE_FOLDER / "slots"
    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(cache.ensure, range(6)))
    assert store.most == 2
    assert (slots / "0.lock").exists()
    assert (slots / "1.lock").exists()


def _slot_cache(
    remote: Path, local: Path, slots: int, part_size: int, gather: int = 0
) -> tuple[Any, ShardCache]:
    store = SlowNetworkStore(str(remote), gather)
    options = DownloadOptions(part_size=part_size, concurrency=3)
    return store, ShardCache(
        [CacheStream(str(local), store, LocalDataset(remote).shards, options)], download_slots=slots
    )


def test_small_shards_share_a_slot_up_to_its_requests(remote: Path, tmp_path: Path):
    # A shard fetched in one request holds one of a slot's `concurrency` requests: a first
    # batch over many small shards has slots x concurrency requests in flight, not slots.
    store, cache = _slot_cache(remote, tmp_path / "c", slots=2, part_size=16 << 20, gather=6)
    assert cache.num_shards >= 12
    with ThreadPoolExecutor(12) as pool:
        assert all(pool.map(cache.ensure, range(12)))
    assert store.most == 6  # two slots of three requests, never more


def test_a_shard_that_fills_a_slot_excludes_small_ones_from_it(remote: Path, tmp_path: Path):
    _, cache = _slot_cache(remote, tmp_path / "c", slots=2, part_size=16 << 20)
    slots = tmp_path / "c" / STATE_FOLDER / "slots"
    slots.mkdir(parents=True)
    filled = try_lock_file(str(slots / "0.lock"))  # slot 0 filled by a large download
    assert filled is not None
    try:
        with ThreadPoolExecutor(6) as pool:
            assert all(pool.map(cache.ensure, range(6)))
        assert not (slots / "0-0.lock").exists()  # never a lane of the filled slot
        assert (slots / "1-2.lock").exists()  # the other slot's three lanes, all used
        # Small downloads hold their slot shared: a large one cannot take it meanwhile.
        with cache._slot(3):
            assert try_lock_file(str(slots / "1.lock")) is None
    finally:
        filled.release()


def test_a_download_waiting_for_a_slot_takes_it_soon_after_it_frees(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A slot frees within a round trip to a distant store: a waiting thread must not sleep a
    # quarter of a second before it looks again (it did, backing off to 250 ms). What it
    # asks to sleep is counted, not timed, so a busy machine cannot fail the test.
    pauses: list[float] = []
    real_pause = cancel_module.pause

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        real_pause(seconds)

    monkeypatch.setattr(cancel_module, "pause", pause)  # what a slot's waiter calls
    store = SlowNetworkStore(str(remote))
    cache = ShardCache(
        [CacheStream(str(tmp_path / "c"), store, LocalDataset(remote).shards)], download_slots=1
    )
    slot = tmp_path / "c" / STATE_FOLDER / "slots" / "0.lock"
    held = FileLock(str(slot))
    held.acquire(timeout=1)
    got = threading.Event()

    def wait_for_slot() -> None:
        with cache._slot(1):
            got.set()

    waiter = threading.Thread(target=wait_for_slot)
    waiter.start()
    deadline = time.monotonic() + 30  # a bound, not a measure
    while len(pauses) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)  # the waiter looks again and again, long past any backoff's ramp
    assert not got.is_set()  # the slot is held: it waits
    held.release()
    assert got.wait(30)
    waiter.join()
    assert len(pauses) >= 20
    assert max(pauses) <= 0.05, sorted(set(pauses))  # never a long sleep between looks


# --- a local-only stream is the user's data, read in place ----------------------------------------


def read_in_place(data: Path) -> ShardCache:
    return ShardCache([CacheStream(str(data), None, LocalDataset(data).shards)], limit=1 << 30)


def test_a_local_only_stream_is_neither_touched_nor_locked(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "user"))
    data = write_dataset(tmp_path / "data", 200, size_limit=1024)
    for path in data.iterdir():
        os.utime(path, ns=(10**18, 10**18))  # long ago: a touch now would show
    before = {path.name: path.stat().st_mtime_ns for path in data.iterdir()}
    cache = read_in_place(data)
    for shard in range(cache.num_shards):
        assert cache.open_fetched(shard, lambda: "opened") == ("opened", False)
        assert not cache.ensure(shard)
        cache.touch(shard)
    assert {path.name: path.stat().st_mtime_ns for path in data.iterdir()} == before
    assert not (tmp_path / "user").exists()  # no lock, no folder: nothing needed writing


def test_a_local_only_stream_decompresses_into_a_cache_of_its_own(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "user"))
    data = write_dataset(tmp_path / "data", 200, size_limit=1024, compression="zstd")
    before = sorted(os.listdir(data))
    cache = read_in_place(data)
    assert not cache.is_present(0)
    assert cache.ensure(0)
    assert cache.is_present(0)
    assert not cache.ensure(0)
    own = Path(in_place_cache(str(data)))
    assert own.parent.parent == tmp_path / "user" / IN_PLACE_FOLDER
    entry = cache.streams[0].entries[0]
    assert (own / entry.raw_data.basename).stat().st_size == entry.raw_data.bytes
    assert [p.name for p in (own / STATE_FOLDER / "locks").iterdir()] == [
        os.path.basename(shard_lock_path(str(own), entry))
    ]
    assert sorted(os.listdir(data)) == before  # the compressed files kept, nothing added
    assert (tmp_path / "user").stat().st_mode & 0o777 == 0o700


# --- one limit across jobs: node-wide state does not follow the order of the streams -----------


def _two_jobs(
    tmp_path: Path, store: Callable[[str], Any], **settings: Any
) -> tuple[ShardCache, ShardCache]:
    """Two jobs on one cache folder reading the streams a and b, listed [a, b] and [b, a]."""
    roots = {name: tmp_path / name for name in "ab"}
    for number, root in enumerate(roots.values()):
        if not root.exists():
            write_dataset(root, 60, size_limit=1024, first=1000 * number)
    options = DownloadOptions(concurrency=1)  # a download fills its slot

    def job(order: str) -> ShardCache:
        folders = {name: str(tmp_path / "cache" / name) for name in order}
        streams = [
            CacheStream(folders[n], store(str(roots[n])), LocalDataset(roots[n]).shards, options)
            for n in order
        ]
        return ShardCache(streams, **settings)

    return job("ab"), job("ba")


def test_jobs_listing_streams_in_any_order_share_the_download_slots(tmp_path: Path):
    meter = SlowNetworkStore(str(tmp_path))  # counts requests at once over both jobs
    first, second = _two_jobs(
        tmp_path, lambda root: _Metered(root, meter), download_slots=1
    )  # fmt: skip
    with ThreadPoolExecutor(8) as pool:
        fetched = [pool.submit(job.ensure, k) for k in range(4) for job in (first, second)]
        assert all(future.result() for future in fetched)
    assert meter.most == 1  # one slot on the node, whichever job lists which stream first


class _Metered(SlowNetworkStore):
    """A slow network store that counts its requests in a meter shared with others."""

    def __init__(self, root: str, meter: SlowNetworkStore) -> None:
        super().__init__(root)
        self.meter = meter

    def _request(self, read: Callable[[], bytes]) -> bytes:
        return self.meter._request(read)


def test_jobs_listing_streams_in_any_order_share_one_cache_limit(tmp_path: Path):
    probe, _ = _two_jobs(tmp_path, LocalStore)
    largest = max(probe.footprint(shard) for shard in range(probe.num_shards))
    first, second = _two_jobs(tmp_path, LocalStore, limit=largest * 3 // 2)  # one shard fits
    assert first.ensure(0)  # a's first shard
    evicting, go_on = threading.Event(), threading.Event()
    evict = first.evict

    def slow_evict(shard: int) -> int:  # the first job makes room, holding its ledger
        evicting.set()
        assert go_on.wait(30)
        return evict(shard)

    first.evict = slow_evict  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        making_room = pool.submit(first.ensure, 1)
        assert evicting.wait(30)
        # The second job's fetch of b's first shard needs room too: it waits for the ledger.
        waiting = pool.submit(second.ensure, 0)
        time.sleep(0.5)
        done_early = waiting.done()
        go_on.set()
        assert making_room.result()
        assert waiting.result()
    assert not done_early, "the second job reserved room while the first held its ledger"
    assert first.usage() <= first.limit  # type: ignore[operator]


def test_copies_of_a_dataset_read_in_place_count_against_the_limit(tmp_path: Path, monkeypatch):
    # fb0f0a9 left every shard's decompressed copy in the user's cache, whatever the limit.
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "user"))
    data = write_dataset(tmp_path / "data", 200, size_limit=1024, compression="zstd")
    before = {path.name: path.read_bytes() for path in data.iterdir()}
    entries = LocalDataset(data).shards
    assert len(entries) >= 10
    limit = 3 * max(entry.raw_data.bytes for entry in entries)
    dataset = StreamingDataset(local=str(data), batch_size=4, cache_limit=limit)
    for _ in range(2):  # a second epoch decompresses the evicted shards again
        assert sorted(int(sample["id"]) for sample in dataset) == list(range(200))
        cached = [p for p in (tmp_path / "user" / IN_PLACE_FOLDER).rglob("*") if p.is_file()]
        assert sum(path.stat().st_size for path in cached) <= limit
        assert 0 < len([path for path in cached if path.name.endswith(".mds")]) < len(entries)
    assert {path.name: path.read_bytes() for path in data.iterdir()} == before  # the user's
