"""Whole canonical-node orders of an epoch, kept in the cache folder for runs that resume.

py1e, the default shuffle, orders a canonical node as a whole: a run resumed half-way
through an epoch shuffles the node again before its first batch, a large part of its wait.
The first run to compute a node's order keeps it here; a run resumed in the same epoch, or
restarted after a crash, reads it back.

One file a node and epoch, ``<key>-<epoch>-<node>.order``, the key a digest of everything the
order depends on: the shard sizes, the canonical nodes, the shuffle, and the version of the
shuffles' output (``ORDER_VERSION``). A file holds a short header (its item size, a digest of
its ids), then the ids. It is written to a temporary name and renamed, so a reader sees a
whole file or none; a file that fails its checks is computed again and replaced. Writing a
node's order deletes its earlier epochs' files, and the files of all but the
:data:`KEPT_LAYOUTS` most recently used keys (other seeds, shuffles, datasets): reading a
file marks its key used, and the least recently used go first. A folder that cannot be
written only costs the time to compute. Under a ``cache_limit`` nothing is kept: the limit
counts shard files, and nothing else may take the space.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from shardstream.cache.safe_paths import read_file, write_file
from shardstream.sampling import ShuffleConfig
from shardstream.sampling.sequence import ORDER_VERSION

__all__ = ["KEPT_LAYOUTS", "NodeOrders"]

logger = logging.getLogger(__name__)

_MAGIC = b"SSNO"
_HEADER = struct.Struct("<4sB3x16s")  # magic, bytes an id, 3 spare, digest of the ids
_SUFFIX = ".order"

#: Keys (layouts: seeds, shuffles, node counts) whose orders a folder keeps at most.
KEPT_LAYOUTS = 4


class NodeOrders:
    """The node orders of one epoch of one dataset layout, kept in ``folder``.

    A :class:`~shardstream.sampling.sequence.NodeOrderMemo`: call it with a node, its size and
    a function that computes its order.

    Args:
        folder: Where the files go (created on first write).
        unit_sizes: The epoch's unit (shard) sizes, in the order the plan sees them.
        num_canonical_nodes: Canonical nodes of the epoch order.
        epoch: The epoch.
        shuffle: The shuffle.
    """

    def __init__(
        self,
        folder: str,
        unit_sizes: NDArray[np.int64],
        num_canonical_nodes: int,
        epoch: int,
        shuffle: ShuffleConfig,
    ) -> None:
        self.folder = folder
        self.epoch = epoch
        digest = hashlib.blake2b(digest_size=12)
        layout = (ORDER_VERSION, num_canonical_nodes, shuffle.algo, shuffle.seed)
        digest.update(repr((*layout, shuffle.block_size)).encode())
        digest.update(np.ascontiguousarray(unit_sizes, dtype="<i8").tobytes())
        self.key = digest.hexdigest()

    def path(self, node: int) -> str:
        """The file of ``node``'s order in this epoch."""
        return os.path.join(self.folder, f"{self.key}-{self.epoch}-{node}{_SUFFIX}")

    def __call__(
        self, node: int, size: int, compute: Callable[[], NDArray[np.int64]]
    ) -> NDArray[np.int64]:
        """``node``'s order: read from its file, or computed and written there."""
        path = self.path(node)
        kept = self._read(path, size)
        if kept is not None:
            _mark_used(path)
            return kept
        order = compute()
        self._write(path, node, order)
        return order

    def _read(self, path: str, size: int) -> NDArray[np.int64] | None:
        try:
            data = read_file(path)
        except OSError:
            return None  # not kept yet (or unreadable: computed again)
        if len(data) >= _HEADER.size:
            magic, width, digest = _HEADER.unpack_from(data)
            body = memoryview(data)[_HEADER.size :]
            if (
                magic == _MAGIC
                and width in (4, 8)
                and len(body) == width * size
                and hashlib.blake2b(body, digest_size=16).digest() == digest
            ):
                ids: NDArray[np.int64] = np.frombuffer(body, f"<i{width}")
                return ids
        logger.warning("%s is not a whole node order; computing it again", path)
        return None

    def _write(self, path: str, node: int, order: NDArray[np.int64]) -> None:
        width = 4 if not len(order) or int(order.max()) < 1 << 31 else 8
        body = np.ascontiguousarray(order, dtype=f"<i{width}").tobytes()
        header = _HEADER.pack(_MAGIC, width, hashlib.blake2b(body, digest_size=16).digest())
        try:
            write_file(path, [header, body])
        except OSError as exc:
            logger.debug("cannot keep the order of node %d in %s: %s", node, self.folder, exc)
            return
        _mark_used(path)
        self._forget_earlier(node)
        self._forget_other_layouts()

    def _forget_earlier(self, node: int) -> None:
        """Delete this node's files of earlier epochs."""
        prefix, tail = f"{self.key}-", f"-{node}{_SUFFIX}"
        with contextlib.suppress(OSError), os.scandir(self.folder) as entries:
            for entry in entries:
                name = entry.name
                if not (name.startswith(prefix) and name.endswith(tail)):
                    continue
                epoch = name[len(prefix) : -len(tail)]
                if epoch.isdigit() and int(epoch) < self.epoch:
                    with contextlib.suppress(OSError):
                        os.remove(entry.path)

    def _forget_other_layouts(self) -> None:
        """Delete the files of all but the :data:`KEPT_LAYOUTS` most recently used keys."""
        used: dict[str, int] = {}
        files: dict[str, list[str]] = {}
        with contextlib.suppress(OSError), os.scandir(self.folder) as entries:
            for entry in entries:
                key = entry.name.split("-", 1)[0]
                if not entry.name.endswith(_SUFFIX) or key == entry.name:
                    continue
                with contextlib.suppress(OSError):
                    when = entry.stat(follow_symlinks=False).st_mtime_ns
                    used[key] = max(used.get(key, 0), when)
                    files.setdefault(key, []).append(entry.path)
        recent = sorted(used, key=lambda key: (key == self.key, used[key]), reverse=True)
        for key in recent[KEPT_LAYOUTS:]:
            for path in files[key]:
                with contextlib.suppress(OSError):
                    os.remove(path)


def _mark_used(path: str) -> None:
    """Set the file's time to now, to the nanosecond: the order its key was last used in."""
    now = time.time_ns()
    with contextlib.suppress(OSError, NotImplementedError):  # not kept: only costs the time
        os.utime(path, ns=(now, now), follow_symlinks=False)
