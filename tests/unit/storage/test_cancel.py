"""Cancelling the storage work of other threads: their waits end at once, nothing is left."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path

import pytest

from shardstream.storage import DownloadOptions, ObjectInfo, cancel, download_file, fetch_listing
from shardstream.storage.cancel import CancelScope


class SilentStore:
    """Every request waits until ``release`` is set: a server that stopped answering."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()
        self.waiting = 0  # requests still held: a cancel must not wait for them
        self._lock = threading.Lock()

    def url(self, key: str) -> str:
        return f"silent://bucket/{key}"

    def _wait(self) -> None:
        with self._lock:
            self.waiting += 1
        self.asked.set()
        self.release.wait(60)
        with self._lock:
            self.waiting -= 1

    def get_bytes(self, key: str) -> bytes:
        self._wait()
        return b"x" * 100

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        self._wait()
        return b"x" * (end - start)

    def info(self, key: str) -> ObjectInfo:
        self._wait()
        return ObjectInfo(100)

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        self._wait()
        return {}


@pytest.mark.parametrize("expected_size", [None, 100, 10_000])
def test_a_cancelled_download_ends_at_once_and_leaves_no_file(
    tmp_path: Path, expected_size: int | None
):
    store = SilentStore()
    scope = CancelScope()
    # The requests' own deadline is far past the bound below: only the cancel can end them.
    options = DownloadOptions(retry=3, timeout=600, part_size=1000)
    dest = tmp_path / "shard.mds"
    with ThreadPoolExecutor(1) as pool:
        try:
            future = pool.submit(
                scope.run, download_file, store, "k", str(dest), options,
                expected_size=expected_size,
            )  # fmt: skip
            assert store.asked.wait(30)
            scope.cancel()
            with pytest.raises(CancelledError):
                future.result(timeout=30)  # a loose bound, not a measure
            # Ended while its requests were still held at the store: given up, not waited for.
            assert store.waiting >= 1
        finally:
            store.release.set()
    assert os.listdir(tmp_path) == []  # no file, no temporary sibling


def test_a_cancelled_listing_ends_at_once():
    store = SilentStore()
    scope = CancelScope()

    def cancel_once_asked() -> None:
        if store.asked.wait(30):
            scope.cancel()

    threading.Thread(target=cancel_once_asked, daemon=True).start()
    with pytest.raises(CancelledError):  # uncancelled, the listing is held 60 s and answers
        scope.run(fetch_listing, store, "", DownloadOptions(timeout=120))
    assert store.waiting == 1  # given up while the store still held the request
    store.release.set()


def test_work_started_under_a_cancelled_scope_does_not_start():
    scope = CancelScope()
    scope.cancel()
    called: list[int] = []
    with pytest.raises(CancelledError):
        scope.run(called.append, 1)
    assert called == []
    assert scope.cancelled


def test_pause_ends_with_its_scope_and_only_in_its_thread():
    scope = CancelScope()
    threading.Timer(0.1, scope.cancel).start()
    started = time.monotonic()
    with pytest.raises(CancelledError):
        scope.run(cancel.pause, 60)
    assert time.monotonic() - started < 30  # a loose bound: uncancelled, the pause is 60 s
    # Outside any scope a pause is a sleep, and a check never raises.
    cancel.pause(0.01)
    cancel.check()
    assert cancel.current() is None
    # The thread's scope is restored after a run.
    outer, inner = CancelScope(), CancelScope()
    assert outer.run(lambda: inner.run(cancel.current)) is inner
    assert outer.run(cancel.current) is outer
    assert cancel.current() is None
