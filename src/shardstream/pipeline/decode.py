"""The decode stages: a located batch as samples, as ids, or as columns.

Which stage decodes is the read policy's choice, made once per stream and epoch
(:meth:`~shardstream.pipeline.policy.ReadPolicy.route`):

- :class:`Samples`: per-sample iteration. A batch whose shards all read their samples as
  runs (small samples read in place) is read with one ``pread`` a run, then decoded sample by
  sample; any other sample is its view's ``get``.
- :class:`Ids`: a subclass's ``__getitem__`` makes each sample: the stage hands on ids, each
  one's shard fetched first.
- :class:`Columns`: batch mode. Each shard's samples of a batch are decoded in one call;
  batches of small samples from several shards are decoded several at once; shuffled groups
  of mapped shards are read from the files (ahead, in a thread) once the open shards pass the
  policy's ``mapped_read_bytes``. On a route that hands batches over by id, a batch of shards
  another process reads as cheaply is handed on as its ids, not decoded.

What the data decides stays with the data: a batch whose shards disagree on the columns
comes as sample dicts, and samples read in order are read from the mappings.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.format.mds_file import SampleFile, SampleRuns
from shardstream.format.shard_view import ShardView
from shardstream.pipeline.batch_assembly import Gather, LocatedBatch, decode_rows
from shardstream.pipeline.column_batch import BatchRefs, ColumnBatch
from shardstream.pipeline.fetch import Fetch
from shardstream.pipeline.open_shards import OpenShards
from shardstream.pipeline.policy import ReadPolicy, Route
from shardstream.pipeline.read_ahead import GroupReads
from shardstream.pipeline.stage import StageState, Stepped
from shardstream.sampling.distinct import distinct_inverse

__all__ = ["Batch", "Columns", "Ids", "Samples", "file_runs"]

#: What :class:`Columns` hands on: a device batch as columns, as sample dicts (its shards
#: disagree on the columns), or as its sample ids (for the loader's process to read).
Batch = ColumnBatch | list[dict[str, Any]] | BatchRefs


class _Decode(Stepped[Any]):
    """A stage over the fetch stage; its state is the fetch stage's."""

    def __init__(self, fetch: Fetch) -> None:
        super().__init__()
        self.fetch = fetch

    def reset(self, state: StageState | None = None) -> None:
        super().reset(state)
        self.fetch.reset(state)

    def close(self) -> None:
        super().close()
        self.fetch.close()


class Samples(_Decode):
    """Each batch's samples, as a list of sample dicts in batch order (a stage)."""

    def _run(self, start: int) -> Iterator[list[dict[str, Any]]]:
        self.fetch.reset({"batch": start})
        for shards, local, views in self.fetch:
            runs = _batch_runs(shards, local, views)
            if runs is not None:
                yield list(runs.samples(runs.read()))
                continue
            getters = {shard: view.get for shard, view in views.items()}
            yield [getters[shard](index) for shard, index in zip(shards, local, strict=True)]


class Ids(_Decode):
    """Each batch's sample ids, their shards fetched (and read ahead) first (a stage)."""

    def __init__(self, fetch: Fetch, shard_starts: Sequence[int]) -> None:
        super().__init__(fetch)
        self._starts = shard_starts

    def _run(self, start: int) -> Iterator[list[int]]:
        self.fetch.reset({"batch": start})
        starts = self._starts
        for shards, local, _ in self.fetch:
            yield [starts[shard] + index for shard, index in zip(shards, local, strict=True)]


