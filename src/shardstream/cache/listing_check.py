"""A start's listing of the remote, run while the first shards are fetched.

A start that knows the index (the cached one, confirmed current by the identity a HEAD
answers, or one just fetched with the identity its GET answered) need not wait for the listing
of every object to begin reading: a shard that is not in the cache is fetched from the remote
as it is now, whatever the listing will say. Only a shard whose cached files were there when
the start began is in doubt: its remote object may have been rewritten in place. So the
listing runs in a thread (:class:`ListingCheck`), and the cache asks :meth:`ListingCheck.vouch`
before it hands such a shard over: the call waits for the listing, which by then has deleted
the files of every changed object (under each shard's lock), so the cache fetches them again.
No stale byte is handed over, and a start waits for the listing only where a cached shard is
read before it has arrived.

Once listed, the rest of the check runs as at a start that waits (under the index lock): the
index's sizes are checked against the listing, the changed cached files are deleted, and the
listing is recorded, unless the index changed since it was read. A shard fetched while the
listing ran is recorded as of no known version: its GET may have read the object before a
rewrite the listing saw, so the next start checks it against its own listing and fetches it
again, rather than trust bytes no listing vouched for.
An error of the listing (or an index the listing contradicts) is raised by the next
:meth:`~ListingCheck.vouch` of any shard, so a read fails rather than go on unchecked.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from shardstream.cache.provenance import (
    SourceRecord,
    drop_stale_files,
    present_sources,
    read_record,
)
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.errors import StorageError
from shardstream.format.index import INDEX_BASENAME, ShardEntry

__all__ = ["ListingCheck"]

logger = logging.getLogger(__name__)

#: Lists the remote: each object's identity, and whether that is every object.
Lister = Callable[[list[str]], tuple[dict[str, str], bool]]


class ListingCheck:
    """The listing of a start, under way in a thread; :meth:`vouch` waits where it must.

    Args:
        lister: Lists the remote (split at the names it is given).
        split_at: Names to split the listing at.
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
    ) -> None:
        self._seen = seen
        self._lister = lister
        self._split_at = split_at
        self._state = state
        self._local = local
        self._remote = remote
        self._entries = entries
        self._identity = index_identity
        self._unsure = unsure
        self._present = frozenset(unsure)
        self._settle = settle
        self._lock = lock
        self._lock_timeout = lock_timeout
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._pid = os.getpid()
        self._run_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> ListingCheck:
        """Begin the listing in a thread of its own."""
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

        Waits for the listing only when the shard's files were cached before the start.

        Raises:
            StorageError: The listing failed after its retries, or contradicted the index.
            ShardFormatError: The listing gives a file another size than the index does.
        """
        if not self._done.is_set():
            if not self._doubts(entry):
                return
            self.wait()
        if self._error is not None:
            raise self._error

    def wait(self) -> None:
        """Wait for the listing and its checks (in a forked child: run them here).

        Raises:
            The listing's error, as :meth:`vouch`.
        """
        if not self._done.is_set() and os.getpid() != self._pid:
            # A forked child has no copy of the listing's thread: it lists itself (with locks
            # of its own: the parent's thread may have held them at the fork).
            self._pid, self._run_lock, self._done = os.getpid(), threading.Lock(), threading.Event()
            self._run()
        self._done.wait()
        if self._error is not None:
            raise self._error

    def _doubts(self, entry: ShardEntry) -> bool:
        unsure = self._unsure
        return any((zipped or raw).basename in unsure for raw, zipped in shard_file_pairs(entry))

    def _run(self) -> None:
        with self._run_lock:
            if self._done.is_set():
                return
            try:
                self._check()
            except Exception as exc:  # noqa: BLE001 (raised where a shard is read, not lost)
                self._error = exc
                logger.warning("checking %s against its listing failed: %s", self._remote, exc)
            finally:
                self._done.set()

    def _check(self) -> None:
        listing, complete = self._lister(self._split_at)
        with self._lock():
            record = read_record(self._state)
            seen = 0 if record is None else record.generation
            if seen != self._seen and record is not None and record.objects != listing:
                # Another process recorded a listing since this start read the record, and
                # it differs from ours, which may be the older: list again, under the lock.
                listing, complete = self._lister(list(record.objects))
            stale = self._settle(listing, complete, record)
            listed_index = listing.get(INDEX_BASENAME)
            if stale is not None and self._unsure:
                doubted = self._doubted(stale)
                dropped = drop_stale_files(
                    self._local, doubted, stale, lock_timeout=self._lock_timeout
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

    def _doubted(self, stale: set[str]) -> Iterable[ShardEntry]:
        """The entries whose cached files were there at start and whose object changed."""
        doubted = self._unsure & stale
        return [
            entry
            for entry in self._entries
            if any((zipped or raw).basename in doubted for raw, zipped in shard_file_pairs(entry))
        ]
