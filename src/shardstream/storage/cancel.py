"""Giving up on the storage work of other threads: the waits they make end when cancelled.

A reader that stops early (a ``break``, an iterator dropped after ``next``) must not wait for
the fetches it started ahead, which may wait on a server that stopped answering. Its fetch
threads run their tasks under a :class:`CancelScope`; when the reader stops, it cancels the
scope and leaves. Every wait a fetch makes answers to the scope of its thread (one rule, in
one place: :func:`pause` for polling waits, :meth:`CancelScope.watch` for a queue that
:func:`~shardstream.storage.download.timed_request` waits on): a cancelled scope ends the wait
at once with :class:`~concurrent.futures.CancelledError`, so the thread lets go of its locks
and slots and removes its temporary files within moments. The requests themselves are
abandoned as at a deadline (their daemon threads end when their sockets give up), never
joined.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from typing import Any, TypeVar

__all__ = ["LET_GO_S", "CancelScope", "check", "pause"]

#: How long whoever cancels waits for the cancelled work to let go (its waits end at once, so
#: it drops its locks, records and temporaries within moments); work still running then is
#: stuck in a call no wait of ours can end, and is left behind, never joined.
LET_GO_S = 1.0

T = TypeVar("T")

_local = threading.local()


class CancelScope:
    """Work of some threads that one call to :meth:`cancel` gives up on."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._queues: set[queue.SimpleQueue[Any]] = set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """End every wait made under this scope, now and later (from any thread)."""
        with self._lock:
            self._cancelled.set()
            waiting = list(self._queues)
        for waiter in waiting:
            waiter.put(None)  # wakes its reader, which then finds the scope cancelled

    def run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)`` in this thread, its waits answering to this scope."""
        previous = getattr(_local, "scope", None)
        _local.scope = self
        try:
            check()
            return call(*args, **kwargs)
        finally:
            _local.scope = previous

    @contextlib.contextmanager
    def watch(self, waiter: queue.SimpleQueue[Any]) -> Iterator[None]:
        """While in the block, :meth:`cancel` puts ``None`` into ``waiter`` to wake its reader."""
        with self._lock:
            self._queues.add(waiter)
            cancelled = self.cancelled
        if cancelled:
            waiter.put(None)
        try:
            yield
        finally:
            with self._lock:
                self._queues.discard(waiter)


def current() -> CancelScope | None:
    """The scope the calling thread's work runs under, if any."""
    scope: CancelScope | None = getattr(_local, "scope", None)
    return scope


def check() -> None:
    """Raise :class:`~concurrent.futures.CancelledError` if this thread's scope is cancelled."""
    scope = current()
    if scope is not None and scope.cancelled:
        raise CancelledError("the reader that asked for this stopped")


def pause(seconds: float) -> None:
    """Sleep ``seconds``, unless this thread's scope is cancelled meanwhile (then raise).

    Raises:
        CancelledError: The scope was cancelled before or during the pause.
    """
    scope = current()
    if scope is None:
        time.sleep(seconds)
        return
    if scope._cancelled.wait(seconds):
        check()
