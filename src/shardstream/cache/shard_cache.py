"""The node-local shard cache: each shard fetched once per node, under a hard size limit.

Every rank and DataLoader worker on a node shares one cache folder per stream (the stream's
``local``) and coordinates through the file system alone, so there is no shared memory to go
stale, nothing to clean by hand after a crash, and two jobs may use the same folder at once:

* A shard is on disk when its uncompressed files exist with the sizes the index records.
  Downloads and decompression land under temporary names and are renamed into place, so a
  file under its final name is always whole.
* Whoever fetches a shard holds that shard's lock (``.shardstream/locks/<hash>.lock``, an
  ``flock``) and writes a record of the fetch into it; others wait for it and then find the
  files. The kernel drops the lock of a killed process; the next holder finds its record and
  deletes what it left half-written.
* With ``limit`` set, a fetch first *reserves* its bytes: under the cache-wide lock it adds up
  the shard files on disk and the reservations of fetches in flight (written into their shard
  locks), evicts least-recently-used shards that came from a remote until the new shard fits,
  and records its own reservation. The files of local-only streams (``remote=None``) are never
  deleted: they are the dataset's only copy, never written to. The decompressed copies the
  cache makes of their compressed shards (with their locks, in ``layout.in_place_cache``)
  count against the limit and are evicted like fetched shards. Readers mark a shard used by
  touching its file in the cache.
* Downloads take a place in one of ``download_slots`` node-wide slots (lock files again,
  :mod:`~shardstream.cache.download_slots`), so the node's download concurrency does not grow
  with the number of DataLoader workers: a shard fetched as parallel ranges fills a slot, and
  up to ``options.concurrency`` shards fetched in one request each share one
  (:meth:`DownloadOptions.slot_share`). Copies from a folder on a local disk take none.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from shardstream.cache.download_slots import DownloadSlots
from shardstream.cache.layout import STATE_FOLDER, kept_bytes, node_state_folder, shard_lock_path
from shardstream.cache.listing_check import ListingCheck
from shardstream.cache.locks import FileLock, try_lock_file
from shardstream.cache.reservations import record, remove_temporaries, reserved_bytes
from shardstream.cache.safe_paths import make_folders
from shardstream.cache.shard_files import ShardFiles, shard_file_pairs
from shardstream.errors import (
    DISK_FULL_ERRNOS,
    CacheLimitError,
    ConfigurationError,
    DiskFullError,
    ShardNotFoundError,
)
from shardstream.format.index import FileInfo, ShardEntry
from shardstream.storage import DownloadOptions, ObjectStore, download_file
from shardstream.storage.filesystems import free_bytes, is_local_disk

__all__ = ["STATE_FOLDER", "CacheStream", "ShardCache", "ShardFetcher"]

logger = logging.getLogger(__name__)

V = TypeVar("V")

_POLL_S = 0.01
_MAX_POLL_S = 0.25


class ShardFetcher(Protocol):
    """Fetches shards that are not objects of their own (Parquet row groups: byte ranges)."""

    def fetch(
        self, store: ObjectStore, entry: ShardEntry, dest: str, options: DownloadOptions
    ) -> None:
        """Write the shard's bytes to ``dest`` (``raw_data.bytes`` of them), atomically."""


@dataclass(frozen=True)
class CacheStream:
    """One stream as the cache sees it.

    Attributes:
        local: The folder holding the stream's ``index.json`` (its split folder, if any).
        store: Where missing shards come from; ``None`` for a local-only stream, whose files
            are never evicted.
        entries: The stream's shards, from its index.
        options: Retries, timeout and parallelism of its downloads.
        keep_zip: Keep compressed files after decompressing them.
        validate_hash: Check compressed files against this digest when decompressing.
        fetcher: Fetches the shards instead of downloading ``raw_data.basename`` (Parquet).
        check: The start's listing under way, asked before a shard cached before the start is
            handed over (:mod:`shardstream.cache.listing_check`); ``None`` once settled.
    """

    local: str
    store: ObjectStore | None
    entries: Sequence[ShardEntry]
    options: DownloadOptions = field(default_factory=DownloadOptions)
    keep_zip: bool = False
    validate_hash: str | None = None
    fetcher: ShardFetcher | None = None
    check: ListingCheck | None = None


