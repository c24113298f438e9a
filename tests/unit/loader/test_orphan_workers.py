"""DataLoader workers end with their job: a ``kill -9`` of the main process leaves no orphan."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

# Batches of 256 KiB, two workers four batches ahead: more than the 1 MiB result pipe holds, so
# each worker's writing thread is blocked on the pipe when the main process dies.
BATCH = 8
PAYLOAD = 32 << 10
EXIT_WITHIN_S = 10.0

# The job: iterate a few batches, say which workers it has, then stall as a hung trainer would.
CHILD = textwrap.dedent(
    """
    import functools, os, sys, time
    from shardstream import StreamingDataLoader, StreamingDataset
    from shardstream.cache.locks import FileLock

    HELD = []

    def start_worker(local, folder, worker_id):
        # Holds a download slot's lock, as a worker fetching a shard does when the job dies.
        lock = FileLock(os.path.join(local, ".shardstream", "slots", f"job-{worker_id}.lock"))
        lock.acquire(timeout=10)
        HELD.append(lock)
        with open(os.path.join(folder, f"worker-{worker_id}.pid"), "w") as handle:
            handle.write(str(os.getpid()))

    if __name__ == "__main__":
        remote, local, folder, method = sys.argv[1:]
        dataset = StreamingDataset(remote=remote, local=local, batch_size=BATCH, shuffle=True)
        loader = StreamingDataLoader(
            dataset, batch_size=BATCH, num_workers=2, multiprocessing_context=method,
            worker_init_fn=functools.partial(start_worker, local, folder),
        )
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        assert loader.worker_init_fn.func is start_worker  # the caller's, as it was given
        time.sleep(0.5)  # the workers fill the pipe
        open(os.path.join(folder, "ready"), "w").close()
        time.sleep(600)
    """
).replace("BATCH", str(BATCH))


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote") / "ds"
    return write_dataset(root, 400, size_limit=1 << 20, payload=PAYLOAD)


def running(pid: int) -> bool:
    """Whether any thread of ``pid`` runs: a zombie leader may wait for threads still closing."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in (b"Z", b"X"):
            return True
    return False


def start_job(remote: Path, tmp_path: Path, method: str) -> tuple[subprocess.Popen[bytes], Path]:
    script = tmp_path / "job.py"
    script.write_text(CHILD)
    folder = tmp_path / "pids"
    folder.mkdir()
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    args = [str(remote), str(tmp_path / "cache"), str(folder), method]
    with open(tmp_path / "job.log", "wb") as log:  # its leaked-semaphore warnings too
        job = subprocess.Popen(
            [sys.executable, str(script), *args], env=env, cwd=tmp_path, stdout=log, stderr=log
        )
    return job, folder


@pytest.mark.slow  # a job that imports torch, and spawned workers that import it again
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_exit_after_the_main_process_is_killed(remote: Path, tmp_path: Path, method: str):
    job, folder = start_job(remote, tmp_path, method)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not (folder / "ready").exists():
            if job.poll() is not None:
                log = (tmp_path / "job.log").read_text()
                pytest.fail(f"the job exited early with {job.returncode}:\n{log}")
            assert time.monotonic() < deadline, "the job never got its batches"
            time.sleep(0.05)
        workers = [int((folder / f"worker-{i}.pid").read_text()) for i in range(2)]
        assert all(map(running, workers))
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
        killed = time.monotonic()
        while any(map(running, workers)) and time.monotonic() - killed < EXIT_WITHIN_S:
            time.sleep(0.05)
        alive = list(filter(running, workers))
        assert not alive, f"workers {alive} of {method} outlived their job by {EXIT_WITHIN_S} s"
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        for pid in filter(running, workers):
            os.kill(pid, signal.SIGKILL)
    locks = [path for path in (tmp_path / "cache" / ".shardstream").rglob("*") if path.is_file()]
    assert {f"job-{i}.lock" for i in range(2)} <= {path.name for path in locks}
    for path in locks:  # every lock a dead job's workers held is free again
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pytest.fail(f"{path} is still locked by {lock_holders(path)}")
        finally:
            os.close(fd)


def lock_holders(path: Path) -> list[str]:
    """The pids that ``/proc/locks`` says hold a lock on ``path``, for the failure message."""
    inode = f":{os.stat(path).st_ino}"
    with open("/proc/locks") as table:
        rows = [line.split() for line in table if "->" not in line]
    return sorted(row[4] for row in rows if len(row) > 5 and row[5].endswith(inode))
