"""The locate stage of a one-id plan: each id's shard found, opened and read in this thread.

``ds[i]`` (:class:`~shardstream.StreamingDataset`, ``LocalDataset``, ``ParquetDataset``) and
``LocalDataset``'s iteration read a sample at a time: a plan of one id a step
(:class:`~shardstream.pipeline.plan.IdPlan`), each id located here by a ``bisect`` over the
shard starts, its shard opened, and the sample decoded by the shard view's ``get`` (the
format's decoder of one sample). A sample at a time needs no look-ahead, so nothing here runs
in a thread; what opens a shard is the caller's (a dataset's open shards, fetched through the
node's cache, or a local source's own).

:meth:`Locate.read` takes the plan of one id handed straight in: ``ds[i]`` builds no plan
object and makes one call (a read of one small sample costs little more than its decoding,
so each allocation and call would show). Iteration maps it over an :class:`IdPlan`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from shardstream.format.shard_view import ShardView
from shardstream.pipeline.plan import IdPlan
from shardstream.pipeline.stage import StageState

__all__ = ["Getter", "Locate"]

#: A shard view's ``get``: sample ``k`` of the shard as ``{column: value}``.
Getter = Callable[[int], dict[str, Any]]


class Locate:
    """The plan's ids located, their shards opened and each sample read, in this thread (a stage).

    Its items are sample dicts. Its state is its plan's: an id handed straight to :meth:`read`
    is not counted (random access has no place in a plan to resume from).

    Args:
        plan: The plan (one id a step).
        shard_starts: The first sample id of every shard, plus the total.
        getters: Each shard's ``get`` while it is open, else ``None``: the owner's list,
            kept up to date by ``open_shard`` and by the owner letting go of shards. A list
            of ``None`` (never filled) asks ``open_shard`` for every sample.
        open_shard: The open view of a shard, opened (and fetched) if need be.
    """

    __slots__ = ("_getters", "_open", "_starts", "plan")

    def __init__(
        self,
        plan: IdPlan,
        shard_starts: list[int],
        getters: list[Getter | None],
        open_shard: Callable[[int], ShardView],
    ) -> None:
        self.plan = plan
        self._starts = shard_starts
        self._getters = getters
        self._open = open_shard

    def next(self) -> dict[str, Any]:
        """The next item; ``StopIteration`` at the end."""
        return self.read(self.plan.next())

    def read(self, sample_id: int) -> dict[str, Any]:
        """The sample of the plan of one id, ``sample_id`` (``0 <= sample_id < total``)."""
        starts = self._starts
        shard = bisect_right(starts, sample_id) - 1  # a scalar: no array round trip
        get = self._getters[shard]
        if get is None:
            get = self._open(shard).get
        return get(sample_id - starts[shard])

    def state(self) -> StageState:
        """Where the stage stands: ``{"batch": k}``, the device batches handed on."""
        return self.plan.state()

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        self.plan.reset(state)

    def close(self) -> None:
        """Nothing to let go of: the open shards are their owner's."""
