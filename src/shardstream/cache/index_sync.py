"""Keeping a cached ``index.json`` and the cached shards in step with the remote, per node.

The reference reuses a local ``index.json`` and its shards forever, so a dataset rewritten in
its bucket is read through a stale index and stale shards. Here each process lists the remote
once at start, then, under the stream's index lock, compares the objects' identities with the
cache's record (:mod:`shardstream.cache.provenance`): the cached files of every changed object
are deleted, and a changed index fetched, before anything is read. Over HTTP, which cannot
list, the index alone is checked (a HEAD) and its entries compared.

Freshness is decided by identity and causality, never by time. A process compares the cache's
record only with a listing it asked for itself after it began (program order, which no clock
can reorder), and identities only for equality. The record carries a generation, a counter
bumped by each write under the index lock: a process that finds it moved since it read the
record, and the recorded listing unlike its own, lists again under the lock, so that every
recorded listing is newer than the one it replaces. No wall-clock time is recorded or compared,
so an NTP step, or a state folder written under another node's skewed clock, cannot make a
stale cache look current.

An index is checked against the listing it came with before anything is sized by it: each
file's size must be the listed object's (:func:`_check_sizes`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.listing_check import ListingCheck, RangedListing
from shardstream.cache.locks import FileLock
from shardstream.cache.provenance import (
    SourceRecord,
    drop_stale_files,
    identity,
    present_sources,
    read_record,
)
from shardstream.cache.safe_paths import read_file
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.errors import (
    IndexFormatError,
    ObjectNotFoundError,
    ShardFormatError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.format.index import INDEX_BASENAME, ShardEntry, parse_index
from shardstream.storage import (
    DownloadOptions,
    ObjectStore,
    atomic_write,
    fetch_bytes,
    fetch_info,
    fetch_listing,
    timed_request,
)
from shardstream.storage.base import ObjectInfo
from shardstream.storage.key_ranges import KeyRange
from shardstream.storage.store_base import BaseStore

__all__ = ["start_index_sync", "sync_index"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BASENAME = re.compile(rb'"basename"\s*:\s*"([^"\\]*)"')  # a file name in an index's bytes
_LEGACY_STAMP = "index.stamp"  # the index's tag alone, as earlier versions kept it
_INDEX_ROUNDS = 3  # listings a first start makes before it gives up on a changing index


def sync_index(store: ObjectStore, local: str, options: DownloadOptions) -> list[ShardEntry] | None:
    """Make ``<local>/index.json`` the remote's current index, and drop changed cached shards.

    Returns:
        The index, when it was parsed now; ``None`` when the cached copy is current (the
        caller reads it).

    Args:
        store: The stream's remote root.
        local: The stream's local folder.
        options: Retries and timeout for the requests.

    Raises:
        CacheConflictError: ``local`` caches another remote.
        ObjectNotFoundError: The remote has no ``index.json``.
        StorageError: The remote could not be listed, or its index read, after every retry.
        IndexFormatError: The remote index is malformed.
        ShardFormatError: The index gives a file another size than the listing does.
    """
    state = os.path.join(local, STATE_FOLDER)
    path = os.path.join(local, INDEX_BASENAME)
    remote = store.url("")
    record = read_record(state)
    if record is not None:  # nothing is listed for a folder that caches another remote
        record.check_remote(remote, local)
    seen = _generation(record)
    # Listed without the lock, so that the processes of a node starting together list at once;
    # in key ranges split at the names last listed, or else at the cached index's, or else (a
    # first start) at the names of the index fetched first.
    split_at = list(record.objects) if record is not None else _cached_names(path)
    fetched: _Fetched | None = None
    if not split_at and _reads_index_first(store):
        listing, complete, fetched = _index_then_listing(store, options)
    else:
        listing, complete = _list(store, options, split_at)
    wait = options.timeout * (options.retry + 1) + 60
    with FileLock(os.path.join(state, "index.lock")).hold(timeout=wait, what="the index"):
        record = read_record(state)
        if record is not None:
            record.check_remote(remote, local)
        if _generation(record) != seen and record is not None and record.objects != listing:
            # Another process recorded a listing after this one read the record, and it differs
            # from ours, which may be the older: list again, under the lock, so that what is
            # recorded is newer than any listing recorded before (no clock says which is).
            listing, complete = _list(store, options, list(record.objects))
        if fetched is not None and not fetched.matches(listing):
            fetched = None  # listed again, and the index changed since: fetched again below
        old = _read(path)
        tagged = not listing[INDEX_BASENAME].endswith(":")  # no tag: the bytes must be compared
        index_current = (
            tagged
            and old is not None
            and record is not None
            and record.objects.get(INDEX_BASENAME) == listing[INDEX_BASENAME]
        )
        stale = None if record is None else record.changed(listing)
        if index_current and not stale:
            return None  # the record says it all already: no rewrite on every start
        if index_current and old is not None:
            data = old
            entries = parse_index(data, source=store.url(INDEX_BASENAME))
        elif fetched is not None:  # the bytes whose identity the listing gives the index
            data, entries = fetched.data, fetched.parsed(store)
        else:
            data = fetch_bytes(store, INDEX_BASENAME, options)
            data, entries = _parse_remote(store, data, listing[INDEX_BASENAME], options)
        if complete:
            _check_sizes(entries, listing, store.url(INDEX_BASENAME))
        previous = _parse_old(old, path) if old is not None and old != data else []
        if stale is not None:  # an entry that changed in the index goes too (HTTP: all we see)
            stale |= _changed_entry_sources(previous, entries)
        dropped = drop_stale_files(local, [*previous, *entries], stale, lock_timeout=wait)
        if dropped:
            logger.warning(
                "%s changed since it was cached in %s (or the cache's origin was unknown): "
                "deleted %d cached files, fetched again when read", remote, local, dropped,
            )  # fmt: skip
        if data is not old:
            os.makedirs(local, exist_ok=True)
            atomic_write(path, [data])
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(state, _LEGACY_STAMP))
        if listing[INDEX_BASENAME].startswith(f"{len(data)}:"):
            # Else the index changed since the listing: the next start looks again.
            SourceRecord(remote, listing, complete, _generation(record) + 1).write(state)
        logger.info("checked %s (%d shards)", store.url(INDEX_BASENAME), len(entries))
        return entries


def start_index_sync(
    store: ObjectStore, local: str, options: DownloadOptions
) -> tuple[list[ShardEntry] | None, ListingCheck | None]:
    """:func:`sync_index`, with the listing left running while the first shards are fetched.

    Where the store lists in key ranges and a read answers with its bytes' identity, the index
    is settled first: the cached one when a HEAD answers the identity the record holds for it,
    else fetched with the identity its GET answered. The cached files of index entries that
    changed (of every shard, without a record) are deleted now; the listing runs in a
    :class:`~shardstream.cache.listing_check.ListingCheck`, which the cache asks before it
    hands over a shard cached before the start. Elsewhere, :func:`sync_index` as it is.

    Returns:
        The index (``None``: read the cached one) and the listing under way, if any.

    Raises:
        The errors of :func:`sync_index` that concern the index.
    """
    if not _reads_index_first(store):
        return sync_index(store, local, options), None
    state = os.path.join(local, STATE_FOLDER)
    path = os.path.join(local, INDEX_BASENAME)
    remote = store.url("")
    record = read_record(state)
    if record is not None:
        record.check_remote(remote, local)
        if not record.complete:
            return sync_index(store, local, options), None
    old = _read(path)
    known = None if record is None else record.objects.get(INDEX_BASENAME)
    data: bytes | None = None
    try:
        if old is not None and known is not None and not known.endswith(":"):
            info = fetch_info(store, INDEX_BASENAME, options)  # one HEAD, not the index's bytes
            if info.etag and identity(info) == known:
                data, current = old, known
        if data is None:
            data, info = _get_identified(store, options)
            if not info.etag:  # no tag: only the listing can tell which bytes these are
                return sync_index(store, local, options), None
            current = identity(info)
    except ObjectNotFoundError as exc:
        raise _no_index(store) from exc
    entries = parse_index(data, source=store.url(INDEX_BASENAME))
    wait = options.timeout * (options.retry + 1) + 60
    lock_path = os.path.join(state, "index.lock")
    with FileLock(lock_path).hold(timeout=wait, what="the index"):
        record = read_record(state)
        if record is not None:
            record.check_remote(remote, local)
        previous = _parse_old(old, path) if old is not None and old != data else []
        # Without a record the cached files' origin is unknown: they go, as at a waiting start.
        stale = None if record is None else _changed_entry_sources(previous, entries)
        if stale is None or stale:
            drop_stale_files(local, [*previous, *entries], stale, lock_timeout=wait)
        if data is not old:
            os.makedirs(local, exist_ok=True)
            atomic_write(path, [data])
        unsure = present_sources(local, entries)  # without a record: none, dropped above
    url = store.url(INDEX_BASENAME)

    def settle(
        listing: dict[str, str], complete: bool, now: SourceRecord | None
    ) -> set[str] | None:
        if now is not None:
            now.check_remote(remote, local)
        if complete:
            _check_sizes(entries, listing, url)
        return None if now is None else now.changed(listing)

    split_at = list(record.objects) if record is not None else _entry_names(entries)
    ranged = RangedListing(
        store.key_ranges("", split_at),
        lambda key_range: _list_range(store, options, key_range),
        options.list_ranges,
    )
    check = ListingCheck(
        lambda names: _list(store, options, names),
        split_at,
        state=state,
        local=local,
        remote=remote,
        entries=entries,
        index_identity=current,
        unsure=unsure,
        settle=settle,
        lock=lambda: FileLock(lock_path).hold(timeout=wait, what="the index"),
        lock_timeout=wait,
        seen=_generation(record),
        ranged=ranged,
        check_part=lambda held, part: _check_sizes(held, part, url),
    )
    logger.info(
        "read %s (%d shards); listing %s meanwhile, in %d key ranges",
        url, len(entries), remote, len(ranged.ranges),
    )  # fmt: skip
    return entries, check.start()


@dataclass(frozen=True)
class _Fetched:
    """``index.json`` fetched before the listing, with the identity its own GET answered."""

    data: bytes
    info: ObjectInfo
    entries: list[ShardEntry] | None  # None: no index (a transfer error, or malformed)

    def matches(self, listing: dict[str, str]) -> bool:
        """Whether ``listing`` lists the version of the index these bytes are (by equality).

        A read with no version tag matches nothing: its size alone does not tell a rewrite.
        """
        return bool(self.info.etag) and listing.get(INDEX_BASENAME) == identity(self.info)

    def parsed(self, store: ObjectStore) -> list[ShardEntry]:
        """The entries; the listing vouched for the bytes, so a parse error is the remote's.

        Raises:
            IndexFormatError: The remote index is malformed.
        """
        if self.entries is not None:
            return self.entries
        return parse_index(self.data, source=store.url(INDEX_BASENAME))


def _reads_index_first(store: ObjectStore) -> TypeGuard[BaseStore]:
    """Whether a first start fetches the index first, to list split at its shard names.

    Only where the listing can be split (else the index would wait for nothing) and a GET
    answers with the identity of its bytes, so that they can be matched with the listing.
    """
    return isinstance(store, BaseStore) and store.lists_in_ranges and store.identifies_reads


def _index_then_listing(
    store: BaseStore, options: DownloadOptions
) -> tuple[dict[str, str], bool, _Fetched | None]:
    """A first start's listing, split at the names of the index fetched before it.

    The index's bytes are kept only if the listing gives the index the identity their own
    GET answered: the same version, by equality. If the index was rewritten between the two,
    it is fetched again and compared with the same listing, and if it changed once more, the
    remote is listed again, at most ``_INDEX_ROUNDS`` times.

    Returns:
        The listing, whether it is every object, and the index matched with it (``None``
        where the GET or the listing gave the index no version tag: the index is fetched
        after the listing, as on a start that knows the names).

    Raises:
        StorageError: The index changed at every round (a writer rewriting the dataset).
        ObjectNotFoundError: The remote has no ``index.json``.
    """
    url = store.url(INDEX_BASENAME)
    data, info = _get_identified(store, options)
    for _ in range(_INDEX_ROUNDS):
        fetched, (listing, complete) = _parsed_while_listed(store, options, data, info)
        if not fetched.info.etag or listing[INDEX_BASENAME].endswith(":"):
            return listing, complete, None  # no tag on one side: equal sizes tell nothing
        if fetched.matches(listing):
            return listing, complete, fetched
        data, info = _get_identified(store, options)  # rewritten between the GET and the listing
        fetched = _Fetched(data, info, _parsed_or_none(data, url))
        if fetched.matches(listing):
            return listing, complete, fetched
        logger.info("%s changed while the remote was listed: listing it again", url)
    raise StorageError(
        f"reading {url} failed: the index changed {_INDEX_ROUNDS} times while "
        f"{store.url('')} was listed, so no listing matches an index read; a writer is "
        "rewriting the dataset: start again once it has finished"
    )


def _parsed_while_listed(
    store: BaseStore, options: DownloadOptions, data: bytes, info: ObjectInfo
) -> tuple[_Fetched, tuple[dict[str, str], bool]]:
    """The index's bytes parsed while the remote is listed, split at the names they hold.

    The listing waits on round trips (and, through obstore, reads its pages off the GIL), the
    parse on this thread's CPU: run together, a first start waits for the longer of the two.
    """
    url = store.url(INDEX_BASENAME)
    with ThreadPoolExecutor(1, "shardstream-first-listing") as pool:
        listed = pool.submit(_list, store, options, _scanned_names(data))
        fetched = _Fetched(data, info, _parsed_or_none(data, url))
        return fetched, listed.result()


def _scanned_names(data: bytes) -> list[str]:
    """The file names an index's bytes hold, found by a scan, before (and without) a parse.

    Only split points of a listing, which any keys split correctly: a name the scan misreads
    (an escaped one is skipped) costs the ranges their balance, never an object.
    """
    return [name.decode("utf-8", "replace") for name in _BASENAME.findall(data)]


def _get_identified(store: BaseStore, options: DownloadOptions) -> tuple[bytes, ObjectInfo]:
    """The index's bytes and their identity, from one GET (with the retries of ``options``)."""
    url = store.url(INDEX_BASENAME)
    return timed_request(lambda: store.get_bytes_info(INDEX_BASENAME), options, f"reading {url}")


