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

    def url(self, key: str) -> str:
        return f"silent://bucket/{key}"

    def _wait(self) -> None:
        self.asked.set()
        self.release.wait(30)

    def get_bytes(self, key: str) -> bytes:
        self._wait()
        return b"x" * 100

    def get_range(self, key: str, start: int, end: int) -> bytes:
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
    options = DownloadOptions(retry=3, timeout=30, part_size=1000)
    dest = tmp_path / "shard.mds"
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            scope.run, download_file, store, "k", str(dest), options, expected_size=expected_size
        )
        assert store.asked.wait(5)
        started = time.monotonic()
        scope.cancel()
        with pytest.raises(CancelledError):
            future.result(timeout=5)
        assert time.monotonic() - started < 1.0
    store.release.set()
    assert os.listdir(tmp_path) == []  # no file, no temporary sibling


def test_a_cancelled_listing_ends_at_once():
    store = SilentStore()
    scope = CancelScope()
    timer = threading.Timer(0.2, scope.cancel)
    timer.start()
    started = time.monotonic()
    with pytest.raises(CancelledError):
        scope.run(fetch_listing, store, "", DownloadOptions(timeout=30))
    assert time.monotonic() - started < 1.5
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
        scope.run(cancel.pause, 30)
    assert time.monotonic() - started < 1.5
    # Outside any scope a pause is a sleep, and a check never raises.
    cancel.pause(0.01)
    cancel.check()
    assert cancel.current() is None
    # The thread's scope is restored after a run.
    outer, inner = CancelScope(), CancelScope()
    assert outer.run(lambda: inner.run(cancel.current)) is inner
    assert outer.run(cancel.current) is outer
    assert cancel.current() is None
