"""A node's download slots: lock files that bound the downloads of every process of a node.

There are ``count`` slots, ``.shardstream/slots/<i>.lock``. A download that fills a slot (an
object fetched as parallel byte ranges) holds slot ``i``'s file exclusively. Downloads that
share a slot (objects fetched in one request, see
:meth:`~shardstream.storage.DownloadOptions.slot_share`) each hold one of its lanes,
``<i>-<j>.lock``, exclusively, and the slot's file shared: ``share`` of them fit in one slot,
and none beside a download that fills it. Shared downloads take the lowest slots and filling
ones the highest, so a stream of small downloads leaves whole slots for large ones where it
can. ``flock`` locks die with their process, so a killed download frees its place by itself.

A process opens each lock file once and keeps it open: a first batch over thousands of small
shards looks for a free place thousands of times, and opening the files each time (through
:func:`~shardstream.cache.safe_paths.open_file`'s checks) cost more CPU than the downloads.
An ``flock`` belongs to an open file, so the threads of one process share its descriptors
under a mutex and count the places they hold themselves; other processes are excluded by the
locks. A forked child closes the descriptors it inherited (unlocking them would unlock the
parent's) and opens its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import weakref
from collections.abc import Iterator

from shardstream.cache.polling import Backoff
from shardstream.cache.safe_paths import open_file

try:  # POSIX; elsewhere slots exclude only the threads of one process (as locks.py says)
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["DownloadSlots"]


_instances: weakref.WeakSet[DownloadSlots] = weakref.WeakSet()


class DownloadSlots:
    """The ``count`` download slots of the node whose state folder is ``folder``.

    Args:
        folder: The node's state folder (a stream's ``.shardstream``); nothing is opened or
            made here until a slot is first taken.
        count: The node's download slots (``download_concurrency``).
    """

    def __init__(self, folder: str, count: int) -> None:
        self.folder = os.path.join(folder, "slots")
        self.count = count
        self._reset()
        _instances.add(self)

    def _reset(self) -> None:
        self._mutex = threading.Lock()
        self._fds: dict[str, int] = {}
        self._lanes: set[str] = set()  # lanes this process holds
        self._sharing: dict[int, int] = {}  # slot: this process's shared downloads in it
        self._filled: set[int] = set()  # slots this process fills

    def _forget(self) -> None:
        """In a forked child: close the inherited descriptors, never unlocking them."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._reset()

    @contextlib.contextmanager
    def hold(self, share: int = 1) -> Iterator[None]:
        """Hold a place in a slot for one download, waiting for one to free.

        Args:
            share: Downloads like this one that a slot carries at once (1: it fills a slot).
        """
        backoff = Backoff()
        while True:
            with self._mutex:
                place = self._take(share)
            if place is not None:
                try:
                    yield
                finally:
                    with self._mutex:
                        self._give_back(place)
                return
            backoff.pause()  # a reader that stopped early does not wait for a slot

    def _take(self, share: int) -> tuple[int, str | None] | None:
        """A free place, ``(slot, lane)`` (``lane`` ``None``: the whole slot), taken; or none."""
        if share <= 1:
            for slot in reversed(range(self.count)):
                if slot in self._filled or self._sharing.get(slot):
                    continue
                if self._lock(f"{slot}", exclusive=True):
                    self._filled.add(slot)
                    return slot, None
            return None
        for slot in range(self.count):
            if slot in self._filled:
                continue
            sharing = self._sharing.get(slot, 0)
            if not sharing and not self._lock(f"{slot}", exclusive=False):
                continue  # filled by another process's download
            for number in range(share):
                lane = f"{slot}-{number}"
                if lane not in self._lanes and self._lock(lane, exclusive=True):
                    self._lanes.add(lane)
                    self._sharing[slot] = sharing + 1
                    return slot, lane
            if not sharing:
                self._unlock(f"{slot}")
        return None

    def _give_back(self, place: tuple[int, str | None]) -> None:
        slot, lane = place
        if lane is None:
            self._filled.discard(slot)
            self._unlock(f"{slot}")
            return
        self._lanes.discard(lane)
        self._unlock(lane)
        self._sharing[slot] -= 1
        if not self._sharing[slot]:
            self._unlock(f"{slot}")

    def _lock(self, name: str, *, exclusive: bool) -> bool:
        fd = self._fds.get(name)
        if fd is None:
            path = os.path.join(self.folder, f"{name}.lock")
            fd = self._fds[name] = open_file(path, os.O_RDWR | os.O_CREAT)
        if fcntl is None:  # pragma: no cover
            return True
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        return True

    def _unlock(self, name: str) -> None:
        if fcntl is not None:
            fcntl.flock(self._fds[name], fcntl.LOCK_UN)

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)


def _forget_inherited() -> None:
    for slots in list(_instances):
        slots._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)