def _parsed_or_none(data: bytes, url: str) -> list[ShardEntry] | None:
    """The index's entries; ``None`` for bytes that are no index (the listing tells whose)."""
    try:
        return parse_index(data, source=url)
    except IndexFormatError:  # a gateway's page, or the remote's own
        return None


def _check_sizes(entries: list[ShardEntry], listing: Mapping[str, str], source: str) -> None:
    """Refuse an index whose files the store lists at other sizes, before it sizes anything.

    The rule for an index's claims about a remote's files: the size it gives each stored file
    (a shard's compressed file when it has one) must be the size the listing gives the object.
    The sample counts it claims are bounded by those sizes (``format.index.most_samples``), so
    a lying index can neither size an epoch nor a download beyond what the store holds. A file
    the listing lacks is left to its fetch, which names it.

    Raises:
        ShardFormatError: A file's size differs from its index entry's; the message names the
            shard and both sizes.
    """
    for number, entry in enumerate(entries):
        for raw, zipped in shard_file_pairs(entry):
            stored = zipped or raw
            tag = listing.get(stored.basename)
            listed = None if tag is None else tag.split(":", 1)[0]
            if listed is not None and listed != str(stored.bytes):
                raise ShardFormatError(
                    f"{source}, shard {number} ({stored.basename}): the index says the file is "
                    f"{stored.bytes} bytes, but the store lists {listed} bytes: the file is cut "
                    "short or replaced, or the index is corrupt or of other files; rewrite the "
                    "dataset (or upload the file again)"
                )


