"""A start's listing of the remote, run while the first shards are fetched.

A start that knows the index (the cached one, confirmed current by the identity a HEAD
answers, or one just fetched with the identity its GET answered) need not wait for the listing
of every object to begin reading: a shard that is not in the cache is fetched from the remote
as it is now, whatever the listing will say. Only a shard whose cached files were there when
the start began is in doubt: its remote object may have been rewritten in place. So the
listing runs in threads (:class:`ListingCheck`), and the cache asks :meth:`ListingCheck.vouch`
before it hands such a shard over.

The listing comes in key ranges (:class:`RangedListing`, cut at the names the start knows,
``list_ranges`` of them in flight), and each range is judged as it arrives: the index's sizes
of the shards it holds are checked against it, and the cached files of each doubted shard
whose object it lists with another identity than the record's are deleted (under the shard's
lock), so the cache fetches them again. :meth:`~ListingCheck.vouch` waits only for the ranges
that hold the shard's objects, and a range a reader waits for is listed next. No stale byte is
handed over, and a start waits for the listing only where a cached shard is read before its
range has arrived. A store that lists in one walk is one range: a vouch waits for all of it.

Once every range is listed, the rest of the check runs as at a start that waits (under the
index lock): the index's sizes are checked against the listing, the changed cached files still
there are deleted, and the listing is recorded, unless the index changed since it was read. A
shard fetched while the listing ran is recorded as of no known version: its GET may have read
the object before a rewrite the listing saw, so the next start checks it against its own
listing and fetches it again, rather than trust bytes no listing vouched for.
An error of the listing (a range that failed after its retries, or an index the listing
contradicts) is raised by the next :meth:`~ListingCheck.vouch` of any shard, and by every vouch
waiting for a range, so a read fails rather than go on unchecked.

A start with nothing cached to doubt (a cold cache) has no read that waits for its listing:
the listing only checks the index's sizes and records the versions for the next start. A
process about to fork DataLoader workers whose first batches read small shards by range holds
such listings back (:func:`hold_cold_listings`) until its first batch is in, so that their
requests, XML and record leave the cores to the workers. A held listing still runs before
anything waits for it (:meth:`~ListingCheck.wait`, and a vouch that needs a range), and a
listing with a shard in doubt is never held. Shards that land whole before a listing are
recorded as of no known version (above), so only small uncompressed shards, which a first
batch reads by range and leaves out of the cache, are held for.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from shardstream.cache.provenance import (
    SourceRecord,
    drop_stale_files,
    present_sources,
    read_record,
)
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.errors import StorageError
from shardstream.format.index import INDEX_BASENAME, ShardEntry
from shardstream.storage.key_ranges import KeyRange, range_index, upper_bounds

__all__ = ["ListingCheck", "RangedListing", "hold_cold_listings"]

logger = logging.getLogger(__name__)

#: Lists the remote: each object's identity, and whether that is every object.
Lister = Callable[[list[str]], tuple[dict[str, str], bool]]

_holding = threading.Condition()  # the holds in force, and a held listing let go
_holds: dict[int, list[int]] = {}  # process id -> the shard size limits of its holds in force


def _fresh_hold_state() -> None:
    """A forked child's own lock: another thread may have held the parent's at the fork."""
    global _holding
    _holding = threading.Condition()
    _holds.clear()


os.register_at_fork(after_in_child=_fresh_hold_state)


def hold_cold_listings(small_bytes: int) -> Callable[[], None]:
    """Hold back this process's listings of cold starts over small shards; the release.

    Such a listing (:class:`ListingCheck` of a start with nothing cached to doubt, every
    shard uncompressed and stored in at most ``small_bytes``) waits, once started, until
    every hold of this process that covers it is released, or until something waits for it.
    The returned function releases this hold (once; later calls do nothing).
    """
    pid = os.getpid()
    with _holding:
        _holds.setdefault(pid, []).append(small_bytes)
    released = False

    def release() -> None:
        nonlocal released
        with _holding:
            if released or os.getpid() != pid:
                return
            released = True
            _holds[pid].remove(small_bytes)
            _holding.notify_all()

    return release


def _held(largest: float) -> bool:
    """Whether a hold of this process covers shards of ``largest`` bytes (``_holding`` held)."""
    return any(largest <= limit for limit in _holds.get(os.getpid(), ()))


def _largest_file(entries: Sequence[ShardEntry]) -> float:
    """The bytes of the entries' largest stored file (a compressed one counts as unbounded)."""
    largest = 0
    for entry in entries:
        if entry.zip_data is not None:
            return float("inf")  # read whole, never by range
        largest = max(largest, entry.raw_data.bytes)
    return largest


