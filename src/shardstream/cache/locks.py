"""File locks that die with their holder: ``flock`` on files inside the cache folder.

The kernel releases an ``flock`` when its holder exits, however it exits (``kill -9``
included), so no lock ever outlives a crashed process and nothing needs cleaning by hand. Lock
files themselves stay in the cache folder and are reused; they hold no state that matters
except, for shard locks, the bytes a download has reserved (see
:mod:`shardstream.cache.shard_cache`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator

from shardstream.cache.polling import Backoff
from shardstream.cache.safe_paths import open_file
from shardstream.errors import CacheTimeoutError

try:  # POSIX; Windows gets a lock that only excludes threads of one process (documented)
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["FileLock", "try_lock_file"]

# The descriptors of the locks this process holds. An ``flock`` belongs to the open file, and a
# forked child (a DataLoader worker started while a fetch thread held a shard's lock) shares it:
# the child closes its copies at once, and a release unlocks before it closes, so a lock never
# outlives its holder's release in some child.
_held: set[int] = set()


def _forget_inherited() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)


class FileLock:
    """An exclusive lock on a file, held by one process at a time.

    Args:
        path: The lock file (created when missing, with its folders). Below the folder
            holding the path's ``.shardstream`` (:func:`~.safe_paths.split_root`), the file and
            its folders are opened without following links and must be this user's.

    Example:
        >>> with FileLock("/cache/.shardstream/locks/shard.00000.mds.lock").hold(timeout=60):
        ...     ...
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0  # the process that took the lock (a forked child's copy is not held)

    @property
    def fd(self) -> int:
        """The descriptor of the held lock file."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is not held")
        return self._fd

    def acquire(self, *, timeout: float | None, what: str = "") -> None:
        """Take the lock, waiting at most ``timeout`` seconds (``None``: forever).

        Raises:
            CacheTimeoutError: Another process held the lock for the whole timeout.
            CacheFolderError: The lock file or a folder above it is a link or another user's.
        """
        fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff()
        try:
            while not _flock(fd, blocking=False):
                if deadline is not None and time.monotonic() >= deadline:
                    raise CacheTimeoutError(
                        f"waited {timeout:g} s for {what or 'the lock'} ({self.path}), which "
                        f"another process holds; if that process is stuck, stop it (a killed "
                        f"process releases its locks by itself)"
                    )
                backoff.pause()  # a reader that stopped early does not wait for the lock
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()
        _held.add(fd)

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never wait."""
        fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        if _flock(fd, blocking=False):
            self._fd, self._pid = fd, os.getpid()
            _held.add(fd)
            return True
        os.close(fd)
        return False

    def release(self) -> None:
        """Let go of the lock: unlock (for any forked child that shares it too), then close."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self._pid != os.getpid():  # a forked child's copy: closed at the fork already
                return
            _held.discard(fd)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def hold(self, *, timeout: float | None, what: str = "") -> Iterator[FileLock]:
        """Hold the lock for a ``with`` block."""
        self.acquire(timeout=timeout, what=what)
        try:
            yield self
        finally:
            self.release()


def try_lock_file(path: str) -> FileLock | None:
    """The lock on ``path`` if it can be had at once, else ``None``."""
    lock = FileLock(path)
    return lock if lock.try_acquire() else None


def _flock(fd: int, *, blocking: bool) -> bool:
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True
