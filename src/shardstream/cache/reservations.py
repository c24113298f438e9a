"""What a fetch in flight holds: a record in its shard's lock file, and its temporaries.

Whoever fetches a shard holds the shard's lock (``.shardstream/locks/<hash>.lock``) and writes
into it how many bytes the fetch may take and which file it makes. Under a ``cache_limit``
these reservations count as used until the fetch ends; the record is cleared then. One left
behind in a lock nobody holds marks a fetch whose process died: its reservation is dropped
and the half-written files it names are deleted.
"""

from __future__ import annotations

import contextlib
import glob
import os

from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.locks import try_lock_file
from shardstream.cache.safe_paths import read_file
from shardstream.errors import IndexFormatError, UnsafePathError
from shardstream.format.index import ShardEntry, safe_basename

__all__ = ["record", "remove_temporaries", "reserved_bytes"]


def record(fd: int, need: int, entry: ShardEntry) -> None:
    """Write into a shard's lock file that a fetch of ``need`` bytes is under way.

    The file is empty when this is called (a dead fetch's record is cleared first).
    """
    os.pwrite(fd, f"{need} {entry.raw_data.basename}\n".encode(), 0)


def reserved_bytes(folder: str, own: str | None) -> int:
    """Bytes reserved by fetches in flight into the cache folder ``folder``.

    Clears the reservations (and the temporaries) of fetches whose process died.

    Args:
        folder: The cache folder whose shard locks are read.
        own: The caller's own lock file, left out.
    """
    locks = os.path.join(folder, STATE_FOLDER, "locks")
    total = 0
    try:
        entries = list(os.scandir(locks))
    except FileNotFoundError:
        return 0
    for item in entries:
        if item.path == own or not item.name.endswith(".lock"):
            continue
        try:
            if item.stat(follow_symlinks=False).st_size == 0:
                continue
            stale = try_lock_file(item.path)
            if stale is None:  # a live fetch: count what it reserved
                total += _reservation(read_file(item.path))
                continue
        except FileNotFoundError:
            continue
        try:  # its holder died mid-fetch: drop the reservation and the half-written files
            text = os.pread(stale.fd, 1 << 16, 0).decode(errors="replace").split()
            if len(text) == 2 and _names_a_shard(text[1]):
                remove_temporaries(os.path.join(folder, text[1]))
            os.ftruncate(stale.fd, 0)
        finally:
            stale.release()
    return total


def remove_temporaries(path: str) -> None:
    """Remove the temporary siblings of ``path`` (``.{name}.tmp-*``)."""
    folder, name = os.path.split(path)
    for temporary in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.tmp-*")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)


def _names_a_shard(name: str) -> bool:
    """Whether a lock's record names a shard file in the cache folder, as an index may.

    A record is read back as untrusted (anyone who could write the lock may have left it, or
    it was cut short): a name that is absolute or climbs with ``..`` names no file to delete.
    """
    try:
        safe_basename(name, where="a shard lock's record")
    except (UnsafePathError, IndexFormatError):
        return False
    return True


def _reservation(data: bytes) -> int:
    head = data.split(b" ", 1)[0]
    return int(head) if head.isdigit() else 0
