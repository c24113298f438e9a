"""Where a cache folder keeps what: shards under their basenames, state under ``.shardstream``.

The state folder holds the locks, the record of the remote's objects and the run files. A
dataset read in place (no remote) is never written to: what reading it makes, decompressed
copies and their locks, goes to a cache folder of its own (:func:`in_place_cache`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Iterable

from shardstream import config
from shardstream.cache.private_folder import ensure_private_folder
from shardstream.format.index import INDEX_BASENAME, ShardEntry
from shardstream.storage.local import file_identity

__all__ = [
    "IN_PLACE_FOLDER",
    "STATE_FOLDER",
    "in_place_cache",
    "kept_bytes",
    "node_state_folder",
    "shard_lock_path",
]

logger = logging.getLogger(__name__)

#: The folder, inside each stream's local folder, holding shardstream's locks and state.
STATE_FOLDER = ".shardstream"

#: The folder, in the user's cache root, holding the cache folders of datasets read in place.
IN_PLACE_FOLDER = "in-place"


def node_state_folder(remote_locals: Iterable[str]) -> str | None:
    """Where a dataset keeps its node-wide state: cache ledger, download slots, plans, runs.

    The state folder of the remote streams' cache folder whose real path sorts first; ``None``
    without remote streams. It does not depend on the order in which a job lists its streams:
    two jobs reading the same streams, in any order, share one ledger (so one ``cache_limit``)
    and one set of download slots.

    Args:
        remote_locals: The cache folders of the dataset's remote streams.
    """
    folders = sorted(os.path.realpath(folder) for folder in remote_locals)
    return os.path.join(folders[0], STATE_FOLDER) if folders else None


def in_place_cache(root: str) -> str:
    """The cache folder of the dataset read in place from ``root``, outside ``root``.

    It lies under :func:`shardstream.config.cache_root` (``SHARDSTREAM_CACHE_DIR``), which is
    created (or checked) as this user's alone: ``in-place/<name>-<hash>/<generation>``, the
    hash of ``root``'s real path, the generation a hash of the identity of its ``index.json``
    (its device and ``file_identity``: inode, size, modification and change times). A dataset
    rewritten in the same place, even by ``cp -p``, so never meets the decompressed copies of
    the old one, and those are deleted when the new generation is first asked for: what
    reading a dataset in place leaves is one copy of it, however often it is rewritten. The
    folder itself is created when first written.

    Raises:
        CacheFolderError: The cache root is not this user's alone.
    """
    real = os.path.realpath(root)
    stamp = ""
    with contextlib.suppress(OSError):  # no index (a Parquet folder): the path alone
        status = os.stat(os.path.join(real, INDEX_BASENAME))
        stamp = f"{status.st_dev}:{file_identity(status)}"
    digest = hashlib.blake2s(real.encode(), digest_size=10).hexdigest()
    generation = hashlib.blake2s(stamp.encode(), digest_size=8).hexdigest()
    base = config.cache_root()
    ensure_private_folder(base)
    dataset = os.path.join(
        base, IN_PLACE_FOLDER, f"{os.path.basename(real)[:64] or 'root'}-{digest}"
    )
    _drop_other_generations(dataset, generation)
    return os.path.join(dataset, generation)


def _drop_other_generations(dataset: str, generation: str) -> None:
    """Delete the decompressed copies of the versions of a dataset that was rewritten since.

    They are stale: whoever reads the dataset now reads the new version's files.
    """
    try:
        with os.scandir(dataset) as entries:
            stale = [entry.path for entry in entries if entry.name != generation]
    except OSError:  # not made yet: nothing to drop
        return
    for path in stale:
        # In this user's private cache root: shutil.rmtree follows no link planted there.
        shutil.rmtree(path, ignore_errors=True)
        logger.debug("deleted %s: copies of an earlier version of a dataset read in place", path)


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