@dataclass(frozen=True)
class RangedListing:
    """A listing in key ranges: which ranges, how one is listed, how many at once.

    Attributes:
        ranges: The ranges, in key order, together every key once (``BaseStore.key_ranges``).
        list_range: Each object's identity in one range (with the request's retries).
        in_flight: Ranges listed at once (``DownloadOptions.list_ranges``).
    """

    ranges: Sequence[KeyRange]
    list_range: Callable[[KeyRange], dict[str, str]]
    in_flight: int


class ListingCheck:
    """The listing of a start, under way in threads; :meth:`vouch` waits where it must.

    Args:
        lister: Lists the whole remote (split at the names it is given): the listing itself
            when ``ranged`` is ``None``, else the listing made again under the index lock
            when another process recorded a newer one meanwhile.
        split_at: Names to split ``lister``'s listing at.
        state: The stream's state folder (its record and index lock).
        local: The stream's cache folder.
        remote: The remote root's URL.
        entries: The index in use.
        index_identity: The identity of the index in use, as its HEAD or GET answered.
        unsure: Source file names whose cached files were there at start: the listing must
            confirm them. Those that appear while it runs are recorded as of no known version.
        settle: Runs the listing's checks under the index lock: ``(listing, complete,
            record) -> stale keys``; raises what makes the index unusable.
        lock: Holds the index lock (a context manager factory).
        lock_timeout: How long to wait for a fetch of a changed shard under way.
        seen: The record's generation when the start read it (0: none).
        ranged: The listing in key ranges, each judged as it arrives (``None``: one walk,
            ``lister``'s).
        check_part: Checks the index's entries of the shards a range holds against the
            range's listing (their sizes); raises what makes the index unusable.
    """

    def __init__(
        self,
        lister: Lister,
        split_at: list[str],
        *,
        state: str,
        local: str,
        remote: str,
        entries: list[ShardEntry],
        index_identity: str,
        unsure: set[str],
        settle: Callable[[dict[str, str], bool, SourceRecord | None], set[str] | None],
        lock: Callable[[], AbstractContextManager[object]],
        lock_timeout: float,
        seen: int,
        ranged: RangedListing | None = None,
        check_part: Callable[[list[ShardEntry], Mapping[str, str]], None] | None = None,
    ) -> None:
        self._seen = seen
        self._lister = lister
        self._split_at = split_at
        self._state = state
        self._local = local
        self._remote = remote
        self._entries = entries
        self._identity = index_identity
        self._present = frozenset(unsure)
        self._settle = settle
        self._lock = lock
        self._lock_timeout = lock_timeout
        self._ranged = ranged
        self._ranges: Sequence[KeyRange] = [KeyRange()] if ranged is None else ranged.ranges
        self._uppers = upper_bounds(self._ranges)
        self._check_part = check_part
        self._thread: threading.Thread | None = None
        self._wanted_now = False  # something waits for a listing held back: it runs now
        self._reset()

    def _reset(self) -> None:
        """The state of a listing not begun (in a forked child too: no lock of the parent's)."""
        self._pid = os.getpid()
        self._run_lock = threading.Lock()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._unsure = set(self._present)
        self._changed = threading.Condition()  # a range listed, a range wanted, an error
        self._listed: dict[int, dict[str, str]] = {}  # range -> its listing, once judged
        self._taken: set[int] = set()
        self._pending: deque[int] = deque(range(len(self._ranges)))
        self._wanted: deque[int] = deque()
        self._confirmed: dict[str, str | None] = {}  # doubted names a range confirmed, as listed

    def start(self) -> ListingCheck:
        """Begin the listing in a thread of its own (held back by :func:`hold_cold_listings`)."""
        self._thread = threading.Thread(
            target=self._run, name="shardstream-start-listing", daemon=True
        )
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        """Whether the listing has arrived and been settled (or failed)."""
        return self._done.is_set()

    def vouch(self, entry: ShardEntry) -> None:
        """Return once the shard's cached files may be handed over (or are gone as stale).

        Waits only when the shard's files were cached before the start, and then for the key
        ranges that hold its objects (a store listed in one walk: for all of it).

        Raises:
            StorageError: The listing (the shard's range, or another) failed after its
                retries, or contradicted the index.
            ShardFormatError: The listing gives a file another size than the index does.
        """
        if self._done.is_set() or os.getpid() != self._pid:
            if not self._done.is_set() and self._doubted_sources(entry):
                self.wait()  # a forked child: it lists itself
            if self._error is not None:
                raise self._error
            return
        names = self._doubted_sources(entry)
        if not names:
            if self._error is not None:
                raise self._error
            return
        if self._ranged is None:
            self.wait()
            return
        self._await({range_index(self._uppers, name) for name in names})

    def _await(self, needed: set[int]) -> None:
        """Wait until the ranges ``needed`` are listed and judged; listed next if still to come.

        Raises:
            The listing's error (of any range, or of the whole).
        """
        self._let_go()
        with self._changed:
            while self._error is None and not needed <= self._listed.keys():
                if self._done.is_set():
                    break
                self._wanted.extend(needed - self._taken - set(self._wanted))
                self._changed.wait()
        if self._error is not None:
            raise self._error

    def wait(self) -> None:
        """Wait for the listing and its checks (in a forked child: run them here).

        Raises:
            The listing's error, as :meth:`vouch`.
        """
        if not self._done.is_set() and os.getpid() != self._pid:
            # A forked child has no copy of the listing's threads: it lists itself (with locks
            # of its own: the parent's threads may have held them at the fork).
            self._reset()
            self._run()
        self._let_go()
        self._done.wait()
        if self._error is not None:
            raise self._error

    def _doubted_sources(self, entry: ShardEntry) -> set[str]:
        """The shard's source objects whose cached files were there at start."""
        present = self._present
        if not present:
            return set()
        sources = {(zipped or raw).basename for raw, zipped in shard_file_pairs(entry)}
        return sources & present

    def _let_go(self) -> None:
        """Something waits for this listing: held back or not, it runs now."""
        with _holding:
            self._wanted_now = True
            _holding.notify_all()

    def _wait_while_held(self) -> None:
        """Wait while a hold of this process covers this listing (none if a shard is in doubt)."""
        if self._present:  # a read may wait for it: never held
            return
        largest = _largest_file(self._entries)
        with _holding:
            _holding.wait_for(lambda: self._wanted_now or not _held(largest))

    def _run(self) -> None:
        self._wait_while_held()
        with self._run_lock:
            if self._done.is_set():
                return
            try:
                if self._ranged is None:
                    listing, complete = self._lister(self._split_at)
                else:
                    listing, complete = self._list_ranges(self._ranged), True
                self._check(listing, complete)
            except Exception as exc:  # noqa: BLE001 (raised where a shard is read, not lost)
                self._fail(exc)
                logger.warning("checking %s against its listing failed: %s", self._remote, exc)
            finally:
                with self._changed:
                    self._done.set()
                    self._changed.notify_all()

    def _fail(self, exc: BaseException) -> None:
        with self._changed:
            if self._error is None:
                self._error = exc
            self._changed.notify_all()

    # --- the ranges, judged as they arrive ------------------------------------------------------

    def _list_ranges(self, ranged: RangedListing) -> dict[str, str]:
        """Every range, ``ranged.in_flight`` at once, each judged as it arrives; merged.

        Raises:
            The first error of a range (its listing, or its check).
        """
        record = read_record(self._state)
        recorded: Mapping[str, str] = {} if record is None else record.objects
        plan = _RangePlan(self._uppers, self._entries, self._unsure)
        workers = [
            threading.Thread(
                target=self._work,
                args=(ranged, plan, recorded),
                name="shardstream-start-listing-range",
                daemon=True,
            )
            for _ in range(max(1, min(ranged.in_flight, len(self._ranges))))
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if self._error is not None:
            raise self._error
        merged: dict[str, str] = {}
        for number in range(len(self._ranges)):  # ranges in key order: the merge is sorted
            merged.update(self._listed[number])
        return merged

    def _work(self, ranged: RangedListing, plan: _RangePlan, recorded: Mapping[str, str]) -> None:
        try:
            while (number := self._take()) is not None:
                part = ranged.list_range(self._ranges[number])
                self._judge(number, part, plan, recorded)
        except Exception as exc:  # noqa: BLE001 (every waiting vouch raises it)
            self._fail(exc)

    def _take(self) -> int | None:
        """The next range to list: one a reader waits for first, else the next in key order."""
        with self._changed:
            if self._error is not None:
                return None
            for queue in (self._wanted, self._pending):
                while queue:
                    number = queue.popleft()
                    if number not in self._taken:
                        self._taken.add(number)
                        return number
            return None

    def _judge(
        self, number: int, part: dict[str, str], plan: _RangePlan, recorded: Mapping[str, str]
    ) -> None:
        """Check one range's shards against its listing, and drop their changed cached files."""
        if self._check_part is not None:
            self._check_part(plan.entries[number], part)
        doubted = plan.doubted[number]
        stale = {name for name in doubted if recorded.get(name) != part.get(name)}
        if stale:
            dropped = drop_stale_files(
                self._local, self._sourcing(stale), stale, lock_timeout=self._lock_timeout
            )
            if dropped:
                logger.warning(
                    "%s changed since it was cached in %s: deleted %d cached files, fetched "
                    "again when read", self._remote, self._local, dropped,
                )  # fmt: skip
        with self._changed:
            self._confirmed.update((name, part.get(name)) for name in doubted - stale)
            self._unsure -= doubted
            self._listed[number] = part
            self._changed.notify_all()

    # --- the whole listing, under the index lock ------------------------------------------------

    def _check(self, listing: dict[str, str], complete: bool) -> None:
        with self._lock():
            record = read_record(self._state)
            seen = 0 if record is None else record.generation
            if seen != self._seen and record is not None and record.objects != listing:
                # Another process recorded a listing since this start read the record, and
                # it differs from ours, which may be the older: list again, under the lock.
                listing, complete = self._lister(list(record.objects))
            stale = self._settle(listing, complete, record)
            listed_index = listing.get(INDEX_BASENAME)
            # A shard a range confirmed, listed again with another identity, goes too.
            moved = {
                name for name, seen_as in self._confirmed.items() if listing.get(name) != seen_as
            }
            doubted = self._unsure & stale if stale is not None else set()
            if stale is not None and (doubted or moved):
                dropped = drop_stale_files(
                    self._local,
                    self._sourcing(doubted | moved),
                    stale | moved,
                    lock_timeout=self._lock_timeout,
                )
                if dropped:
                    logger.warning(
                        "%s changed since it was cached in %s: deleted %d cached files, fetched "
                        "again when read", self._remote, self._local, dropped,
                    )  # fmt: skip
            if listed_index != self._identity:
                raise StorageError(
                    f"reading {self._remote}{INDEX_BASENAME} failed: the index changed while "
                    f"{self._remote} was listed (read as {self._identity}, listed as "
                    f"{listed_index}); a writer is rewriting the dataset: start again once it "
                    "has finished"
                )
            # A shard fetched while the listing ran may hold bytes older than the listing says
            # (rewritten between its GET and the listing): recorded as of no known version, the
            # next start fetches it again rather than trust it.
            fetched = present_sources(self._local, self._entries) - self._present
            objects = {key: "" if key in fetched else value for key, value in listing.items()}
            generation = 0 if record is None else record.generation
            SourceRecord(self._remote, objects, complete, generation + 1).write(self._state)
        self._unsure = set()

    def _sourcing(self, names: set[str]) -> Iterable[ShardEntry]:
        """The entries whose source objects include one of ``names``."""
        return [
            entry
            for entry in self._entries
            if any((zipped or raw).basename in names for raw, zipped in shard_file_pairs(entry))
        ]


class _RangePlan:
    """Which entries (for the size check) and doubted names each range holds."""

    def __init__(self, uppers: list[str], entries: Sequence[ShardEntry], unsure: set[str]) -> None:
        self.entries: list[list[ShardEntry]] = [[] for _ in range(len(uppers) + 1)]
        self.doubted: list[set[str]] = [set() for _ in range(len(uppers) + 1)]
        for entry in entries:
            held: set[int] = set()
            for raw, zipped in shard_file_pairs(entry):
                held.add(range_index(uppers, raw.basename))
                if zipped is not None:
                    held.add(range_index(uppers, zipped.basename))
            for number in held:
                self.entries[number].append(entry)
        for name in unsure:
            self.doubted[range_index(uppers, name)].add(name)