def _generation(record: SourceRecord | None) -> int:
    """How many listings the record has had written (0: none, or no record)."""
    return 0 if record is None else record.generation


def _parse_remote(
    store: ObjectStore, data: bytes, listed: str, options: DownloadOptions
) -> tuple[bytes, list[ShardEntry]]:
    """The remote index as fetched, and parsed; fetched again if the answer was no index.

    A ``200 OK`` body that is no index and not of the size listed (a gateway's page, a body
    cut short) is a transfer error, not a malformed index: the index is fetched again, held
    to the listed size, with the retries of ``options`` (:func:`fetch_bytes`). A body of the
    listed size that is no index is the remote's own index, malformed.
    """
    url = store.url(INDEX_BASENAME)
    try:
        return data, parse_index(data, source=url)
    except IndexFormatError:
        size = listed.partition(":")[0]
        if not size.isdigit() or int(size) == len(data):
            raise
    data = fetch_bytes(store, INDEX_BASENAME, options, expected_size=int(size))
    return data, parse_index(data, source=url)


def _list(
    store: ObjectStore, options: DownloadOptions, split_at: list[str]
) -> tuple[dict[str, str], bool]:
    """Each remote object's identity, and whether that is every object (HTTP: the index).

    ``split_at``: names at which the listing may be split into key ranges listed at once.

    Raises:
        ObjectNotFoundError: The remote has no ``index.json``.
    """
    try:
        infos = fetch_listing(store, "", options, split_at=split_at)
    except UnsupportedURLError:
        info = fetch_info(store, INDEX_BASENAME, options)  # one request: a deadline holds it
        return {INDEX_BASENAME: identity(info)}, False
    listing = {key: identity(info) for key, info in infos.items()}
    if INDEX_BASENAME not in listing:
        raise _no_index(store)
    return listing, True


