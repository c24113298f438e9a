"""The download worker pool: threads are reused, a hung job never blocks the next one."""

from __future__ import annotations

import functools
import os
import queue
import threading
import time
import warnings

from shardstream.storage._workers import WorkerPool


def run(pool: WorkerPool, done: queue.SimpleQueue[threading.Thread]) -> threading.Thread:
    pool.submit(lambda: done.put(threading.current_thread()))
    return done.get(timeout=30)  # a bound, not a measure


def wait_idle(pool: WorkerPool) -> None:
    """Until a thread of ``pool`` waits for work: by the pool's count, not by a sleep."""
    deadline = time.monotonic() + 30  # a bound, not a measure
    while pool._idle < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert pool._idle >= 1


def test_jobs_run_in_reused_daemon_threads():
    pool = WorkerPool("test-pool")
    done: queue.SimpleQueue[threading.Thread] = queue.SimpleQueue()
    first = run(pool, done)
    threads = set()
    for _ in range(20):
        wait_idle(pool)  # the thread went idle: the next job must go to it
        threads.add(run(pool, done))
    assert threads == {first}
    assert first.daemon
    assert first.name == "test-pool"


def test_a_hung_job_does_not_hold_up_the_next():
    pool = WorkerPool("test-pool")
    release = threading.Event()

    hanging, ended = threading.Event(), threading.Event()
    hung_in: list[threading.Thread] = []

    def hang() -> None:
        hung_in.append(threading.current_thread())
        hanging.set()
        release.wait(60)
        ended.set()

    pool.submit(hang)
    done: queue.SimpleQueue[threading.Thread] = queue.SimpleQueue()
    try:
        assert hanging.wait(30)
        ran_in = run(pool, done)  # queued behind the hung job, it would never run
        assert not ended.is_set()  # it ran while the first job still hung
        assert ran_in is not hung_in[0]
    finally:
        release.set()


def test_many_jobs_at_once_all_run():
    pool = WorkerPool("test-pool")
    barrier = threading.Barrier(6)
    done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def meet(number: int) -> None:
        barrier.wait(5)
        done.put(number)

    for number in range(5):
        pool.submit(functools.partial(meet, number))
    barrier.wait(5)  # only possible if five threads run at the same time
    assert sorted(done.get(timeout=5) for _ in range(5)) == [0, 1, 2, 3, 4]


def test_idle_threads_end():
    pool = WorkerPool("test-pool", idle_seconds=0.1)
    done: queue.SimpleQueue[threading.Thread] = queue.SimpleQueue()
    thread = run(pool, done)
    thread.join(3)
    assert not thread.is_alive()
    assert run(pool, done) is not thread  # a fresh thread takes the next job


def test_a_forked_child_starts_its_own_threads():
    pool = WorkerPool("test-pool")
    done: queue.SimpleQueue[threading.Thread] = queue.SimpleQueue()
    run(pool, done)
    wait_idle(pool)  # an idle thread in the parent, which the child will not have
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (Python 3.12+)
        child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        try:
            run(pool, done)  # without its own threads, the job would wait forever
        except queue.Empty:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
