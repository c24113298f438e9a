"""The listing a start leaves running: who waits for it, what it deletes, what it records."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from tests.forked import in_forked_child

from shardstream.cache.listing_check import ListingCheck, RangedListing, hold_cold_listings
from shardstream.cache.provenance import SourceRecord, present_sources, read_record
from shardstream.errors import ShardFormatError, StorageError
from shardstream.format.index import FileInfo, ShardEntry
from shardstream.storage.key_ranges import KeyRange

INDEX = "9:tag-index"
SMALL = 1  # the shards' bytes: a hold for shards this small covers them


def entry(raw: str) -> ShardEntry:
    return ShardEntry(
        format="mds",
        samples=1,
        raw_data=FileInfo(raw, 1),
        zip_data=None,
        compression=None,
        hashes=(),
        size_limit=None,
        columns={"id": "int"},
    )


@contextlib.contextmanager
def no_lock() -> Iterator[None]:
    yield


def started(
    tmp_path: Path,
    names: list[str],
    cached: list[str],
    record: dict[str, str],
    lister: Callable[[list[str]], tuple[dict[str, str], bool]],
    ranged: RangedListing | None = None,
    check_part: Callable[[list[ShardEntry], Mapping[str, str]], None] | None = None,
) -> tuple[ListingCheck, list[ShardEntry]]:
    """A started check over shards ``names`` (``cached`` in the cache), listed by ``lister``."""
    local, state = tmp_path / "cache", tmp_path / "cache" / ".shardstream"
    state.mkdir(parents=True)
    entries = [entry(name) for name in names]
    for name in cached:
        (local / name).write_bytes(b"x")
    SourceRecord("mem://r/", record, True).write(str(state))

    def settle(listed: dict[str, str], complete: bool, now: SourceRecord | None) -> set[str] | None:
        return None if now is None else now.changed(listed)

    check = ListingCheck(
        lister,
        [],
        state=str(state),
        local=str(local),
        remote="mem://r/",
        entries=entries,
        index_identity=INDEX,
        unsure=present_sources(str(local), entries),
        settle=settle,
        lock=no_lock,
        lock_timeout=5,
        seen=1,
        ranged=ranged,
        check_part=check_part,
    )
    return check.start(), entries


def make(
    tmp_path: Path, listing: dict[str, str], gate: threading.Event, record: dict[str, str]
) -> tuple[ListingCheck, list[ShardEntry]]:
    """A check over shards a, b, c (a and b cached), whose listing waits for ``gate``."""

    def lister(split_at: list[str]) -> tuple[dict[str, str], bool]:
        assert gate.wait(30)
        if "fail" in listing:
            raise StorageError("listing mem://r/ failed: a transfer error")
        return dict(listing), True

    return started(tmp_path, ["a.mds", "b.mds", "c.mds"], ["a.mds", "b.mds"], record, lister)


def test_a_cached_shard_waits_and_a_changed_one_is_gone_when_it_returns(tmp_path: Path):
    record = {"index.json": INDEX, "a.mds": "1:old", "b.mds": "1:same", "c.mds": "1:c"}
    listing = {**record, "a.mds": "1:new"}
    gate = threading.Event()
    check, (a, b, c) = make(tmp_path, listing, gate, record)
    check.vouch(c)  # not cached: fetched from the remote as it is, no wait
    returned = threading.Event()

    def vouch_a() -> None:
        check.vouch(a)
        returned.set()

    waiter = threading.Thread(target=vouch_a)
    waiter.start()
    assert not returned.wait(0.2)  # a bound on a wait that must not end: the listing is held
    assert (tmp_path / "cache" / "a.mds").exists()
    (tmp_path / "cache" / "c.mds").write_bytes(b"x")  # fetched while the listing runs
    gate.set()
    waiter.join(30)
    assert returned.is_set()
    assert not (tmp_path / "cache" / "a.mds").exists()  # changed: gone before a's hand-over
    assert (tmp_path / "cache" / "b.mds").exists()
    check.vouch(b)
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    # c was fetched while the listing ran: of no known version, checked again at the next start.
    assert written.objects == {**listing, "c.mds": ""}
    assert written.generation == 2


def test_a_failed_listing_fails_the_reads_that_follow(tmp_path: Path):
    record = {"index.json": INDEX, "a.mds": "1:a", "b.mds": "1:b", "c.mds": "1:c"}
    gate = threading.Event()
    check, (a, _, c) = make(tmp_path, {"fail": ""}, gate, record)
    gate.set()
    with pytest.raises(StorageError, match="transfer error"):
        check.vouch(a)
    with pytest.raises(StorageError, match="transfer error"):
        check.vouch(c)  # once failed, a fetched shard's read fails too
    assert (tmp_path / "cache" / "a.mds").exists()  # nothing judged, nothing recorded
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.generation == 1


def test_a_listing_that_gives_the_index_another_identity_is_refused(tmp_path: Path):
    record = {"index.json": INDEX, "a.mds": "1:a", "b.mds": "1:b", "c.mds": "1:c"}
    gate = threading.Event()
    check, (a, _, _) = make(tmp_path, {**record, "index.json": "9:other"}, gate, record)
    gate.set()
    with pytest.raises(StorageError, match="index changed while"):
        check.vouch(a)
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.objects == record


def test_a_forked_child_whose_parent_is_still_listing_lists_itself(tmp_path: Path):
    """The parent's listing thread is not in a forked child: the child's vouch lists anew."""
    record = {"index.json": INDEX, "a.mds": "1:old", "b.mds": "1:b", "c.mds": "1:c"}
    gate = threading.Event()  # never set in the parent before the child ends
    check, (a, _, _) = make(tmp_path, {**record, "a.mds": "1:new"}, gate, record)
    gate_of_child = os.getpid()
    with warnings.catch_warnings():  # forking with threads running is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its copy of the gate opens at once, as a listing of its own would
        code = 1
        try:
            assert os.getpid() != gate_of_child
            gate.set()
            check.vouch(a)
            code = 0 if not (tmp_path / "cache" / "a.mds").exists() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    gate.set()
    check.wait()


class Ranges:
    """A remote listed in key ranges: each range's listing waits for its own gate.

    ``listing``: the remote's objects and identities; ``failing``: ranges whose listing fails.
    """

    def __init__(self, listing: dict[str, str], bounds: list[str], failing: set[int]) -> None:
        self.listing = listing
        self.ranges = [
            KeyRange(after, upto)
            for after, upto in zip([None, *bounds], [*bounds, None], strict=True)
        ]
        self.gates = [threading.Event() for _ in self.ranges]
        self.failing = failing
        self.order: list[int] = []  # ranges in the order their listing began
        self.lock = threading.Lock()

    def list_range(self, key_range: KeyRange) -> dict[str, str]:
        number = self.ranges.index(key_range)
        with self.lock:
            self.order.append(number)
        assert self.gates[number].wait(30)
        if number in self.failing:
            raise StorageError(f"listing mem://r/ failed: range {number}: a transfer error")
        return {key: value for key, value in self.listing.items() if key_range.holds(key)}

    def whole(self, split_at: list[str]) -> tuple[dict[str, str], bool]:
        return dict(self.listing), True


def make_ranged(
    tmp_path: Path,
    names: list[str],
    cached: list[str],
    record: dict[str, str],
    ranges: Ranges,
    in_flight: int,
) -> tuple[ListingCheck, list[ShardEntry]]:
    """A check over shards ``names`` (``cached`` in the cache), listed in ``ranges``."""
    ranged = RangedListing(ranges.ranges, ranges.list_range, in_flight)
    return started(tmp_path, names, cached, record, ranges.whole, ranged)


def vouch_in_thread(
    check: ListingCheck, shard: ShardEntry
) -> tuple[threading.Thread, list[object]]:
    """Vouch for ``shard`` in a thread; the list gets ``True``, or the error raised."""
    outcome: list[object] = []

    def run() -> None:
        try:
            check.vouch(shard)
            outcome.append(True)
        except Exception as exc:  # noqa: BLE001 (the test asserts on it)
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_shard_of_an_early_range_is_handed_over_while_the_last_range_is_listed(tmp_path: Path):
    """The last range's shard was rewritten in place; the early range's shard waits for its own."""
    names = ["a.mds", "m.mds", "z.mds"]
    record = {"index.json": INDEX, "a.mds": "1:a", "m.mds": "1:m", "z.mds": "1:old"}
    listing = {**record, "z.mds": "1:new"}
    ranges = Ranges(listing, ["index.json", "m.mds"], failing=set())
    check, (a, _, z) = make_ranged(tmp_path, names, names, record, ranges, in_flight=3)
    ranges.gates[0].set()  # a.mds and index.json
    thread, outcome = vouch_in_thread(check, a)
    thread.join(30)  # a bound: the early range is listed at once, the last one is held
    assert outcome == [True]
    assert not ranges.gates[2].is_set()
    assert not check.done
    waiting, held = vouch_in_thread(check, z)
    waiting.join(0.2)  # a bound on a wait that must not end
    assert waiting.is_alive()
    assert held == []
    assert (tmp_path / "cache" / "z.mds").exists()  # not judged before its range arrives
    ranges.gates[2].set()
    waiting.join(30)
    assert held == [True]
    assert not (tmp_path / "cache" / "z.mds").exists()  # changed: gone before z's hand-over
    assert (tmp_path / "cache" / "a.mds").exists()
    ranges.gates[1].set()
    check.wait()
    assert (tmp_path / "cache" / "m.mds").exists()
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.objects == listing
    assert written.generation == 2


def test_a_failed_range_fails_the_vouch_of_its_shards_and_never_vouches_them(tmp_path: Path):
    names = ["a.mds", "m.mds", "z.mds"]
    record = {"index.json": INDEX, "a.mds": "1:a", "m.mds": "1:m", "z.mds": "1:old"}
    listing = {**record, "z.mds": "1:new"}
    ranges = Ranges(listing, ["index.json", "m.mds"], failing={2})
    check, (a, m, z) = make_ranged(tmp_path, names, names, record, ranges, in_flight=3)
    waiting, outcome = vouch_in_thread(check, z)
    waiting.join(0.2)  # a bound: its range is held
    assert waiting.is_alive()
    assert outcome == []
    ranges.gates[2].set()  # its listing fails
    waiting.join(30)
    assert len(outcome) == 1
    assert isinstance(outcome[0], StorageError)
    assert "range 2" in str(outcome[0])
    assert (tmp_path / "cache" / "z.mds").exists()  # nothing judged
    with pytest.raises(StorageError, match="range 2"):
        check.vouch(z)  # again: never vouched
    with pytest.raises(StorageError, match="range 2"):
        check.vouch(m)  # once failed, a shard of a range still to come fails too
    for gate in ranges.gates:
        gate.set()
    with pytest.raises(StorageError, match="range 2"):
        check.wait()
    with pytest.raises(StorageError, match="range 2"):
        check.vouch(a)
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.generation == 1  # nothing recorded


def test_a_range_a_reader_waits_for_is_listed_next(tmp_path: Path):
    names = ["a.mds", "f.mds", "m.mds", "z.mds"]
    record = {"index.json": INDEX, **{name: f"1:{name}" for name in names}}
    ranges = Ranges(record, ["a.mds", "f.mds", "m.mds"], failing=set())
    check, entries = make_ranged(tmp_path, names, names, record, ranges, in_flight=1)
    deadline = time.monotonic() + 30
    while ranges.order != [0]:  # the one listing thread is in the first range
        assert time.monotonic() < deadline
        time.sleep(0.01)
    waiting, outcome = vouch_in_thread(check, entries[3])  # z.mds: the last range
    waiting.join(0.2)  # a bound: the first range is still held
    assert waiting.is_alive()
    assert ranges.order == [0]
    for gate in ranges.gates:
        gate.set()
    waiting.join(30)
    assert outcome == [True]
    check.wait()
    assert ranges.order == [0, 3, 1, 2]


def test_a_range_that_gives_a_shard_another_size_fails_its_vouch(tmp_path: Path):
    names = ["a.mds", "z.mds"]
    record = {"index.json": INDEX, "a.mds": "1:a", "z.mds": "1:z"}
    listing = {**record, "z.mds": "7:z"}
    ranges = Ranges(listing, ["index.json"], failing=set())
    for gate in ranges.gates:
        gate.set()

    def check_part(held: list[ShardEntry], part: Mapping[str, str]) -> None:
        for shard in held:
            listed = part.get(shard.raw_data.basename, "1:").split(":")[0]
            if listed != str(shard.raw_data.bytes):
                raise ShardFormatError(f"mem://r/{shard.raw_data.basename}: listed at {listed}")

    ranged = RangedListing(ranges.ranges, ranges.list_range, 2)
    check, entries = started(tmp_path, names, names, record, ranges.whole, ranged, check_part)
    with pytest.raises(ShardFormatError, match=r"z\.mds: listed at 7"):
        check.vouch(entries[1])
    with pytest.raises(ShardFormatError):
        check.wait()


def test_a_cold_listing_held_back_lists_nothing_until_released(tmp_path: Path):
    """Nothing cached: the listing waits for the process's holds, then runs and records."""
    names = ["a.mds", "z.mds"]
    listing = {"index.json": INDEX, "a.mds": "1:a", "z.mds": "1:z"}
    ranges = Ranges(listing, ["index.json"], failing=set())
    for gate in ranges.gates:
        gate.set()
    first, second = hold_cold_listings(SMALL), hold_cold_listings(SMALL)
    try:
        check, entries = make_ranged(tmp_path, names, [], {}, ranges, in_flight=2)
        check.vouch(entries[0])  # nothing cached, nothing to wait for
        (tmp_path / "cache" / "a.mds").write_bytes(b"x")  # fetched while the listing is held
        first()
        first()  # a release counts once
        time.sleep(0.2)  # a bound on a listing that must not start: a hold is still in force
        assert ranges.order == []
        assert not check.done
    finally:
        first()
        second()
    check.wait()
    assert sorted(ranges.order) == [0, 1]
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.objects == {**listing, "a.mds": ""}  # fetched before its listing: checked again


