"""DataLoader workers that end when the process that started them is gone, ``kill -9`` included.

Torch's workers watch ``os.getppid()`` and leave their loop when it changes, but then wait, at
exit, for their result queue's writing thread, which may be blocked for good on a full pipe whose
reading end they hold open themselves; under ``forkserver`` their parent is not even the main
process. Each worker here runs a daemon thread that checks, about twice a second, that the main
process (its pid and start time, taken when the workers start) still runs, and ends the worker
with ``os._exit`` once it does not: no exit handlers, no queue to flush, and the kernel drops
every ``flock`` the worker held (the cache's shard locks and download slots among them).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from shardstream.cache.run_state import process_start_time

__all__ = ["ORPHAN_EXIT", "POLL_S", "EndWithMain", "MainProcess", "watch_main_process"]

#: Seconds between a worker's checks that the main process still runs.
POLL_S = 0.5

#: The exit status of a worker ended because its main process is gone.
ORPHAN_EXIT = 70

_HAS_PROC = os.path.exists("/proc/self/stat")


@dataclass(frozen=True)
class MainProcess:
    """A process named so that a reused pid does not pass for it: its pid and start time."""

    pid: int
    started: str

    @classmethod
    def current(cls) -> MainProcess:
        """This process."""
        pid = os.getpid()
        return cls(pid, process_start_time(pid))

    def running(self) -> bool:
        """Whether it still runs: same pid and start time, and not a zombie left unreaped."""
        if not _HAS_PROC:  # macOS: whether the pid exists is all there is to know
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except FileNotFoundError:
            return False
        except (OSError, IndexError):  # an unreadable /proc: assume alive, torch's check remains
            return True
        return fields[0] not in (b"Z", b"X") and fields[19].decode() == self.started


@dataclass(frozen=True)
class EndWithMain:
    """A ``worker_init_fn`` that ties the worker's life to ``main``, then runs the caller's.

    Picklable whenever ``init_fn`` is, so it crosses to ``spawn`` and ``forkserver`` workers.

    Args:
        main: The process whose death ends the worker.
        init_fn: The ``worker_init_fn`` the loader was given, if any.
    """

    main: MainProcess
    init_fn: Callable[[int], None] | None = None

    def __call__(self, worker_id: int) -> None:
        """Start the watchdog in this worker, then call ``init_fn(worker_id)``."""
        watch_main_process(self.main)
        if self.init_fn is not None:
            self.init_fn(worker_id)


def watch_main_process(main: MainProcess, poll_s: float = POLL_S) -> threading.Thread:
    """Start a daemon thread that ends this process within ``poll_s`` of ``main``'s death."""
    thread = threading.Thread(
        target=_watch, args=(main, poll_s), name="shardstream-main-watchdog", daemon=True
    )
    thread.start()
    return thread


def _watch(main: MainProcess, poll_s: float) -> None:
    while main.running():
        time.sleep(poll_s)
    # No logging here: a handler's lock, or a full stderr pipe nobody reads, would keep us alive.
    os._exit(ORPHAN_EXIT)
