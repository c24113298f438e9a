"""A process-wide cap on the bytes that downloads hold in memory at once.

A download request returns its body as ``bytes``, written into the file by the calling thread.
A node-local cache fetches several shards at a time, each in several byte ranges, so without a
cap a process holds ``shards x ranges x part size`` at once: 512 MiB for eight 64 MiB shards,
far more than any reader needs. Every request takes its size from one budget before it starts
and gives it back once its bytes are written (or dropped); a request that does not fit waits.
A request larger than the whole budget still starts when nothing else holds any of it, so
every download makes progress.
"""

from __future__ import annotations

import os
import threading

__all__ = ["ByteBudget"]


class ByteBudget:
    """Bytes that may be held at once by the requests of this process.

    Args:
        limit: The cap, in bytes.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._reset()
        if hasattr(os, "register_at_fork"):  # a child holds none of its parent's requests
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._used = 0

    @property
    def used(self) -> int:
        """Bytes taken and not yet given back."""
        return self._used

    def try_take(self, amount: int) -> bool:
        """Take ``amount`` bytes if they fit (or if nothing is taken); say whether it did."""
        with self._changed:
            if self._used and self._used + amount > self.limit:
                return False
            self._used += amount
            return True

    def give_back(self, amount: int) -> None:
        """Return ``amount`` bytes taken earlier, waking whoever waits for room."""
        with self._changed:
            self._used -= amount
            self._changed.notify_all()

    def wait(self, timeout: float) -> None:
        """Wait until some bytes are given back, or ``timeout`` seconds."""
        with self._changed:
            self._changed.wait(timeout)
