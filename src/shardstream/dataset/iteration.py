"""Reading a worker's planned device batches in order, fetching shards ahead of the reader.

The plan is a flat array of dataset-wide sample ids in device batches of a given size (the
last one maybe short). Before a
batch is read, every shard of the batches within ``predownload`` samples is handed to a small
thread pool that makes it present in the node's cache (the cache itself bounds the node's
concurrent downloads); the reader waits only for the shards of the batch at hand. Then the
batch is decoded shard by shard, through the shard-view protocol
(:class:`~shardstream.format.shard_view.ShardView`): one call per sample for
:meth:`SampleReader.samples`, or one call per shard for whole columns with
:meth:`SampleReader.columns`. Which way the bytes travel is the read policy's choice
(:class:`~shardstream.format.read_policy.ReadPolicy`); every choice gives the same batches.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.cache import ShardCache
from shardstream.dataset.batch_assembly import LocatedBatch, decode_columns, decode_rows
from shardstream.dataset.column_batch import BatchRefs, ColumnBatch
from shardstream.dataset.open_shards import OpenShards
from shardstream.dataset.read_ahead import GroupReads
from shardstream.dataset.stream_data import StreamData
from shardstream.format.mds_file import SampleFile, SampleRuns
from shardstream.format.read_policy import ReadPolicy
from shardstream.format.shard_view import ShardView
from shardstream.sampling.distinct import first_occurrences
from shardstream.storage.cancel import LET_GO_S, CancelScope

__all__ = ["SampleReader"]

#: What :meth:`SampleReader.columns` yields: a device batch as columns, as sample dicts (its
#: shards disagree on the columns), or as its sample ids (for the loader's process to read).
Batch = ColumnBatch | list[dict[str, Any]] | BatchRefs


class SampleReader:
    """Decodes samples by dataset-wide id, making their shards present first.

    Args:
        datasets: One reader per stream, over the stream's local folder.
        shard_starts: The first dataset-wide sample id of every shard, plus the total.
        stream_first_shard: The first dataset-wide shard of every stream, plus the total.
        cache: The node's shard cache.
        policy: The read policy.
    """

    def __init__(
        self,
        datasets: Sequence[StreamData],
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

    def get(self, sample_id: int) -> dict[str, Any]:
        """Decode one sample by dataset-wide id, fetching its shard if needed."""
        starts = self._starts
        shard = bisect.bisect_right(starts, sample_id) - 1  # a scalar: no array round trip
        return self.open.view(shard).get(sample_id - starts[shard])

    def samples(
        self, ids: NDArray[np.int64], batch_size: int, *, predownload: int
    ) -> Iterator[dict[str, Any]]:
        """Yield the samples of ``ids`` (device batches of ``batch_size``, in order) one by one.

        A batch whose shards all read their samples as runs (small samples read in place:
        ``ShardView.reads_runs``) is read first, one ``pread`` a run of adjacent samples, then
        decoded sample by sample; any other sample is its view's ``get``.
        """
        for shards, local, views in self._walk(ids, batch_size, predownload, ranges=True):
            runs = _batch_runs(shards, local, views)
            if runs is not None:
                yield from runs.samples(runs.read())
                continue
            getters = {shard: view.get for shard, view in views.items()}
            for shard, index in zip(shards, local, strict=True):
                yield getters[shard](index)

    def ids(self, ids: NDArray[np.int64], batch_size: int, *, predownload: int) -> Iterator[int]:
        """Yield ``ids`` one by one, each one's shard fetched (and read ahead) first."""
        for shards, local, _ in self._walk(ids, batch_size, predownload):
            for shard, index in zip(shards, local, strict=True):
                yield self._starts[shard] + index

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
        for the next batch; a batch the policy hands over by id (``hands_over_ids``) comes as
        its ids (:class:`BatchRefs`), its shards present in the cache, for
        :meth:`read_batch`.
        """
        policy = self.policy
        pending: list[LocatedBatch] = []
        pending_names: set[tuple[str, ...]] = set()  # the one schema of the pending batches
        rows = 1  # batches decoded together; the first one always alone (time to first batch)
        # Shuffled groups of mapped shards are read from the files, the next group in a
        # thread while this one is decoded (where the policy reads ahead).
        reads = GroupReads(ahead=policy.read_ahead)
        first = True
        try:
            for batch in self._walk(ids, batch_size, predownload, ranges=True):
                views = batch.views
                if for_worker and self._by_id(views, len(batch.shards)):
                    yield from self._group(pending, reads, for_worker)
                    yield from reads.finish()
                    pending = []
                    yield BatchRefs(
                        self.shard_starts[batch.shards] + np.asarray(batch.local, dtype=np.int64)
                    )
                    continue
                names = {tuple(view.names) for view in views.values()}
                if len(names) != 1:
                    yield from self._group(pending, reads, for_worker)
                    yield from reads.finish()
                    pending = []
                    yield [
                        views[shard].get(index)
                        for shard, index in zip(batch.shards, batch.local, strict=True)
                    ]
                    continue
                if pending and pending_names != names:
                    yield from self._group(pending, reads, for_worker)
                    pending = []
                pending.append(batch)
                pending_names = names
                if len(pending) >= rows:
                    yield from self._group(pending, reads, for_worker, wait=first)
                    pending, first = [], False
                    rows = self._rows_per_decode(views, len(batch.shards))
            yield from self._group(pending, reads, for_worker)
            yield from reads.finish()
        finally:
            reads.close()

    def read_batch(self, ids: NDArray[np.int64]) -> ColumnBatch | list[dict[str, Any]]:
        """The device batch of ``ids`` (a :class:`BatchRefs`), decoded as :meth:`columns` would.

        Its shards are opened (fetched again if evicted meanwhile) by this process's reader.
        This process reads every worker's batches, so it maps as little as it can: a shuffled
        batch is read from the shard files (mapping nothing), and the pages of samples read in
        order are let go at once (no later batch of the epoch reads them).
        """
        shards, local, _, _ = self._locate(ids.reshape(-1))
        row_shards, row_local = shards.tolist(), local.tolist()
        views = {shard: self.open.view(shard) for shard in dict.fromkeys(row_shards)}
        if len({tuple(view.names) for view in views.values()}) != 1:
            pairs = zip(row_shards, row_local, strict=True)
            return [views[shard].get(index) for shard, index in pairs]
        runs = self._file_runs([LocatedBatch(row_shards, row_local, views)])
        if runs is not None:
            return ColumnBatch(runs.names, list(runs.decode(runs.read())))
        batch = decode_columns(row_shards, row_local, views, raw_views=False)
        for shard in dict.fromkeys(row_shards):
            picked = local[shards == shard]
            views[shard].let_go(int(picked.min()), int(picked.max()) + 1)
        return batch

    def _group(
        self, rows: list[LocatedBatch], reads: GroupReads, raw_views: bool, *, wait: bool = False
    ) -> Iterator[ColumnBatch]:
        """Decode batches of one schema; yield them, and any read ahead before, in order.

        Shuffled batches of mapped shards are read from their files (:meth:`_file_runs`) once
        the policy says so: by ``reads``, ahead (their batches come out with the next group)
        unless ``wait``.
        """
        runs = None
        if rows and (self.policy.reads_files(self.open.held) or _all_read_runs(rows)):
            runs = self._file_runs(rows)
        if runs is None:
            yield from reads.finish()
            yield from decode_rows(rows, raw_views)
        else:
            yield from reads.start(runs, [len(row.shards) for row in rows], wait=wait)

    def _file_runs(self, rows: list[LocatedBatch]) -> SampleRuns | None:
        """Shuffled batches of mapped MDS shards as reads from their files; else ``None``.

        A mapped page counts in the process's resident memory until it is unmapped, and a
        shuffled batch reads scattered samples of every shard of the shuffle's window. Samples
        read in order (not shuffled) are read from the mappings: each shard's pages go with
        it once it is done.
        """
        if self.policy.zero_copy:
            return None  # the caller asked for views of the mappings
        views: dict[int, ShardView] = {}
        for row in rows:
            views.update(row.views)
        files = _sample_files(views)
        if files is None:
            return None
        shards = np.fromiter(itertools.chain.from_iterable(row.shards for row in rows), np.int64)
        local = np.fromiter(itertools.chain.from_iterable(row.local for row in rows), np.int64)
        unique, which = np.unique(shards, return_inverse=True)
        lowest = np.full(len(unique), np.iinfo(np.int64).max)
        highest = np.full(len(unique), -1)
        np.minimum.at(lowest, which, local)
        np.maximum.at(highest, which, local)
        if bool((highest - lowest < 2 * np.bincount(which, minlength=len(unique))).all()):
            return None  # in order: read from the mappings
        return SampleRuns([files[s] for s in unique.tolist()], which, local)

    def _by_id(self, views: dict[int, ShardView], width: int) -> bool:
        """Whether a worker hands this batch over as its ids, for the loader to read.

        Only shards another process reads as cheaply (mapped or read with ``pread`` from the
        node's cache): a shard read into memory whole would have to be read again.
        """
        if any(view.in_memory for view in views.values()):
            return False
        return self.policy.hands_over_ids(self.open.mean_sample_bytes(list(views)), width)

    def _rows_per_decode(self, views: dict[int, ShardView], width: int) -> int:
        """How many batches to decode together, judged from one batch's shards."""
        if len(views) < 2 or not all(view.grouped_decode for view in views.values()):
            return 1  # one shard's samples are decoded in one call already
        mean = self.open.mean_sample_bytes(list(views))
        return self.policy.rows_per_decode(mean, len(views), width)

    def _walk(
        self, ids: NDArray[np.int64], width: int, predownload: int, *, ranges: bool = False
    ) -> Iterator[LocatedBatch]:
        """Each batch's shards and in-shard indices, with the views of its shards open.

        With ``ranges`` (and the policy's ``first_batch_ranges``), the first batch's samples
        of shards not yet in the cache are read by range requests, and those shards are
        fetched whole behind it (:mod:`shardstream.cache.sample_ranges`).
        """
        if ids.size == 0:
            return
        opened = self.open
        opened.new_epoch()
        threads = self.policy.fetch_threads
        # The fetch threads are given up on, never joined, when the walk ends (a reader that
        # stops early must not wait for fetches ahead that wait on a silent server): their
        # waits end with the scope (shardstream.storage.cancel), and with them their fetches,
        # which are given a moment to clear their records and temporaries.
        pool = ThreadPoolExecutor(threads, thread_name_prefix="shardstream-fetch")
        scope = CancelScope()
        ahead = _LookAhead(pool, scope, opened, self.cache)
        try:
            # The first batch is located alone: it need not wait for the search and sort
            # over every sample of the plan (time to first batch); its look-ahead starts
            # once it is out.
            for first, part in ((True, ids[:width]), (False, ids[width:])):
                if not len(part):
                    break
                shards, local, needed, needed_at = self._locate(part)
                rows = -(-len(part) // width)
                done_after: dict[int, list[int]] = {}
                if not first:  # the rest of the plan: let go of each shard after its last use
                    done_after = _last_uses(shards, width, before=rows * 7 // 8)
                    wanted = set(needed)
                    for shard in [shard for shard in opened.shards() if shard not in wanted]:
                        opened.release(shard)  # the first batch's, or an earlier epoch's
                ranged: dict[int, ShardView] = {}
                if first and ranges and self.policy.first_batch_ranges:
                    ranged = opened.read_by_ranges(shards.tolist(), local.tolist(), pool)
                ahead.plan(needed, needed_at, whole_later=ranged.keys())
                for row in range(rows):
                    start, stop = row * width, min((row + 1) * width, len(part))
                    ahead.submit(stop, stop + (0 if first else predownload))
                    row_shards = shards[start:stop].tolist()
                    views = {
                        shard: ranged[shard] if shard in ranged else ahead.take(shard)
                        for shard in dict.fromkeys(row_shards)
                    }
                    yield LocatedBatch(row_shards, local[start:stop].tolist(), views)
                    for shard in done_after.get(row, ()):
                        opened.release(shard)
        finally:
            scope.cancel()
            ahead.cancel()
            pool.shutdown(wait=False, cancel_futures=True)

    def _locate(
        self, batches: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], list[int], list[int]]:
        """The shard and in-shard index of every sample, and the shards in order of first need.

        Returns:
            ``(shards, local, needed, needed_at)``: arrays shaped as ``batches``, then each
            distinct shard once with the flat position where it is first needed, by position.
        """
        shards = np.searchsorted(self.shard_starts, batches, side="right") - 1
        local = batches - self.shard_starts[shards]
        unique, first = first_occurrences(shards.reshape(-1))
        order = np.argsort(first, kind="stable")
        return shards, local, unique[order].tolist(), first[order].tolist()


class _LookAhead:
    """The fetch threads' tasks: shards wanted now are fetched and opened, later ones fetched."""

    def __init__(
        self, pool: ThreadPoolExecutor, scope: CancelScope, opened: OpenShards, cache: ShardCache
    ) -> None:
        self._pool = pool
        self._scope = scope
        self._opened = opened
        self._cache = cache
        self._pending: dict[int, Future[Any]] = {}
        self._needed: list[int] = []
        self._needed_at: list[int] = []
        self._next = 0
        self._whole_later: set[int] = set()

    def plan(
        self, needed: list[int], needed_at: list[int], whole_later: Iterable[int] = ()
    ) -> None:
        """The shards of a part of the plan, in order of first need, with where each is.

        ``whole_later``: shards whose samples at hand were read otherwise (by ranges): not
        fetched for this part, so that the batch goes out first; the next part's look-ahead
        fetches them where it needs them.
        """
        self._needed, self._needed_at, self._next = needed, needed_at, 0
        self._whole_later = set(whole_later)

    def submit(self, current: int, horizon: int) -> None:
        """Start on every shard first needed before sample ``horizon`` of the part.

        Shards needed before sample ``current`` (the batch at hand) are fetched and opened in
        a thread, so that the reader does not open many tiny shards one after another.
        """
        opened, pending = self._opened, self._pending
        while self._next < len(self._needed) and self._needed_at[self._next] < horizon:
            shard = self._needed[self._next]
            if shard not in opened and shard not in pending and shard not in self._whole_later:
                if self._needed_at[self._next] < current:
                    pending[shard] = self._pool.submit(self._scope.run, opened.open_in_pool, shard)
                elif not self._cache.is_present(shard):  # a stat, not a task
                    pending[shard] = self._pool.submit(self._scope.run, opened.fetch_in_pool, shard)
            self._next += 1

    def take(self, shard: int) -> ShardView:
        """The open view of ``shard``: opened by a thread, kept open, or opened now."""
        opened = self._opened
        future = self._pending.pop(shard, None)
        view = None if future is None else future.result()
        view = opened.view(shard) if view is None else opened.keep(shard, view)
        if not opened.marked(shard):  # open since an earlier epoch
            opened.mark(shard)
        return view

    def cancel(self) -> None:
        """Cancel the tasks not started; give those running :data:`LET_GO_S` to let go."""
        running = [future for future in self._pending.values() if not future.cancel()]
        wait(running, timeout=LET_GO_S)


def _batch_runs(
    shards: Sequence[int], local: Sequence[int], views: dict[int, ShardView]
) -> SampleRuns | None:
    """One batch's samples as reads of their files, when every shard reads runs; else ``None``."""
    if not shards or not all(view.reads_runs for view in views.values()):
        return None
    files = _sample_files(views)
    if files is None:
        return None
    unique, which = np.unique(np.asarray(shards, np.int64), return_inverse=True)
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


def _last_uses(
    shards: NDArray[np.int64], width: int, before: int | None = None
) -> dict[int, list[int]]:
    """Row -> the shards used for the last time in that row of ``shards`` (rows of ``width``).

    A reader lets go of a shard (unmaps it) once the plan needs it no more: mapped pages count
    in the process's resident memory until then, and a shuffle reads its shards a window at a
    time, so an epoch would otherwise end with every shard it read mapped. Only rows before
    ``before`` are listed: a shard last used near the end of an epoch adds nothing to the
    epoch's peak, and the next epoch would have to map it (and fault its pages in) again.
    """
    flat = shards.reshape(-1)
    unique, first_from_end = first_occurrences(flat[::-1])  # last uses, counted from the end
    rows = (flat.size - 1 - first_from_end) // max(width, 1)
    done: dict[int, list[int]] = {}
    for row, shard in zip(rows.tolist(), unique.tolist(), strict=True):
        if before is None or row < before:
            done.setdefault(row, []).append(shard)
    return done
