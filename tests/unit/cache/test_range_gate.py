"""The node's first-batch ranges hold its look-aheads back: real processes, real ``flock``."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from shardstream.cache.range_gate import RangeGate

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock")


def _hold(state: str, holding, stop) -> None:
    with RangeGate(state).reading():
        holding.set()
        stop.wait(60)


def _holder(state: Path):
    context = multiprocessing.get_context("spawn")
    holding, stop = context.Event(), context.Event()
    process = context.Process(target=_hold, args=(str(state), holding, stop), daemon=True)
    process.start()
    assert holding.wait(60)
    return process, stop


def test_a_look_ahead_waits_while_another_process_reads_ranges(tmp_path):
    state = tmp_path / ".shardstream"
    gate = RangeGate(str(state))
    assert gate.wait(5)  # nobody reads ranges: at once
    process, stop = _holder(state)
    try:
        assert not gate.wait(0.2)  # still out at the deadline: go on without them
        with gate.reading():  # readers share it
            pass
    finally:
        stop.set()
        process.join(60)
    assert gate.wait(5)


def test_a_killed_reader_holds_nothing_back(tmp_path):
    state = tmp_path / ".shardstream"
    process, _ = _holder(state)
    os.kill(process.pid, signal.SIGKILL)
    process.join(60)
    assert RangeGate(str(state)).wait(5)


def test_no_state_folder_holds_nothing(tmp_path):
    gate = RangeGate(None)
    with gate.reading():
        assert not gate.wait(5)  # nothing to wait for: returns at once


def _let_go_in_child(gate: RangeGate) -> None:
    gate.let_go()  # a forked child's copy of its parent's hold
    gate.hold()  # and a hold of its own, let go at its exit
    gate.let_go()


def test_a_forked_child_never_lets_go_of_its_parents_hold(tmp_path):
    state = tmp_path / ".shardstream"
    gate = RangeGate(str(state))
    gate.hold()
    gate.hold()  # held already: once
    try:
        child = multiprocessing.get_context("fork").Process(target=_let_go_in_child, args=(gate,))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert not RangeGate(str(state)).wait(0.2)  # the parent's first batch is still out
    finally:
        gate.let_go()
    assert RangeGate(str(state)).wait(5)
    assert gate.wait(5)  # let go already: a no-op
