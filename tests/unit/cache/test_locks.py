"""File locks: released by their holder even when a forked child shares the open file."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import CancelledError
from pathlib import Path

import pytest

from shardstream.cache.locks import FileLock, try_lock_file
from shardstream.storage.cancel import CancelScope


def linger(ready: str, seconds: float) -> None:
    """A forked child that outlives its parent's release (as a DataLoader worker does)."""
    Path(ready).write_text("up")
    time.sleep(seconds)


def held(tmp_path: Path) -> tuple[str, FileLock]:
    """A lock file in ``tmp_path``, and its lock, held by this process."""
    path = str(tmp_path / "shard.lock")
    lock = FileLock(path)
    lock.acquire(timeout=1)
    return path, lock


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forking is POSIX")
def test_a_release_is_not_undone_by_a_child_forked_while_held(tmp_path: Path):
    path, lock = held(tmp_path)
    ready = tmp_path / "ready"
    child = multiprocessing.get_context("fork").Process(target=linger, args=(str(ready), 30))
    child.start()
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists()
        assert try_lock_file(path) is None  # still held by this process
        lock.release()
        # The child is alive and shares the open file it inherited; the lock is free anyway.
        assert child.is_alive()
        again = try_lock_file(path)
        assert again is not None
        again.release()
    finally:
        child.kill()
        child.join(10)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forking is POSIX")
def test_a_child_does_not_hold_its_parents_locks(tmp_path: Path):
    path, lock = held(tmp_path)
    held_by_child = tmp_path / "child"

    def probe() -> None:
        # The child's copy of ``lock`` is not held: releasing it leaves the parent's alone.
        lock.release()
        free = try_lock_file(path)
        held_by_child.write_text("free" if free is not None else "taken")

    child = multiprocessing.get_context("fork").Process(target=probe)
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert held_by_child.read_text() == "taken"  # the parent still holds it
    assert try_lock_file(path) is None
    lock.release()
    assert try_lock_file(path) is not None


def test_a_wait_for_a_lock_ends_when_its_scope_is_cancelled(tmp_path: Path):
    path, lock = held(tmp_path)
    scope = CancelScope()
    threading.Timer(0.2, scope.cancel).start()
    started = time.monotonic()
    try:
        with pytest.raises(CancelledError):
            scope.run(FileLock(path).acquire, timeout=60)
    finally:
        lock.release()
    # A loose bound where the deadline is the point: uncancelled, the wait would last 60 s.
    assert time.monotonic() - started < 30
    assert try_lock_file(path) is not None  # the cancelled wait took nothing
