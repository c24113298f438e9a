"""One try of one storage request, run by a reused daemon worker (see ``storage/download.py``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from shardstream.storage._memory_budget import ByteBudget
from shardstream.storage._workers import WorkerPool

__all__ = ["Attempt"]

T = TypeVar("T")

_WORKERS = WorkerPool("shardstream-download")


class Attempt(Generic[T]):
    """One try of one request, run by a daemon worker; the outcome goes to ``outcomes``.

    The attempt holds ``cost`` bytes of the process's budget from :meth:`start` until the
    waiting thread is done with its value (:meth:`settle`), or, for an attempt abandoned at its
    deadline, until it ends.
    """

    def __init__(
        self,
        index: int,
        call: Callable[[], T],
        outcomes: queue.SimpleQueue[Attempt[T] | None],
        cost: int,
        budget: ByteBudget,
    ) -> None:
        self.index = index
        self.value: T | None = None
        self.error: BaseException | None = None
        self.cost = cost
        # Given back where it was taken, however late an abandoned attempt ends.
        self._budget = budget
        self._call = call
        self._outcomes = outcomes
        self._lock = threading.Lock()
        self._ended = False
        self._abandoned = False

    def start(self) -> None:
        _WORKERS.submit(self._run)

    def _run(self) -> None:
        try:
            self.value = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, not lost
            self.error = exc
        with self._lock:
            self._ended = True
            abandoned = self._abandoned
        if abandoned:  # nobody waits for it: drop the value and free its share at once
            self.value = None
            self._budget.give_back(self.cost)
            return
        self._outcomes.put(self)

    def settle(self) -> None:
        """The waiting thread is done with this outcome: drop its value, free its share."""
        self.value = None
        self._budget.give_back(self.cost)

    def abandon(self) -> None:
        """The waiting thread gives up on this attempt; its share is freed when it ends."""
        with self._lock:
            self._abandoned = True
            ended = self._ended
        if ended:  # ended already, its outcome queued and never to be read: free it here
            self.settle()
