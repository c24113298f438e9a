"""The first stage: a worker's plan of the epoch as device batches of dataset-wide sample ids.

The plan is a flat array of ids in device batches of ``width`` samples (the last one maybe
short). ``ds[i]`` and ``read_batch`` are one-batch plans. Its state is the number of batches
handed on; the stages after it read the rest of the plan from there (:meth:`Plan.rest`), the
fetch stage to look ahead over it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shardstream.pipeline.stage import StageState

__all__ = ["Plan"]


class Plan:
    """Device batches of ``width`` sample ids from a flat plan (a :class:`Stage`)."""

    def __init__(self, ids: NDArray[np.int64], width: int) -> None:
        self.ids = ids.reshape(-1)
        self.width = max(1, int(width))
        self._batch = 0

    @classmethod
    def one(cls, sample_id: int) -> Plan:
        """The plan of one sample (``ds[i]``, ``get``)."""
        return cls(np.array([sample_id], np.int64), 1)

    @property
    def batches(self) -> int:
        """Device batches in the whole plan."""
        return -(-len(self.ids) // self.width)

    def rest(self) -> NDArray[np.int64]:
        """The ids from the current batch on."""
        return self.ids[self._batch * self.width :]

    def next(self) -> NDArray[np.int64]:
        """The next item; ``StopIteration`` at the end."""
        start = self._batch * self.width
        if start >= len(self.ids):
            raise StopIteration
        self._batch += 1
        return self.ids[start : start + self.width]

    def skip(self, batches: int) -> None:
        """Hand on ``batches`` batches without reading them (a later stage read the rest)."""
        self._batch = min(self._batch + batches, self.batches)

    def state(self) -> StageState:
        """Where the stage stands: ``{"batch": k}``, the device batches handed on."""
        return {"batch": self._batch}

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        self._batch = 0 if state is None else min(int(state["batch"]), self.batches)

    def close(self) -> None:
        """Nothing to let go of."""