class ShardCache:
    """Makes shards present on local disk, shared by every process of a node.

    Args:
        streams: The dataset's streams; shard ids run over them end to end.
        limit: The most bytes the cache's folders may hold (the remote streams' shard files,
            local-only streams' decompressed copies, and the state beside them), or ``None``.
        download_slots: Concurrent downloads on the node, over all its processes.

    Raises:
        ConfigurationError: A bad limit or slot count.
    """

    def __init__(
        self,
        streams: Sequence[CacheStream],
        *,
        limit: int | None = None,
        download_slots: int = 8,
    ) -> None:
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ConfigurationError(f"cache_limit must be a positive byte count, got {limit!r}")
        if not isinstance(download_slots, int) or download_slots < 1:
            raise ConfigurationError(
                f"download_slots must be a positive integer, got {download_slots!r}"
            )
        self.streams = list(streams)
        self.limit = limit
        self.download_slots = download_slots
        # A remote stream's files are decompressed in its cache folder; a local-only stream's
        # in a folder of its own (ShardFiles' default), never in the user's data.
        self._files = [
            ShardFiles(s.local, s.local if s.store is not None else None, s.validate_hash)
            for s in self.streams
        ]
        # The streams whose folders the cache writes and counts: remote streams, and local-only
        # streams with compressed shards (their decompressed copies).
        self._counted = [
            s.store is not None or any(e.compression is not None for e in s.entries)
            for s in self.streams
        ]
        self._first: list[int] = [0]
        for stream in self.streams:
            self._first.append(self._first[-1] + len(stream.entries))
        self._state = node_state_folder(s.local for s in self.streams if s.store is not None)
        self._slots = DownloadSlots(self._state, download_slots) if self._state else None
        self._ledger: str | None = self._state  # without remote streams: found when needed
        self._largest: int | None = None  # the largest remote shard's footprint, once known
        self._warned = False  # a tight cache_limit is logged once

    @property
    def num_shards(self) -> int:
        """Shards over every stream."""
        return self._first[-1]

    def locate(self, shard: int) -> tuple[int, ShardEntry]:
        """The stream of dataset-wide shard ``shard`` and its index entry."""
        stream = _bisect(self._first, shard)
        return stream, self.streams[stream].entries[shard - self._first[stream]]

    def footprint(self, shard: int) -> int:
        """The most bytes the shard occupies at once: its files, compressed and not."""
        _, entry = self.locate(shard)
        return sum(
            raw.bytes + (zipped.bytes if zipped else 0) for raw, zipped in shard_file_pairs(entry)
        )

    def is_present(self, shard: int) -> bool:
        """Whether the shard's uncompressed files are on disk, whole."""
        number, entry = self.locate(shard)
        return self._present(number, entry)

    def check_limit(self, concurrent_readers: int) -> None:
        """Refuse a limit that cannot hold the largest shard; warn when it is tight.

        A reader needs a shard on disk only from its fetch to its opening (an opened shard is
        read or mapped, and may be evicted then), so a limit of one shard lets any number of
        readers make progress, waiting for each other's downloads. Fewer shards than readers
        is allowed but slow, and logged.

        Args:
            concurrent_readers: Processes of the node that read at once (ranks x workers).

        Raises:
            CacheLimitError: ``limit`` cannot hold the largest shard beside the cached index
                and state; the message says how much is enough.
        """
        if self.limit is None:
            return
        largest = self._largest_footprint()
        kept = sum(
            kept_bytes(self._folder(n)) for n in range(len(self.streams)) if self._counted[n]
        )
        if self.limit < largest + kept:
            raise CacheLimitError(
                f"cache_limit={self.limit} bytes is too small: the largest shard needs "
                f"{largest} bytes on disk (compressed and decompressed), beside the {kept} bytes "
                f"of the cached index and state. Raise cache_limit to at least {largest + kept} "
                f"bytes; {concurrent_readers * largest * 2 + kept} bytes lets the "
                f"{concurrent_readers} reading processes of this node download ahead."
            )
        if self.limit < concurrent_readers * largest + kept and not self._warned:
            self._warned = True
            logger.warning(
                "cache_limit=%d bytes holds fewer shards than the %d processes that read on "
                "this node: they will wait for each other's downloads (about %d bytes avoids it)",
                self.limit, concurrent_readers, concurrent_readers * largest * 2 + kept,
            )  # fmt: skip

    def _largest_footprint(self) -> int:
        """The most bytes a shard's fetch (or decompression) reserves (0 if none is counted)."""
        if self._largest is None:
            self._largest = max(
                (
                    self._need(number, entry)
                    for number, stream in enumerate(self.streams)
                    if self._counted[number]
                    for entry in stream.entries
                ),
                default=0,
            )
        return self._largest

    def _need(self, number: int, entry: ShardEntry) -> int:
        """Bytes a shard's fetch writes: a remote's files, or a local shard's decompressed copy."""
        pairs = shard_file_pairs(entry)
        if self.streams[number].store is None:
            return sum(raw.bytes for raw, zipped in pairs if zipped is not None)
        return sum(raw.bytes + (zipped.bytes if zipped else 0) for raw, zipped in pairs)

    def ensure(self, shard: int) -> bool:
        """Make the shard's uncompressed files present, fetching them if needed.

        Returns:
            Whether this call fetched them (their files' times are then fresh).

        Raises:
            ShardNotFoundError: A local-only stream lacks the shard's files.
            CacheLimitError: No room could be made within the wait allowed.
            CacheTimeoutError: Another process held the shard's lock too long.
            DiskFullError: The cache folder's disk filled up.
            StorageError: The download failed after every retry.
        """
        number, entry = self.locate(shard)
        self._vouch(number, entry)
        if self._present(number, entry) or not self._fillable(number, entry):
            return False
        with self._held(number, entry) as lock:
            return self._fill(lock, number, entry, shard)

    def open(self, shard: int, opener: Callable[[], V]) -> V:
        """Make the shard present and return ``opener()``, called before anyone can evict it.

        ``opener`` maps or reads the shard's files; once it has, eviction (which only unlinks)
        no longer matters to it. Without this, under a small ``cache_limit`` another process
        could evict a shard between its fetch and its opening, again and again.

        Raises:
            The errors of :meth:`ensure`, and whatever ``opener`` raises.
        """
        return self.open_fetched(shard, opener)[0]

    def open_fetched(self, shard: int, opener: Callable[[], V]) -> tuple[V, bool]:
        """:meth:`open`, and whether this call fetched the shard (as :meth:`ensure` says).

        One check of the shard's files where :meth:`ensure` then :meth:`open` would make two.
        """
        number, entry = self.locate(shard)
        if not self._fillable(number, entry):  # the dataset's own files, or none: no lock
            return opener(), False
        self._vouch(number, entry)
        if self._present(number, entry):
            with contextlib.suppress(ShardNotFoundError):  # evicted just now: fetch it below
                return opener(), False
        with self._held(number, entry) as lock:
            fetched = self._fill(lock, number, entry, shard)
            return opener(), fetched

    def _vouch(self, number: int, entry: ShardEntry) -> None:
        """Wait where the start's listing must confirm the shard's cached files (or drop them)."""
        check = self.streams[number].check
        if check is not None:
            check.vouch(entry)

    @contextlib.contextmanager
    def _held(self, number: int, entry: ShardEntry) -> Iterator[FileLock]:
        """Hold the shard's lock: one fetch at a time, and no eviction meanwhile."""
        lock = FileLock(self._lock_path(number, entry))
        timeout = _lock_timeout(self.streams[number], entry)
        lock.acquire(timeout=timeout, what=f"shard {_name(entry)}")
        try:
            yield lock
        finally:
            lock.release()

    def _fill(self, lock: FileLock, number: int, entry: ShardEntry, shard: int) -> bool:
        """Fetch the shard unless present (``True`` when it did); the caller holds ``lock``."""
        stream = self.streams[number]
        if self._present(number, entry):
            return False
        if os.fstat(lock.fd).st_size:  # the last holder died mid-fetch: clear its leftovers
            self._remove_orphans(number, entry)
            os.ftruncate(lock.fd, 0)
        if self.limit is not None:
            self._reserve(self._need(number, entry), lock, stream, entry)  # records the fetch
        else:
            record(lock.fd, self._need(number, entry), entry)
        try:
            if stream.store is None:  # the user's compressed files are never deleted
                self._files[number].materialize(entry, keep_zip=True)
            else:
                self._fetch(number, entry)
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            folder = self._folder(number)
            raise DiskFullError(
                exc.errno,
                f"no space left in {folder} for shard {_name(entry)} "
                f"({self.footprint(shard)} bytes with its compressed file; "
                f"{free_bytes(folder)} bytes free now): free disk space, set cache_limit below "
                f"it, or give local= (SHARDSTREAM_CACHE_DIR if read in place) a roomier disk",
            ) from exc
        finally:
            os.ftruncate(lock.fd, 0)
        return True

    def source_url(self, shard: int) -> str | None:
        """Where the shard's stored file comes from; ``None`` for a local-only stream."""
        number, entry = self.locate(shard)
        store = self.streams[number].store
        return None if store is None else store.url(entry.data_file.basename)

    def touch(self, shard: int) -> None:
        """Mark the shard's file in the cache as just used, for least-recently-used eviction."""
        number, entry = self.locate(shard)
        paths = self._evictable(number, entry)
        if not paths:  # a local-only shard stored uncompressed: the user's file, never evicted
            return
        with contextlib.suppress(OSError):
            os.utime(paths[0], follow_symlinks=False)  # a link planted there is not followed

    def usage(self) -> int:
        """Bytes the cache's folders take now, fetches in flight included.

        Everything the cache keeps counts: fetched shard files, decompressed copies of
        local-only streams' shards, the cached index, and the locks, records, node orders and
        run state under ``.shardstream``.
        """
        used, _ = self._scan(own=None)
        return used

    def evict(self, shard: int) -> int:
        """Delete the shard's files in the cache unless a fetch of it is under way.

        A remote stream's shard files go; of a local-only stream's shard, only the decompressed
        copies the cache made (the user's files are never deleted).

        Returns:
            The bytes freed (0 when the shard has nothing in the cache, or is busy).
        """
        number, entry = self.locate(shard)
        paths = self._evictable(number, entry)
        if not paths:
            return 0
        lock = try_lock_file(self._lock_path(number, entry))
        if lock is None:
            return 0
        freed = 0
        try:
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    size = os.stat(path).st_size
                    os.remove(path)
                    freed += size
        finally:
            lock.release()
        if freed:
            logger.debug("evicted shard %s (%d bytes)", _name(entry), freed)
        return freed

    # --- fetching -------------------------------------------------------------------------------

    def _fetch(self, number: int, entry: ShardEntry) -> None:
        stream = self.streams[number]
        assert stream.store is not None
        if stream.fetcher is not None:
            with self._slot(1):
                path = os.path.join(stream.local, entry.raw_data.basename)
                stream.fetcher.fetch(stream.store, entry, path, stream.options)
            return
        for raw, zipped in shard_file_pairs(entry):
            info = zipped if zipped is not None else raw
            path = os.path.join(stream.local, info.basename)
            # The uncompressed file was just found missing (the caller's check); a compressed
            # one may be here from a fetch that stopped before decompressing it.
            if zipped is not None and _whole(path, info):
                continue
            # A copy from a disk of this machine takes microseconds and no slot: slots bound
            # the node's network downloads (and cost a lock file's open, lock and close).
            share = stream.options.slot_share(info.bytes)
            slot = contextlib.nullcontext() if is_local_disk(stream.store) else self._slot(share)
            make_folders(os.path.dirname(path), root=stream.local)  # through no planted link
            with slot:
                started = time.monotonic()
                download_file(
                    stream.store, info.basename, path, stream.options, expected_size=info.bytes
                )
            logger.debug(
                "downloaded %s (%d bytes) in %.3f s",
                stream.store.url(info.basename),
                info.bytes,
                time.monotonic() - started,
            )
        if entry.compression is not None:
            self._files[number].materialize(entry, keep_zip=stream.keep_zip)

    def _slot(self, share: int) -> contextlib.AbstractContextManager[None]:
        """Hold a place in one of the node's download slots (``share`` downloads to a slot)."""
        assert self._slots is not None
        return self._slots.hold(share)

    # --- the size limit -------------------------------------------------------------------------

    def _reserve(self, need: int, lock: FileLock, stream: CacheStream, entry: ShardEntry) -> None:
        """Make room for ``need`` bytes and record the reservation in ``lock``'s file."""
        assert self.limit is not None
        if need > self.limit:
            raise CacheLimitError(
                f"shard {_name(entry)} needs {need} bytes on disk but cache_limit is "
                f"{self.limit}; raise cache_limit above the largest shard"
            )
        deadline = time.monotonic() + _lock_timeout(stream, entry)
        ledger = FileLock(os.path.join(self._ledger_folder(), "cache.lock"))
        delay = _POLL_S
        while True:
            with ledger.hold(timeout=60.0, what="the cache ledger"):
                used, candidates = self._scan(own=lock.path)
                for _, victim in sorted(candidates):
                    if used + need <= self.limit:
                        break
                    used -= self.evict(victim)
                if used + need <= self.limit:
                    record(lock.fd, need, entry)
                    return
            if time.monotonic() > deadline:
                raise CacheLimitError(
                    f"no room for shard {_name(entry)} ({need} bytes) within cache_limit="
                    f"{self.limit}: {used} bytes are held by shards being fetched right now. "
                    f"Raise cache_limit, or lower predownload or the number of workers"
                )
            time.sleep(delay)
            delay = min(2 * delay, _MAX_POLL_S)

    def _ledger_folder(self) -> str:
        """The folder of the cache-wide lock: the node state folder, else the first copies'."""
        if self._ledger is None:
            folders = (self._folder(n) for n, counted in enumerate(self._counted) if counted)
            self._ledger = node_state_folder(folders)
        assert self._ledger is not None  # called for a counted stream's fetch
        return self._ledger

    def _scan(self, own: str | None) -> tuple[int, list[tuple[int, int]]]:
        """Bytes in use, and ``(last use, shard)`` of every evictable shard on disk.

        Reservations are read before the files are listed: a fetch that finishes in between is
        then counted twice (safe), never missed.
        """
        used = 0
        candidates: list[tuple[int, int]] = []
        for number, stream in enumerate(self.streams):
            if not self._counted[number]:
                continue
            folder = self._folder(number)
            used += reserved_bytes(folder, own) + kept_bytes(folder)
            shard_paths = [self._evictable(number, entry) for entry in stream.entries]
            present = _listing(shard_paths)
            for k, paths in enumerate(shard_paths):
                size = 0
                last = 0
                for path in paths:
                    if path not in present:  # a folder listing, not a stat per absent file
                        continue
                    try:
                        status = os.stat(path)
                    except OSError:
                        continue
                    size += status.st_size
                    last = max(last, status.st_mtime_ns)
                if size:
                    used += size
                    candidates.append((last, self._first[number] + k))
        return used, candidates

    # --- files ----------------------------------------------------------------------------------

    def _present(self, number: int, entry: ShardEntry) -> bool:
        files = self._files[number]  # checked once or twice a shard read
        raw, meta = entry.raw_data, entry.raw_meta
        return _whole(files.uncompressed_path(raw, entry.zip_data), raw) and (
            meta is None or _whole(files.uncompressed_path(meta, entry.zip_meta), meta)
        )

    def _fillable(self, number: int, entry: ShardEntry) -> bool:
        """Whether the cache can make the shard's files: fetch them, or decompress them."""
        store, zipped = self.streams[number].store, (entry.zip_data, entry.zip_meta)
        return store is not None or zipped != (None, None)

    def _folder(self, number: int) -> str:
        """Where the cache writes for the stream: fetched and decompressed files, and locks."""
        stream = self.streams[number]
        return stream.local if stream.store is not None else self._files[number].cache_root

    def _lock_path(self, number: int, entry: ShardEntry) -> str:
        return shard_lock_path(self._folder(number), entry)

    def _evictable(self, number: int, entry: ShardEntry) -> list[str]:
        """The shard's files the cache may delete: all a remote's, a local one's copies only."""
        stream = self.streams[number]
        if stream.store is not None:
            return _paths(stream.local, entry)
        if not self._counted[number]:
            return []
        folder = self._files[number].cache_root
        pairs = shard_file_pairs(entry)
        return [os.path.join(folder, raw.basename) for raw, zipped in pairs if zipped is not None]

    def _remove_orphans(self, number: int, entry: ShardEntry) -> None:
        """Delete temporaries a killed process left for this shard (its lock is ours now)."""
        for path in _paths(self._folder(number), entry):
            remove_temporaries(path)