@pytest.mark.parametrize("failing", [set(), {1}])
def test_waiting_for_a_held_listing_runs_it_now(tmp_path: Path, failing: set[int]):
    """A hold never outlasts a wait: the listing runs, and its error is raised, not hung on."""
    names = ["a.mds", "z.mds"]
    listing = {"index.json": INDEX, "a.mds": "1:a", "z.mds": "1:z"}
    ranges = Ranges(listing, ["index.json"], failing=failing)
    for gate in ranges.gates:
        gate.set()
    release = hold_cold_listings(SMALL)
    try:
        check, entries = make_ranged(tmp_path, names, [], {}, ranges, in_flight=2)
        if failing:
            with pytest.raises(StorageError, match="range 1"):
                check.wait()
            with pytest.raises(StorageError, match="range 1"):
                check.vouch(entries[0])  # a failed listing fails the reads that follow
        else:
            check.wait()
            assert check.done
        assert sorted(ranges.order) == [0, 1]
    finally:
        release()


def test_a_listing_of_larger_shards_than_a_hold_covers_is_not_held(tmp_path: Path):
    """Larger shards land whole beside a first batch's ranges: listed before, as ever."""
    listing = {"index.json": INDEX, "a.mds": "1:a"}
    ranges = Ranges(listing, [], failing=set())
    ranges.gates[0].set()
    release = hold_cold_listings(SMALL - 1)
    try:
        check, _ = make_ranged(tmp_path, ["a.mds"], [], {}, ranges, in_flight=1)
        deadline = time.monotonic() + 30
        while not check.done:  # a bound: it runs, the hold notwithstanding
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        release()
    check.wait()