def _list_range(store: BaseStore, options: DownloadOptions, key_range: KeyRange) -> dict[str, str]:
    """Each object's identity in ``key_range``: as one request, with its deadline and retries."""
    infos = timed_request(
        lambda: store.list_range("", key_range), options, f"listing {store.url('')}"
    )
    return {key: identity(info) for key, info in infos.items()}


def _no_index(store: ObjectStore) -> ObjectNotFoundError:
    return ObjectNotFoundError(
        f"reading {store.url(INDEX_BASENAME)} failed: no such object; point remote= at the "
        "dataset's root (the folder holding index.json)"
    )


def _cached_names(path: str) -> list[str]:
    """The files the cached index at ``path`` names (none without a readable one)."""
    old = _read(path)
    if old is None:
        return []
    return _entry_names(_parse_old(old, path))


def _entry_names(entries: list[ShardEntry]) -> list[str]:
    """The files ``entries`` name."""
    return [
        info.basename
        for entry in entries
        for pair in shard_file_pairs(entry)
        for info in pair
        if info
    ]


def _parse_old(data: bytes, path: str) -> list[ShardEntry]:
    try:
        return parse_index(data, source=path)
    except IndexFormatError:  # an unreadable old index: its files are dropped as unknown
        return []


def _changed_entry_sources(old: list[ShardEntry], new: list[ShardEntry]) -> set[str]:
    """The source objects of shards whose entry differs in the new index (or is gone)."""
    current = {
        info.basename: info
        for entry in new
        for pair in shard_file_pairs(entry)
        for info in pair
        if info is not None
    }
    return {
        (zipped or raw).basename
        for entry in old
        for raw, zipped in shard_file_pairs(entry)
        if current.get(raw.basename) != raw
        or (zipped is not None and current.get(zipped.basename) != zipped)
    }


def _read(path: str) -> bytes | None:
    try:
        return read_file(path)  # a link planted at index.json is refused, not read
    except FileNotFoundError:
        return None
