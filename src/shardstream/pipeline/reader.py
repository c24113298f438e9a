"""The reading entrances of a dataset, each driving the pipeline's stages.

A :class:`SampleReader` is made once per process. Each entrance builds its pipeline from the
stages of this package, with the stages the read policy picks for the epoch
(:meth:`~shardstream.pipeline.policy.ReadPolicy.route`), and drives it:

- :meth:`SampleReader.samples`: plan -> fetch -> decode as samples;
- :meth:`SampleReader.ids`: plan -> fetch -> ids (a subclass's ``__getitem__`` decodes);
- :meth:`SampleReader.columns`: plan -> fetch -> decode as columns, and
  :meth:`SampleReader.batches` -> hand over, in a DataLoader worker;
- :meth:`SampleReader.read_batch`: the loader's read of a batch handed over by id;
- :attr:`SampleReader.get`: a one-id plan -> locate -> decode, in the caller's thread (a
  sample at a time needs no look-ahead: :mod:`~shardstream.pipeline.locate`).

Whatever the route, the samples are the same, in the same order
(``tests/property/test_read_routes.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.cache import ShardCache
from shardstream.pipeline.column_batch import ColumnBatch
from shardstream.pipeline.decode import Batch, Columns, Ids, Samples
from shardstream.pipeline.fetch import Fetch
from shardstream.pipeline.handover import HandOver, ReadByIds
from shardstream.pipeline.locate import Getter, Locate
from shardstream.pipeline.open_shards import OpenShards, ShardSource
from shardstream.pipeline.plan import IdPlan, Plan
from shardstream.pipeline.policy import ReadPolicy, Route
from shardstream.pipeline.stage import Stage, StageState, drain
from shardstream.sampling.distinct import distinct

__all__ = ["Batch", "SampleReader"]


class SampleReader:
    """Decodes samples by dataset-wide id, making their shards present first.

    Args:
        datasets: One source per stream, over the stream's local folder.
        shard_starts: The first dataset-wide sample id of every shard, plus the total.
        stream_first_shard: The first dataset-wide shard of every stream, plus the total.
        cache: The node's shard cache.
        policy: The read policy.
    """

    def __init__(
        self,
        datasets: Sequence[ShardSource],
        shard_starts: NDArray[np.int64],
        stream_first_shard: Sequence[int],
        cache: ShardCache,
        policy: ReadPolicy,
    ) -> None:
        self.policy = policy
        self.shard_starts = shard_starts
        self._starts = shard_starts.tolist()
        self.cache = cache
        self.open = OpenShards(datasets, stream_first_shard, cache, policy)
        self._by_ids = ReadByIds(self.open, shard_starts, policy)
        # No getter is kept here: each sample asks the open shards, which fetch, mark and keep
        # the least recently used order.
        getters: list[Getter | None] = [None] * (len(self._starts) - 1)
        #: The locate stage of :attr:`get`'s one-id plans.
        self.locate = Locate(IdPlan(), self._starts, getters, self.open.view)
        self.get = self.locate.read

    #: ``get(sample_id)`` decodes one sample by dataset-wide id (``0 <= sample_id < total``),
    #: fetching its shard: a one-id plan, located (its shard fetched and opened) and decoded
    #: in this thread (:meth:`Locate.read`).
    get: Callable[[int], dict[str, Any]]

    def fetch(
        self, ids: NDArray[np.int64], batch_size: int, *, predownload: int, ranges: bool = False
    ) -> Fetch:
        """The plan and fetch stages over ``ids`` (device batches of ``batch_size``).

        ``ranges``: a cold first batch is read by range requests (:class:`Fetch`).
        """
        plan = Plan(ids, batch_size)
        return Fetch(
            plan, self.shard_starts, self.open, self.cache, self.policy, predownload,
            ranges=ranges,
        )  # fmt: skip

    def route(
        self,
        decode: Any,
        ids: NDArray[np.int64],
        batch_size: int,
        *,
        for_worker: bool = False,
        state: StageState | None = None,
    ) -> Route:
        """The stages the policy picks for an epoch of ``ids`` read through ``decode``.

        The size of the epoch's samples is judged from its first batch's shards (from their
        index entries: nothing is read), so that picking costs the first batch nothing; a
        pipeline reset to ``state`` starts at that batch.
        """
        mean = 0.0
        at = 0 if state is None else state["batch"] * batch_size
        if decode == "columns" and for_worker and ids[at:].size:
            first = np.searchsorted(self.shard_starts, ids[at : at + batch_size], side="right") - 1
            mean = self.open.mean_sample_bytes(distinct(first).tolist())
        return self.policy.route(
            decode, hand_over=for_worker, mean_sample_bytes=mean, width=batch_size,
            gathers=self.open.gatherer is not None,
        )  # fmt: skip

    def samples(
        self,
        ids: NDArray[np.int64],
        batch_size: int,
        *,
        predownload: int,
        state: StageState | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield the samples of ``ids`` (device batches of ``batch_size``, in order) one by one.

        ``state``: the pipeline is reset there (a resumed epoch's first batch not read).
        """
        stage = Samples(self.fetch(ids, batch_size, predownload=predownload, ranges=True))
        stage.reset(state)
        for batch in drain(stage):
            yield from batch

    def ids(
        self,
        ids: NDArray[np.int64],
        batch_size: int,
        *,
        predownload: int,
        state: StageState | None = None,
    ) -> Iterator[int]:
        """Yield ``ids`` one by one, each one's shard fetched (and read ahead) first."""
        stage = Ids(self.fetch(ids, batch_size, predownload=predownload), self._starts)
        stage.reset(state)
        for batch in drain(stage):
            yield from batch

    def columns_stage(
        self,
        ids: NDArray[np.int64],
        batch_size: int,
        *,
        predownload: int,
        for_worker: bool = False,
        state: StageState | None = None,
    ) -> Stage[Batch]:
        """The pipeline of :meth:`columns` (with the hand-over stage, ``for_worker``).

        ``state``: the pipeline is reset there (a resumed epoch's first batch not read).
        """
        route = self.route("columns", ids, batch_size, for_worker=for_worker, state=state)
        fetch = self.fetch(ids, batch_size, predownload=predownload, ranges=True)
        columns = Columns(fetch, self.open, self.shard_starts, self.policy, route)
        stage: Stage[Batch] = HandOver(columns, self.policy) if for_worker else columns
        stage.reset(state)
        return stage

    def columns(
        self,
        ids: NDArray[np.int64],
        batch_size: int,
        *,
        predownload: int,
        for_worker: bool = False,
    ) -> Iterator[Batch]:
        """Yield each device batch of ``ids`` (of ``batch_size``, the last maybe short) as columns.

        A batch whose shards disagree on the columns (streams of other schemas) comes as a
        list of sample dicts instead, for the caller to collate as it would any samples.
        ``for_worker``: the batches leave a DataLoader worker. ``bytes`` columns of MDS shards
        may hold memoryviews of the shards, which the caller must copy or drop before asking
        for the next batch (:meth:`batches` does); a batch the route hands over by id comes as
        its ids (:class:`~shardstream.pipeline.column_batch.BatchRefs`), its shards present in
        the cache, for :meth:`read_batch`.
        """
        route = self.route("columns", ids, batch_size, for_worker=for_worker)
        fetch = self.fetch(ids, batch_size, predownload=predownload)
        return drain(Columns(fetch, self.open, self.shard_starts, self.policy, route))

    def batches(
        self,
        ids: NDArray[np.int64],
        batch_size: int,
        *,
        predownload: int,
        for_worker: bool,
        state: StageState | None = None,
    ) -> Iterator[Batch]:
        """:meth:`columns`, handed over (ready to leave the worker) when ``for_worker``."""
        stage = self.columns_stage(
            ids, batch_size, predownload=predownload, for_worker=for_worker, state=state
        )
        return drain(stage)

    def hold_for_workers(self) -> None:
        """Read and keep what DataLoader workers forked from here would each read whole.

        The open stage's ``OpenShards.hold_for_workers`` (the read policy's ``inherit_whole``).
        """
        self.open.hold_for_workers()

    def before_fork(self) -> None:
        """Let go of held shards whose files changed, before DataLoader workers fork."""
        self.open.drop_changed()

    def read_batch(self, ids: NDArray[np.int64]) -> ColumnBatch | list[dict[str, Any]]:
        """The device batch of ``ids`` (a ``BatchRefs``), decoded as :meth:`columns` would."""
        return self._by_ids.read(ids)
