"""The main process as a worker's watchdog sees it, and the worker_init_fn that starts it."""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from functools import partial

import pytest

from shardstream.loader.worker_watchdog import EndWithMain, MainProcess

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_this_process_runs():
    assert MainProcess.current().running()


@linux_only
def test_a_reused_pid_is_not_the_main_process():
    me = MainProcess.current()
    assert not MainProcess(me.pid, str(int(me.started) + 1)).running()


def test_a_reaped_process_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    main = MainProcess(child.pid, MainProcess.current().started)
    child.wait()
    assert not main.running()


@linux_only
def test_a_killed_process_not_yet_reaped_is_gone():
    child = subprocess.Popen(["sleep", "30"])
    try:
        main = MainProcess(child.pid, _started(child.pid))
        assert main.running()
        child.kill()
        deadline = time.monotonic() + 5
        while _state(child.pid) != b"Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.pid) == b"Z"  # a zombie: its parent has not waited for it yet
        assert not main.running()
    finally:
        child.kill()
        child.wait()


def _note(calls: list[int], worker_id: int) -> None:
    calls.append(worker_id)


def test_the_callers_worker_init_fn_still_runs():
    calls: list[int] = []
    EndWithMain(MainProcess.current(), partial(_note, calls))(3)
    assert calls == [3]


def test_it_crosses_to_spawned_workers():
    init = EndWithMain(MainProcess.current(), partial(_note, []))
    copy = pickle.loads(pickle.dumps(init))
    assert copy.main == init.main
    assert copy.init_fn is not None


def _stat(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[1].split()


def _state(pid: int) -> bytes:
    return _stat(pid)[0]


def _started(pid: int) -> str:
    return _stat(pid)[19].decode()
