"""The node's download slots across threads and forked processes."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import pytest

from shardstream.cache.download_slots import DownloadSlots
from shardstream.cache.locks import try_lock_file
from shardstream.storage.cancel import CancelScope


def _child_takes(slots: DownloadSlots, share: int, result: multiprocessing.Queue[bool]) -> None:
    place = slots._take(share)  # the inherited descriptors are closed at the fork
    result.put(place is not None)


def _in_child(slots: DownloadSlots, share: int) -> bool:
    context = multiprocessing.get_context("fork")
    result: multiprocessing.Queue[bool] = context.Queue()
    child = context.Process(target=_child_takes, args=(slots, share, result))
    child.start()
    took = result.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    return took


def test_a_forked_child_neither_shares_nor_frees_its_parents_slot(tmp_path: Path) -> None:
    slots = DownloadSlots(str(tmp_path / ".shardstream"), 1)
    with slots.hold(1):  # the parent fills the only slot
        assert not _in_child(slots, 1)
        assert not _in_child(slots, 4)  # nor a lane beside it
        # The child closed its copies without unlocking: the parent still holds the slot.
        assert try_lock_file(str(tmp_path / ".shardstream" / "slots" / "0.lock")) is None
    assert _in_child(slots, 1)


def _child_holds(slots: DownloadSlots, ready: Any, done: Any) -> None:
    with slots.hold(3):  # a lane, and its own share of the slot
        ready.set()
        done.wait(30)


def test_a_forked_childs_lane_holds_its_slot_after_the_parent_lets_go(tmp_path: Path) -> None:
    # The child must lock the slot shared through its own descriptor: the parent's, inherited,
    # is unlocked when the parent gives its lane back, and a download could then fill the slot.
    slots = DownloadSlots(str(tmp_path / ".shardstream"), 1)
    slot = str(tmp_path / ".shardstream" / "slots" / "0.lock")
    context = multiprocessing.get_context("fork")
    ready, done = context.Event(), context.Event()
    with slots.hold(3):
        child = context.Process(target=_child_holds, args=(slots, ready, done))
        child.start()
        assert ready.wait(30)
    try:
        assert try_lock_file(slot) is None  # the child's lane still holds the slot shared
    finally:
        done.set()
        child.join(30)
    assert child.exitcode == 0
    freed = try_lock_file(slot)
    assert freed is not None
    freed.release()


def test_threads_of_a_process_share_a_slot_lane_by_lane(tmp_path: Path) -> None:
    slots = DownloadSlots(str(tmp_path / ".shardstream"), 2)
    inside, most, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def download() -> None:
        with slots.hold(3):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            release.wait(60)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=download) for _ in range(8)]
    for thread in threads:
        thread.start()
    for _ in range(3000):  # 30 s at most: a bound, not a measure
        if most[0] == 6:
            break
        threading.Event().wait(0.01)
    assert most[0] == 6  # two slots of three lanes
    assert slots._take(1) is None  # a download that fills a slot waits meanwhile
    release.set()
    for thread in threads:
        thread.join()
    assert most[0] == 6
    assert slots._take(1) is not None


def test_a_wait_for_a_slot_ends_when_its_scope_is_cancelled(tmp_path: Path) -> None:
    slots = DownloadSlots(str(tmp_path / ".shardstream"), 1)
    scope = CancelScope()

    def wait_for_a_slot() -> None:
        with slots.hold(1):
            raise AssertionError("the only slot is held")

    with slots.hold(1):
        threading.Timer(0.2, scope.cancel).start()
        started = time.monotonic()
        with pytest.raises(CancelledError):
            scope.run(wait_for_a_slot)
        # A loose bound: uncancelled, the wait never ends (the slot is held until it does).
        assert time.monotonic() - started < 30
    with slots.hold(1):  # the cancelled wait took nothing
        pass
