"""The node's first-batch ranges before its look-aheads' whole downloads.

A cold first batch over thousands of small shards is a few hundred range requests, a couple
of round trips (``cache/sample_ranges.py``). With DataLoader workers, each reads its own first
batch so; the one whose batch is out first goes on to its look-ahead, thousands of whole
downloads of the rest of the epoch, which would share the link, the store and the cores with
the other workers' ranges while the loader still waits for their batches. So a process holds
a shared ``flock`` on one file of the node's state folder from its first batch's ranges until
that batch is handed on (:meth:`RangeGate.hold`), and a look-ahead about to start on the rest
of an epoch waits until nobody holds it (:meth:`RangeGate.wait`), up to a deadline: the policy's
``range_hold_s``, past which a slow process's ranges are not worth the rest of the epoch's
wait. The kernel drops a lock with its holder, so a crashed reader holds nothing back.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Iterator

from shardstream.cache.safe_paths import open_file
from shardstream.storage import cancel

try:  # POSIX; elsewhere nothing is held back
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["RangeGate"]

logger = logging.getLogger(__name__)

_NAME = "first-ranges.lock"
_POLL_S = 0.005
_MAX_POLL_S = 0.05


class RangeGate:
    """First-batch ranges of the node's processes, and the wait for them to be out.

    One a reader: :meth:`hold` while its first batch's ranges are out and until that batch is
    handed on, :meth:`let_go` then (and when its walk ends); :meth:`wait` before the rest of
    an epoch.

    Args:
        state: The node's state folder (``None``: no remote stream, nothing to hold).
    """

    def __init__(self, state: str | None) -> None:
        self.path = None if state is None else os.path.join(state, _NAME)
        self._fd: int | None = None
        self._pid = 0

    def hold(self) -> None:
        """Hold the gate shared (again a no-op while held)."""
        if self._fd is not None and self._pid == os.getpid():
            return
        self.let_go()  # a forked child's copy of its parent's hold: closed, never unlocked
        fd = self._open()
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # exclusive holders only look, never wait
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()

    def let_go(self) -> None:
        """Stop holding the gate (a no-op unless this process holds it)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._pid == os.getpid():  # a forked child's copy: unlocking it would let go of
            with contextlib.suppress(OSError):  # its parent's hold; closing it does not
                fcntl.flock(fd, fcntl.LOCK_UN)  # for a forked child's copy of it too
        with contextlib.suppress(OSError):
            os.close(fd)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """:meth:`hold` for a ``with`` block."""
        self.hold()
        try:
            yield
        finally:
            self.let_go()

    def wait(self, timeout: float) -> bool:
        """Wait until no process of the node reads first-batch ranges, at most ``timeout`` s.

        This process's own hold is let go first.

        Returns:
            Whether they were out (``False``: the deadline passed, or nothing to wait for
            could be opened).
        """
        self.let_go()
        fd = self._open()
        if fd is None:
            return False
        deadline = time.monotonic() + timeout
        delay = _POLL_S
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return True
                if time.monotonic() >= deadline:
                    logger.debug("first-batch ranges still out after %g s: not waiting", timeout)
                    return False
                cancel.pause(delay)  # a reader that stopped early does not wait
                delay = min(delay * 2, _MAX_POLL_S)
        finally:
            os.close(fd)

    def _open(self) -> int | None:
        if self.path is None or fcntl is None:
            return None
        try:
            return open_file(self.path, os.O_RDWR | os.O_CREAT)
        except OSError:  # an unwritable state folder: a read goes on without the gate
            return None
