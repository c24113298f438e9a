"""Daemon threads that run storage requests, reused from one request to the next.

Starting a thread per request can cost as much as a loopback GET of a small object; handing
the request to a waiting thread costs far less. Unlike a ``ThreadPoolExecutor``, the pool
never makes a caller wait for a free thread: a request that hangs keeps its thread, and the
next request gets a new one. Threads that stay idle for
``idle_seconds`` end. They are daemons, so a hung request never holds up the interpreter's exit.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["WorkerPool"]

Job = Callable[[], None]


class WorkerPool:
    """Runs jobs in reusable daemon threads, starting a new one whenever none is idle.

    Args:
        name: The threads' name.
        idle_seconds: How long an idle thread waits for work before it ends.
    """

    def __init__(self, name: str, idle_seconds: float = 30.0) -> None:
        self.name = name
        self.idle_seconds = idle_seconds
        self._reset()
        if hasattr(os, "register_at_fork"):  # a child process has none of the parent's threads
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        # Idle threads minus queued jobs: how many threads wait with nothing to take.
        self._idle = 0

    def submit(self, job: Job) -> None:
        """Run ``job`` in a thread of the pool (``job`` must handle its own exceptions)."""
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                self._jobs.put(job)
                return
        threading.Thread(target=self._work, args=(job,), name=self.name, daemon=True).start()

    def _work(self, job: Job) -> None:
        jobs, lock = self._jobs, self._lock
        while True:
            job()
            del job  # drop the finished job's references while idle
            with lock:
                self._idle += 1
            while True:
                try:
                    job = jobs.get(timeout=self.idle_seconds)
                    break
                except queue.Empty:
                    with lock:
                        if self._idle > 0:  # more idle threads than jobs: this one may end
                            self._idle -= 1
                            return
                    # A job was promised to the idle threads meanwhile: wait for it.