def test_a_listing_with_a_shard_in_doubt_is_never_held(tmp_path: Path):
    names = ["a.mds", "z.mds"]
    record = {"index.json": INDEX, "a.mds": "1:a", "z.mds": "1:old"}
    listing = {**record, "z.mds": "1:new"}
    ranges = Ranges(listing, ["index.json"], failing=set())
    for gate in ranges.gates:
        gate.set()
    release = hold_cold_listings(SMALL)
    try:
        check, (_, z) = make_ranged(tmp_path, names, ["z.mds"], record, ranges, in_flight=2)
        waiting, outcome = vouch_in_thread(check, z)
        waiting.join(30)  # a bound: listed at once, the hold notwithstanding
        assert outcome == [True]
        assert not (tmp_path / "cache" / "z.mds").exists()  # changed: gone before its hand-over
    finally:
        release()


def test_a_forked_child_is_not_held_by_its_parent_s_holds(tmp_path: Path):
    names = ["a.mds"]
    record = {"index.json": INDEX, "a.mds": "1:a"}
    ranges = Ranges(record, ["index.json"], failing=set())
    for gate in ranges.gates:
        gate.set()
    release = hold_cold_listings(SMALL)
    try:
        check, _ = make_ranged(tmp_path, names, [], {}, ranges, in_flight=1)

        def child() -> str:
            check.wait()  # lists itself: the parent's hold is not the child's
            return "listed"

        assert in_forked_child(child) == "listed"
        assert not check.done  # the parent's listing is still held
    finally:
        release()
    check.wait()
