"""Where a cache folder keeps what: shards under their basenames, state under ``.shardstream``.

The state folder holds the locks, the record of the remote's objects and the run files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

from shardstream.format.index import INDEX_BASENAME, ShardEntry

__all__ = ["STATE_FOLDER", "kept_bytes", "shard_lock_path"]

#: The folder, inside each stream's local folder, holding shardstream's locks and state.
STATE_FOLDER = ".shardstream"


def shard_lock_path(local: str, entry: ShardEntry) -> str:
    """The lock file of a shard in the cache folder ``local``: whoever holds it owns its files."""
    digest = hashlib.blake2b(entry.raw_data.basename.encode(), digest_size=10).hexdigest()
    return os.path.join(local, STATE_FOLDER, "locks", f"{digest}.lock")


def kept_bytes(local: str) -> int:
    """Bytes of what the cache keeps in ``local`` beside shards: the index and the state folder."""
    total = 0
    with contextlib.suppress(OSError):
        total += os.lstat(os.path.join(local, INDEX_BASENAME)).st_size
    for folder, _, names in os.walk(os.path.join(local, STATE_FOLDER)):  # links not followed
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