def _paths(folder: str, entry: ShardEntry) -> list[str]:
    """Every file of the shard in ``folder`` (a stream's cache folder), compressed and not."""
    return [
        os.path.join(folder, info.basename)
        for pair in shard_file_pairs(entry)
        for info in pair
        if info is not None
    ]


def _listing(shard_paths: list[list[str]]) -> set[str]:
    """The paths of the files now in the folders that hold the given shards' files."""
    folders = {os.path.dirname(path) for paths in shard_paths for path in paths}
    present: set[str] = set()
    for folder in folders:
        with contextlib.suppress(OSError):  # no such folder yet: nothing in it
            present.update(os.path.join(folder, name) for name in os.listdir(folder))
    return present


def _whole(path: str, info: FileInfo) -> bool:
    try:
        return os.stat(path).st_size == info.bytes
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        raise ShardNotFoundError(
            f"cannot read the cached shard {path}: {exc}; check the permissions of the "
            "cache folder (local=)"
        ) from exc


def _lock_timeout(stream: CacheStream, entry: ShardEntry) -> float:
    """How long to wait for another process's fetch of a shard: all its attempts, and more."""
    options = stream.options
    size = sum(info.bytes for pair in shard_file_pairs(entry) for info in pair if info)
    rounds = max(1, math.ceil(size / max(1, options.part_size) / max(1, options.concurrency)))
    return (options.retry + 1) * (options.timeout + 30.0) * rounds + 60.0


def _name(entry: ShardEntry) -> str:
    return entry.data_file.basename


def _bisect(starts: list[int], value: int) -> int:
    """The index ``i`` with ``starts[i] <= value < starts[i + 1]``."""
    low, high = 0, len(starts) - 2
    if not 0 <= value < starts[-1]:
        raise IndexError(f"shard {value} is out of range for {starts[-1]} shards")
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= value:
            low = middle
        else:
            high = middle - 1
    return low
