"""``RunProgress``: where a dataset's iterations stand in this run, shared with its workers.

The next epoch, a resume point loaded and not yet read from, and the epoch being read now. A
rank process keeps them itself; its DataLoader workers (new copies each epoch) share them
through the node's run state (:class:`~shardstream.cache.RunState`), a file kept under the
rank process's id and this dataset's.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

from shardstream import config
from shardstream.cache import EpochStart, RunState, ensure_private_folder

__all__ = ["RunProgress", "runs_folder"]

Folder = Callable[[], str]


class RunProgress:
    """Where one dataset object's iterations stand in this run.

    Each call that may share its state with the workers takes ``folder``, which gives the
    node's folder of run files (:func:`runs_folder`) when first needed.

    Attributes:
        rank_process: The process id of the rank process whose DataLoader workers iterate
            this dataset (its run state is kept under that id); ``None``: found from how the
            copy arrived (:meth:`rank_process_of_worker`).
    """

    def __init__(self) -> None:
        self.id = uuid.uuid4().hex[:12]  # tells this dataset's run file from others'
        self.next_epoch = 0
        self.resume: EpochStart | None = None
        self.current: EpochStart | None = None
        self.rank_process: int | None = None
        self._said: set[str] = set()  # notes logged once (iterating in this process)
        self._sent_by: int | None = None  # the process that pickled this copy
        self._received_by: int | None = None  # ... and the one that unpickled it

    def claim(self, info: tuple[int, int] | None, folder: Folder) -> EpochStart:
        """The epoch and resume point of the iteration starting now, noted for the next one.

        ``info``: this DataLoader worker and the workers of its rank (``None``: the rank
        process itself iterates).
        """
        if info is None:
            start = self.resume or EpochStart(self.next_epoch)
            self.resume = None
            self.next_epoch = start.epoch + 1
            self.current = start
            return start
        worker, workers = info
        state = self.run_state(folder, self.rank_process_of_worker())
        return state.begin(worker, workers, next_epoch=self.next_epoch, resume=self.resume)

    def set_epoch(self, epoch: int, folder: Folder) -> None:
        """Make the next iteration run ``epoch`` from its start."""
        self.next_epoch = epoch
        self.resume = None
        self.current = None  # as the workers' run state forgets theirs
        self.run_state(folder, os.getpid()).update(next_epoch=epoch, resume=None)

    def resume_at(self, start: EpochStart, folder: Folder) -> None:
        """Make the next iteration start at ``start`` (a loaded state's place)."""
        self.resume = start
        self.next_epoch = start.epoch
        self.current = None  # as the workers' run state forgets theirs
        self.run_state(folder, os.getpid()).update(next_epoch=start.epoch, resume=start)

    def current_start(self, folder: Folder) -> EpochStart:
        """The epoch being read now and its starting point, as the rank process knows it."""
        from_workers = self.run_state(folder, os.getpid()).current()
        if from_workers is not None:
            return from_workers
        if self.current is not None:
            return self.current
        return self.resume or EpochStart(self.next_epoch)

    def once(self, info: tuple[int, int] | None, note: str, level: int, folder: Folder) -> int:
        """``level`` the first time this dataset says ``note`` in this run, DEBUG after."""
        if info is None:
            first = note not in self._said
            self._said.add(note)
        else:  # DataLoader workers are new copies each epoch: the run state remembers
            first = self.run_state(folder, self.rank_process_of_worker()).first_time(note)
        return level if first else logging.DEBUG

    def rank_process_of_worker(self) -> int:
        """The rank process this DataLoader worker reads for, whose run state it shares.

        Named explicitly (:attr:`rank_process`), else found from how the worker got this
        copy: unpickled here from the process that sent it (spawn, forkserver), or inherited
        from the parent (fork). Never the parent alone: a forkserver worker's parent is the
        fork server.
        """
        if self.rank_process is not None:
            return self.rank_process
        if self._received_by == os.getpid() and self._sent_by is not None:
            return self._sent_by
        return os.getppid()

    def run_state(self, folder: Folder, owner: int) -> RunState:
        """The run state of rank process ``owner`` for this dataset, in ``folder()``."""
        return RunState(folder(), owner, self.id)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sent_by"] = os.getpid()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._received_by = os.getpid()


def runs_folder(state_folder: str | None) -> str:
    """``runs/`` in the node-wide state folder, else (``None``) in the user's cache root.

    A local-only dataset's folder is the user's data, never written to; the cache root is
    made (or checked to be) this user's alone before run files go there.
    """
    if state_folder is None:
        state_folder = config.cache_root()
        ensure_private_folder(state_folder)
    return os.path.join(state_folder, "runs")
