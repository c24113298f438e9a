"""Keeping a cached ``index.json`` in step with the remote one, once per node.

The reference reuses a local ``index.json`` forever, so a dataset rewritten in its bucket is
read through a stale index and stale shards. Here the first process of a node to look fetches
the remote index under the stream's index lock and records its version tag (etag) beside it;
the others only compare tags. When the remote index changed, the cached files of every shard
whose entry changed are deleted before the new index is put in place, so old bytes are never
read as new ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

import numpy as np

from shardstream.cache.locks import FileLock
from shardstream.cache.shard_cache import STATE_FOLDER
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.errors import IndexFormatError
from shardstream.format.index import INDEX_BASENAME, ShardEntry, parse_index
from shardstream.storage import DownloadOptions, ObjectStore, atomic_write, fetch_bytes
from shardstream.storage.base import ObjectInfo
from shardstream.storage.retry import backoff_delays, is_transient

__all__ = ["sync_index"]

logger = logging.getLogger(__name__)

_STAMP = "index.stamp"


def sync_index(store: ObjectStore, local: str, options: DownloadOptions) -> list[ShardEntry] | None:
    """Make ``<local>/index.json`` the remote's current index.

    Returns:
        The index, when it was fetched (and so parsed) now; ``None`` when the cached copy is
        current (the caller reads it).

    Args:
        store: The stream's remote root.
        local: The stream's local folder.
        options: Retries and timeout for the requests.

    Raises:
        StorageError: The remote index could not be read after every retry.
        IndexFormatError: The remote index is malformed.
    """
    state = os.path.join(local, STATE_FOLDER)
    path = os.path.join(local, INDEX_BASENAME)
    info = _info(store, options)
    wanted = {"url": store.url(INDEX_BASENAME), "size": info.size, "etag": info.etag}
    if info.etag is not None and _stamp(state) == wanted and os.path.exists(path):
        return None
    lock = FileLock(os.path.join(state, "index.lock"))
    with lock.hold(timeout=options.timeout * (options.retry + 1) + 60, what="the index"):
        if info.etag is not None and _stamp(state) == wanted and os.path.exists(path):
            return None  # another process of the node fetched it while we waited
        data = fetch_bytes(store, INDEX_BASENAME, options)
        entries = parse_index(data, source=store.url(INDEX_BASENAME))
        old = _read(path)
        if old is not None and old != data:
            _drop_changed_shards(local, old, entries, source=path)
        os.makedirs(local, exist_ok=True)
        atomic_write(path, [data])
        if len(data) == info.size:  # else it changed since we asked: let the next run look again
            os.makedirs(state, exist_ok=True)
            stamp = json.dumps(wanted, sort_keys=True).encode()
            atomic_write(os.path.join(state, _STAMP), [stamp])
        logger.info("fetched %s (%d shards)", store.url(INDEX_BASENAME), len(entries))
        return entries


def _info(store: ObjectStore, options: DownloadOptions) -> ObjectInfo:
    """The remote index's size and etag, retried like a download."""
    delays: list[float] = []  # drawn on the first failure: fresh entropy costs ~80 us
    for attempt in range(options.retry + 1):
        try:
            return store.info(INDEX_BASENAME)
        except OSError as exc:  # noqa: PERF203 - one try per attempt is the point
            if attempt == options.retry or not is_transient(exc):
                raise
            logger.warning("checking %s failed (%s); retrying", store.url(INDEX_BASENAME), exc)
            delays = delays or backoff_delays(options.retry, np.random.default_rng())
            time.sleep(delays[attempt])
    raise AssertionError("unreachable")


def _drop_changed_shards(local: str, old: bytes, entries: list[ShardEntry], *, source: str) -> None:
    """Delete cached files whose index entry differs in the new index (or is gone)."""
    try:
        previous = parse_index(old, source=source)
    except IndexFormatError:  # an unreadable old index: drop nothing we cannot name
        return
    current = {
        info.basename: info
        for entry in entries
        for pair in shard_file_pairs(entry)
        for info in pair
        if info is not None
    }
    dropped = 0
    for entry in previous:
        for pair in shard_file_pairs(entry):
            for info in pair:
                if info is None or current.get(info.basename) == info:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(local, info.basename))
                    dropped += 1
    if dropped:
        logger.warning(
            "the remote index.json of %s changed: deleted %d cached files of changed shards",
            local,
            dropped,
        )


def _stamp(state: str) -> dict[str, object] | None:
    try:
        with open(os.path.join(state, _STAMP), "rb") as handle:
            value = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
