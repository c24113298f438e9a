"""Which epoch a rank's DataLoader workers run next, kept in one small file per rank.

A rank's DataLoader workers are separate processes, started afresh each epoch unless
``persistent_workers=True``; they must agree on the epoch, and on a resume point loaded into the
dataset after they started. The reference keeps this in named shared memory, which outlives a
crash. Here it is a JSON file in the cache folder's ``runs/`` folder, named after the rank
process (its pid and start time) and the dataset object, guarded by an ``flock``:

* each worker keeps its own "next epoch" slot, so workers never wait for one another (no
  barrier at epoch boundaries: a slow worker hangs nobody);
* a resume point is taken once by every worker, then dropped;
* files of rank processes that no longer run are deleted by the next run that looks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from shardstream.cache.locks import FileLock
from shardstream.cache.safe_paths import make_folders

__all__ = ["EpochStart", "RunState", "process_start_time"]

logger = logging.getLogger(__name__)

_LOCK_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class EpochStart:
    """Where an iteration starts: an epoch, and the samples of it already consumed."""

    epoch: int
    drop_first: int = 0


class RunState:
    """The epoch bookkeeping of one dataset object in one rank process.

    Args:
        folder: Where run files live (``<cache>/.shardstream/runs``).
        owner: The rank process's pid (a DataLoader worker passes its parent's).
        dataset_id: Tells apart several datasets read by one process (train and validation).
    """

    def __init__(self, folder: str, owner: int, dataset_id: str) -> None:
        self.folder = folder
        self.owner = owner
        start = process_start_time(owner)
        self.path = os.path.join(folder, f"{owner}-{start}-{dataset_id}.json")

    def exists(self) -> bool:
        """Whether a worker of this rank has started iterating (and so created the file)."""
        return os.path.exists(self.path)

    def begin(
        self,
        worker: int,
        num_workers: int,
        *,
        next_epoch: int,
        resume: EpochStart | None,
    ) -> EpochStart:
        """Claim the next iteration of DataLoader worker ``worker`` of ``num_workers``.

        Args:
            worker: This worker.
            num_workers: Workers of the rank.
            next_epoch: The rank's next epoch, should this be the first worker to start.
            resume: A resume point loaded before the workers started, likewise.
        """
        fresh = not os.path.exists(self.path)
        if fresh:
            make_folders(self.folder)  # refuses a planted link before anything in it is removed
            self._remove_dead()
        lock = FileLock(self.path)
        with lock.hold(timeout=_LOCK_TIMEOUT_S, what="the run state"):
            state = _read(lock.fd)
            if state is None:
                state = _initial(num_workers, next_epoch, resume)
            slots: list[int] = state["next"]
            if len(slots) != num_workers:  # a loader with another worker count
                slots = [max(slots, default=next_epoch)] * num_workers
            pending = state.get("resume")
            taken: list[int] = state.get("taken", [])
            if pending is not None and worker not in taken:
                start = EpochStart(int(pending["epoch"]), int(pending["drop_first"]))
                taken.append(worker)
                if len(taken) >= num_workers:
                    pending, taken = None, []
            else:
                start = EpochStart(slots[worker], 0)
            slots[worker] = start.epoch + 1
            current = {"epoch": start.epoch, "drop_first": start.drop_first}
            said = state.get("said", [])
            state = {"next": slots, "resume": pending, "taken": taken, "current": current,
                     "said": said}  # fmt: skip
            _write(lock.fd, state)
        return start

    def first_time(self, note: str) -> bool:
        """Whether ``note`` is new to this run (then noted): a line to log once, not per epoch.

        Only once a worker has begun (the file exists); before that, every note is new.
        """
        if not self.exists():
            return True
        lock = FileLock(self.path)
        with lock.hold(timeout=_LOCK_TIMEOUT_S, what="the run state"):
            state = _read(lock.fd)
            if state is None:
                return True
            said: list[str] = state.setdefault("said", [])
            if note in said:
                return False
            said.append(note)
            _write(lock.fd, state)
        return True

    def update(self, *, next_epoch: int, resume: EpochStart | None) -> None:
        """Set every worker's next epoch and the resume point (from the rank process)."""
        if not self.exists():
            return
        lock = FileLock(self.path)
        with lock.hold(timeout=_LOCK_TIMEOUT_S, what="the run state"):
            state = _read(lock.fd)
            workers = len(state["next"]) if state else 1
            said = state.get("said", []) if state else []
            _write(lock.fd, {**_initial(workers, next_epoch, resume), "said": said})

    def current(self) -> EpochStart | None:
        """The epoch the workers run now and where it started, once one of them began."""
        if not self.exists():
            return None
        lock = FileLock(self.path)
        with lock.hold(timeout=_LOCK_TIMEOUT_S, what="the run state"):
            state = _read(lock.fd)
        if state is None or state.get("current") is None:
            return None
        return EpochStart(int(state["current"]["epoch"]), int(state["current"]["drop_first"]))

    def _remove_dead(self) -> None:
        """Delete the run files of rank processes that are gone."""
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.folder):
                parts = name.split("-", 2)
                if len(parts) != 3 or not parts[0].isdigit():
                    continue
                started = process_start_time(int(parts[0]))
                if started == "dead" or started != parts[1]:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(self.folder, name))
                        logger.debug("removed the run file of a finished process: %s", name)


def process_start_time(pid: int) -> str:
    """A token that changes when ``pid`` is reused: the process's start time, or ``dead``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()  # field 22 of stat(5), counted after the command name
    except FileNotFoundError:
        return "dead"
    except (OSError, IndexError):  # no /proc (macOS): fall back on whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "dead"
        except PermissionError:
            return "alive"
        return "alive"


def _initial(workers: int, next_epoch: int, resume: EpochStart | None) -> dict[str, Any]:
    pending = None if resume is None else {"epoch": resume.epoch, "drop_first": resume.drop_first}
    return {"next": [next_epoch] * workers, "resume": pending, "taken": [], "current": None}


def _read(fd: int) -> dict[str, Any] | None:
    """The state in the file, or ``None`` when it is empty or was cut short by a crash."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0) if size else b""
    try:
        state = json.loads(data)
    except ValueError:
        return None
    if not isinstance(state, dict) or not isinstance(state.get("next"), list):
        return None
    return state


def _write(fd: int, state: dict[str, Any]) -> None:
    data = json.dumps(state, sort_keys=True).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
