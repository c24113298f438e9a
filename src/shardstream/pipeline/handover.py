"""The hand-over stage and its pair: batches leaving a DataLoader worker, read back by id.

On the worker's side, :class:`HandOver` makes each batch of the decode stage ready to be
pickled: large ``bytes`` columns and stacked arrays packed into in-memory files, views of
shards copied (:func:`~shardstream.pipeline.column_batch.for_transfer`); a batch the route
hands over by id passes as its ids (:class:`~shardstream.pipeline.column_batch.BatchRefs`).
On the loader's side, :class:`ReadByIds` reads such a batch with the loader's own reader,
as the decode stage would have: a one-batch plan, located, opened, decoded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.pipeline.batch_assembly import LocatedBatch, decode_columns
from shardstream.pipeline.column_batch import ColumnBatch, for_transfer
from shardstream.pipeline.decode import Batch, Columns, file_runs
from shardstream.pipeline.fetch import locate
from shardstream.pipeline.open_shards import OpenShards
from shardstream.pipeline.policy import ReadPolicy
from shardstream.pipeline.stage import StageState

__all__ = ["HandOver", "ReadByIds"]


class HandOver:
    """The batches of ``columns`` ready to leave a worker (a stage; its state is theirs)."""

    def __init__(self, columns: Columns, policy: ReadPolicy) -> None:
        self.columns = columns
        self._policy = policy

    def next(self) -> Batch:
        """The next item; ``StopIteration`` at the end."""
        batch = self.columns.next()
        return for_transfer(batch, self._policy) if isinstance(batch, ColumnBatch) else batch

    def state(self) -> StageState:
        """Where the stage stands: ``{"batch": k}``, the device batches handed on."""
        return self.columns.state()

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        self.columns.reset(state)

    def close(self) -> None:
        """Let go of threads and files; the stage may be reset again after."""
        self.columns.close()


class ReadByIds:
    """The loader's read stage for batches handed over by id.

    This process reads every worker's batches, so it maps as little as it can: a shuffled
    batch is read from the shard files (mapping nothing), and the pages of samples read in
    order are let go at once (no later batch of the epoch reads them). Its shards are opened
    (fetched again if evicted meanwhile) by this process's open shards.
    """

    def __init__(
        self, opened: OpenShards, shard_starts: NDArray[np.int64], policy: ReadPolicy
    ) -> None:
        self._opened = opened
        self._starts = shard_starts
        self._policy = policy

    def read(self, ids: NDArray[np.int64]) -> ColumnBatch | list[dict[str, Any]]:
        """The device batch of ``ids``, decoded as the decode stage would."""
        shards, local, _, _ = locate(self._starts, ids.reshape(-1))
        row_shards, row_local = shards.tolist(), local.tolist()
        views = {shard: self._opened.view(shard) for shard in dict.fromkeys(row_shards)}
        if len({tuple(view.names) for view in views.values()}) != 1:
            pairs = zip(row_shards, row_local, strict=True)
            return [views[shard].get(index) for shard, index in pairs]
        runs = None
        if not self._policy.zero_copy:
            runs = file_runs([LocatedBatch(row_shards, row_local, views)], self._policy)
        if runs is not None:
            return ColumnBatch(runs.names, list(runs.decode(runs.read())))
        batch = decode_columns(row_shards, row_local, views, raw_views=False)
        for shard in dict.fromkeys(row_shards):
            picked = local[shards == shard]
            views[shard].let_go(int(picked.min()), int(picked.max()) + 1)
        return batch
