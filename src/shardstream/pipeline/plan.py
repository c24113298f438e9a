"""The first stage: a worker's plan of the epoch as device batches of dataset-wide sample ids.

The plan is a flat array of ids in device batches of ``width`` samples (the last one maybe
short); ``read_batch`` is a one-batch plan. Its state is the number of batches handed on; the
stages after it read the rest of the plan from there (:meth:`Plan.rest`), the fetch stage to
look ahead over it. :class:`IdPlan` hands on one id a step (device batches of one sample, as
ints): ``ds[i]`` and a local source's iteration, read by the locate stage
(:mod:`~shardstream.pipeline.locate`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from shardstream.pipeline.stage import StageState

__all__ = ["IdPlan", "Plan"]


class Plan:
    """Device batches of ``width`` sample ids from a flat plan (a :class:`Stage`)."""

    def __init__(self, ids: NDArray[np.int64], width: int) -> None:
        self.ids = ids.reshape(-1)
        self.width = max(1, int(width))
        self._batch = 0

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


class IdPlan:
    """Ids one a step, each a device batch of one sample, as ints (a :class:`Stage`).

    ``next`` is the ids' own iterator's (no Python call a step), and iterating the plan
    iterates those ids from where it stands: a reader of one sample at a time pays for the
    sample, not the stage.

    Args:
        ids: The ids, in order (a ``range``, a list or a tuple).
    """

    __slots__ = ("_ids", "ids", "next")

    #: The next item; ``StopIteration`` at the end.
    next: Callable[[], int]

    def __init__(self, ids: range | list[int] | tuple[int, ...] = ()) -> None:
        self.ids = ids
        self.reset()

    def __iter__(self) -> Iterator[int]:
        return self._ids

    def state(self) -> StageState:
        """Where the stage stands: ``{"batch": k}``, the ids handed on."""
        return {"batch": len(self.ids) - operator.length_hint(self._ids)}

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        start = 0 if state is None else min(int(state["batch"]), len(self.ids))
        ids = iter(self.ids)
        ids.__setstate__(start)  # type: ignore[attr-defined]  # where a resumed plan starts
        self._ids = ids
        self.next = ids.__next__

    def close(self) -> None:
        """Nothing to let go of."""
