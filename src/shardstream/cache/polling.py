"""How often a thread looks again at a lock file another process holds.

The cache's waits between processes are polls: an ``flock`` cannot wait with a deadline, nor
be left by a reader that stopped early. A shard's lock or a download slot is mostly held for
one download, a round trip or a few, so a waiter looks again soon at first (each look late
by at most :data:`SOON_S`) and, once the wait outlasts :data:`FRESH_S` (a large download, a
stuck holder), less often, up to :data:`MOST_S` between looks.
"""

from __future__ import annotations

import time

from shardstream.storage import cancel

__all__ = ["FIRST_S", "FRESH_S", "MOST_S", "SOON_S", "Backoff"]

#: The first wait before looking again.
FIRST_S = 0.001
#: The longest wait between looks while the wait is fresh.
SOON_S = 0.008
#: How long a wait stays fresh.
FRESH_S = 0.25
#: The longest wait between looks.
MOST_S = 0.05


class Backoff:
    """The pauses of one wait: doubling from :data:`FIRST_S`, capped as above."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.delay = FIRST_S

    def pause(self) -> None:
        """Sleep until the next look (a reader that stopped early raises, as ``cancel.pause``).

        Raises:
            CancelledError: This thread's scope was cancelled before or during the pause.
        """
        cancel.pause(self.delay)
        most = SOON_S if time.monotonic() - self.started < FRESH_S else MOST_S
        self.delay = min(self.delay * 2, most)
