"""Which remote objects a stream's cached files came from, so that no stale byte is served.

A cache folder records, in ``.shardstream/source.json``, the remote it caches and the identity
(size and version tag: ETag, generation, a local file's inode, size and mtime) of every object
of one listing of that remote. At the next start one listing is compared with the record: the
cached files of every object whose identity changed (or that the record does not know) are
deleted before the index is read, so a dataset regenerated in place under the same names and
sizes is fetched again, and a folder that caches another remote is refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from shardstream.cache.layout import shard_lock_path
from shardstream.cache.locks import FileLock
from shardstream.cache.safe_paths import read_file, write_file
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.errors import CacheConflictError
from shardstream.format.index import ShardEntry
from shardstream.storage.base import ObjectInfo

__all__ = [
    "SOURCE_RECORD",
    "SourceRecord",
    "drop_stale_files",
    "identity",
    "present_sources",
    "read_record",
    "read_state_document",
]

logger = logging.getLogger(__name__)

#: The record's file name in the stream's state folder.
SOURCE_RECORD = "source.json"
_VERSION = 1


def identity(info: ObjectInfo) -> str:
    """An object's identity as the record keeps it: its size and version tag."""
    return f"{info.size}:{info.etag or ''}"


@dataclass(frozen=True)
class SourceRecord:
    """What a cache folder knows of its remote.

    Attributes:
        remote: The remote root's URL (no credentials).
        objects: Each listed key's :func:`identity`.
        complete: Whether ``objects`` is a whole listing (HTTP lists nothing: the index only).
        generation: How many listings were recorded in the folder, this one included: it tells
            a process whether another recorded one since it looked, where a time would have to
            be compared with a clock that may have been stepped (or be another node's).
    """

    remote: str
    objects: Mapping[str, str]
    complete: bool
    generation: int = 1

    def check_remote(self, remote: str, local: str) -> None:
        """Refuse a folder that caches another remote.

        Raises:
            CacheConflictError: ``local`` caches ``self.remote``, not ``remote``.
        """
        if self.remote != remote:
            raise CacheConflictError(
                f"the cache folder {local} holds the files of {self.remote}, not of {remote}: "
                f"a cache folder serves one remote. Give local= a folder of its own for "
                f"{remote} (or leave local= out: each remote then gets its own folder), or "
                f"delete {local} if {self.remote} is read no more"
            )

    def changed(self, listing: Mapping[str, str]) -> set[str]:
        """The keys whose identity differs between this record and ``listing``."""
        if self.objects == listing:  # the usual start: one comparison in C
            return set()
        keys = set(self.objects) | set(listing)
        return {key for key in keys if self.objects.get(key) != listing.get(key)}

    def write(self, state: str) -> None:
        """Save the record in the state folder ``state``, atomically."""
        document = {
            "version": _VERSION,
            "remote": self.remote,
            "generation": self.generation,
            "complete": self.complete,
            "objects": dict(self.objects),
        }
        # msgspec: a record of every object of a large dataset is encoded several times faster.
        write_file(os.path.join(state, SOURCE_RECORD), [msgspec.json.encode(document)])


def read_state_document(path: str) -> dict[str, Any] | None:
    """A JSON record the cache keeps in a state folder; ``None`` if there is none or it is not one.

    The rule for every such record (``source.json``, ``delta-log.json``): it is the cache's own
    file, but it is read as untrusted, as a listing is. A file that is not a JSON object (cut
    short, edited, nested past the parser's limit, numbers too large) is ignored with a
    warning, so what it vouched for is fetched again, and never fails a start. Its readers
    check each value before use: a number must be an integer, and a key names a file only
    once ``check_key`` accepts it.
    """
    try:
        document = json.loads(read_file(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        logger.warning("ignoring the unreadable cache record %s (%s)", path, type(exc).__name__)
        return None
    if not isinstance(document, dict):
        logger.warning("ignoring the malformed cache record %s", path)
        return None
    return document


def read_record(state: str) -> SourceRecord | None:
    """The record saved in the state folder ``state``; ``None`` if none (or unreadable)."""
    path = os.path.join(state, SOURCE_RECORD)
    document = read_state_document(path)
    if document is None:
        return None
    generation = document.get("generation", 0)  # records of earlier versions: 0
    try:
        if not isinstance(generation, int) or isinstance(generation, bool):
            raise TypeError(generation)  # compared for equality only: an integer, or nothing
        objects = document["objects"]
        record = SourceRecord(
            remote=str(document["remote"]),
            objects={str(key): str(value) for key, value in objects.items()},
            complete=bool(document["complete"]),
            generation=generation,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        logger.warning("ignoring the malformed cache record %s", path)
        return None
    return record


def drop_stale_files(
    local: str,
    entries: Iterable[ShardEntry],
    stale: set[str] | None,
    *,
    lock_timeout: float,
) -> int:
    """Delete the cached files of shards whose remote object is in ``stale``.

    Args:
        local: The stream's cache folder.
        entries: Index entries naming the cached files (the old index's and the new one's).
        stale: Keys of the remote objects that changed; ``None``: every object (files whose
            origin is unknown).
        lock_timeout: How long to wait for a fetch of such a shard under way.

    Returns:
        The number of files deleted.
    """
    present = _FolderScan(local)
    dropped = 0
    for entry in entries:
        # A shard's cached files come from its compressed object when it has one.
        pairs = shard_file_pairs(entry)
        if stale is not None and not {(zipped or raw).basename for raw, zipped in pairs} & stale:
            continue
        names = [info.basename for pair in pairs for info in pair if info]
        if not any(map(present.holds, names)):
            continue
        # The shard's lock: a fetch of it by another process ends before its files go.
        lock = FileLock(shard_lock_path(local, entry))
        with lock.hold(timeout=lock_timeout, what=f"shard {entry.data_file.basename}"):
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(local, name))
                    dropped += 1
    return dropped


def present_sources(local: str, entries: Iterable[ShardEntry]) -> set[str]:
    """The source object of each shard of ``entries`` with a file in the cache folder ``local``.

    A shard's source is its compressed file's object when it has one (as in
    :func:`drop_stale_files`).
    """
    present = _FolderScan(local)
    return {
        (zipped or raw).basename
        for entry in entries
        for raw, zipped in shard_file_pairs(entry)
        if present.holds(raw.basename) or (zipped is not None and present.holds(zipped.basename))
    }


class _FolderScan:
    """Which names each folder of a cache holds, from one ``os.scandir`` a folder, on first ask.

    One scan of the cache folder replaces a look (``lstat``) per shard: a first start finds
    the folder empty, and a large index names as many files as it has shards. An entry counts
    whatever it is (a link, even a broken one, as ``os.path.lexists`` counts it).
    """

    def __init__(self, local: str) -> None:
        self._local = local
        self._names: dict[str, frozenset[str] | None] = {}

    def holds(self, basename: str) -> bool:
        """Whether the cache held an entry at ``basename`` when its folder was scanned."""
        folder, _, name = basename.rpartition("/")
        if folder not in self._names:
            try:
                with os.scandir(os.path.join(self._local, folder)) as scan:
                    self._names[folder] = frozenset(entry.name for entry in scan)
            except (FileNotFoundError, NotADirectoryError):  # a first start: nothing there
                self._names[folder] = frozenset()
            except OSError:  # unreadable, yet perhaps searchable: each path is looked at
                self._names[folder] = None
        names = self._names[folder]
        if names is None:
            return os.path.lexists(os.path.join(self._local, basename))
        return name in names