class Columns(_Decode):
    """Each batch as columns (a stage); see the module's docstring.

    Args:
        fetch: The fetch stage.
        opened: The reader's open shards (their bytes, their samples' mean size).
        shard_starts: The first dataset-wide sample id of every shard, plus the total.
        policy: The read policy.
        route: The stages the policy picked for this epoch.
    """

    def __init__(
        self,
        fetch: Fetch,
        opened: OpenShards,
        shard_starts: NDArray[np.int64],
        policy: ReadPolicy,
        route: Route,
    ) -> None:
        super().__init__(fetch)
        self._opened = opened
        self._starts = shard_starts
        self._policy = policy
        self.route = route

    def _run(self, start: int) -> Iterator[Batch]:
        self.fetch.reset({"batch": start})
        route = self.route
        self._opened.read_whole_in_place(route.read_whole)
        raw_views = route.hand_over
        pending: list[LocatedBatch] = []
        pending_names: set[tuple[str, ...]] = set()  # the one schema of the pending batches
        rows = route.first_rows  # batches decoded together (the first: time to first batch)
        later_rows: int | None = None  # judged once, from the first batch's shards
        reads = GroupReads(ahead=route.read_ahead)
        maker = self._opened.gatherer
        gather = maker(self._policy.gather_min_groups) if route.gather and maker else None
        first = True
        last: dict[int, ShardView] = {}  # the views ``names`` was judged from
        names: set[tuple[str, ...]] = set()
        try:
            for batch in self.fetch:
                views = batch.views
                if route.by_id and not any(view.in_memory for view in views.values()):
                    yield from self._group(pending, reads, raw_views, gather)
                    yield from reads.finish()
                    pending = []
                    yield BatchRefs(self._starts[batch.shard_array] + batch.local_array)
                    continue
                if views != last:  # a shuffled table's batches name the same views
                    names = {tuple(view.names) for view in views.values()}
                    last = views
                if len(names) != 1:
                    yield from self._group(pending, reads, raw_views, gather)
                    yield from reads.finish()
                    pending = []
                    pairs = zip(batch.shards, batch.local, strict=True)
                    yield [views[shard].get(index) for shard, index in pairs]
                    continue
                if pending and pending_names != names:
                    yield from self._group(pending, reads, raw_views, gather)
                    pending = []
                pending.append(batch)
                pending_names = names
                if len(pending) >= rows:
                    yield from self._group(pending, reads, raw_views, gather, wait=first)
                    pending, first = [], False
                    if later_rows is None:
                        later_rows = self._rows_per_decode(views, len(batch))
                    rows = later_rows
            yield from self._group(pending, reads, raw_views, gather)
            yield from reads.finish()
        finally:
            reads.close()

    def _group(
        self,
        rows: list[LocatedBatch],
        reads: GroupReads,
        raw_views: bool,
        gather: Gather | None,
        *,
        wait: bool = False,
    ) -> Iterator[ColumnBatch]:
        """Decode batches of one schema; yield them, and any read ahead before, in order.

        Shuffled batches of mapped shards are read from their files (:func:`file_runs`) once
        the policy says so: by ``reads``, ahead (their batches come out with the next group)
        unless ``wait``.
        """
        runs = None
        if (
            rows
            and self.route.file_reads
            and (self._policy.reads_files(self._opened.held) or _all_read_runs(rows))
        ):
            runs = file_runs(rows, self._policy)
        if runs is None:
            yield from reads.finish()
            yield from decode_rows(rows, raw_views, gather)
        else:
            yield from reads.start(runs, [len(row.shards) for row in rows], wait=wait)

    def _rows_per_decode(self, views: dict[int, ShardView], width: int) -> int:
        """How many batches to decode together, judged from one batch's shards."""
        if len(views) < 2 or not all(view.grouped_decode for view in views.values()):
            return 1  # one shard's samples are decoded in one call already
        mean = self._opened.mean_sample_bytes(list(views))
        return self._policy.rows_per_decode(mean, len(views), width)


def file_runs(rows: list[LocatedBatch], policy: ReadPolicy) -> SampleRuns | None:
    """Shuffled batches of mapped MDS shards as reads from their files; else ``None``.

    A mapped page counts in the process's resident memory until it is unmapped, and a
    shuffled batch reads scattered samples of every shard of the shuffle's window. Samples
    read in order (not shuffled: the policy's ``in_order``) are read from the mappings: each
    shard's pages go with it once it is done.
    """
    views: dict[int, ShardView] = {}
    for row in rows:
        views.update(row.views)
    files = _sample_files(views)
    if files is None:
        return None
    shards = np.concatenate([row.shard_array for row in rows])
    local = np.concatenate([row.local_array for row in rows])
    unique, which = distinct_inverse(shards)
    lowest = np.full(len(unique), np.iinfo(np.int64).max)
    highest = np.full(len(unique), -1)
    np.minimum.at(lowest, which, local)
    np.maximum.at(highest, which, local)
    counts = np.bincount(which, minlength=len(unique))
    if bool(policy.in_order(highest - lowest, counts).all()):
        return None  # in order: read from the mappings
    return SampleRuns([files[s] for s in unique.tolist()], which, local)


def _batch_runs(
    shards: Sequence[int], local: Sequence[int], views: dict[int, ShardView]
) -> SampleRuns | None:
    """One batch's samples as reads of their files, when every shard reads runs; else ``None``."""
    if not shards or not all(view.reads_runs for view in views.values()):
        return None
    files = _sample_files(views)
    if files is None:
        return None
    unique, which = distinct_inverse(np.asarray(shards, np.int64))
    picked = np.asarray(local, np.int64)
    return SampleRuns([files[s] for s in unique.tolist()], which.astype(np.int64), picked)


def _all_read_runs(rows: list[LocatedBatch]) -> bool:
    """Whether every shard of the batches reads its shuffled samples as runs of its file."""
    return all(view.reads_runs for row in rows for view in row.views.values())


def _sample_files(views: dict[int, ShardView]) -> dict[int, SampleFile] | None:
    """Each view's file for reading runs of samples; ``None`` unless all have one, one schema."""
    files = {}
    for shard, view in views.items():
        file = view.sample_file()
        if file is None:
            return None
        files[shard] = file
    schemas = {tuple(file.schema.columns.items()) for file in files.values()}
    return files if len(schemas) == 1 else None
