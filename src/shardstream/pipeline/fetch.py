"""The fetch stage: each planned batch located, its shards fetched ahead and opened.

Every sample id becomes its shard and its index in it. Before a batch is handed on, every
shard of the batches within ``predownload`` samples is handed to a small thread pool that
makes it present in the node's cache (the cache itself bounds the node's concurrent
downloads); the shards of the batch at hand are opened by those threads too, so that a reader
does not open many tiny shards one after another. The stage waits only for the shards of the
batch at hand, and lets go of each shard after the last batch that uses it
(:func:`last_uses`). Its items are :class:`LocatedBatch` es with their shards' views open.

With ``ranges`` (and the policy's ``first_batch_ranges``), the first batch's samples of
shards not yet in the cache are read by range requests (``cache/sample_ranges.py``), and
those shards are fetched whole behind it, where the rest of the plan first needs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.cache import ShardCache
from shardstream.format.shard_view import ShardView
from shardstream.pipeline.batch_assembly import LocatedBatch
from shardstream.pipeline.open_shards import OpenShards
from shardstream.pipeline.plan import Plan
from shardstream.pipeline.policy import ReadPolicy
from shardstream.pipeline.stage import StageState, Stepped
from shardstream.sampling.distinct import distinct, first_occurrences
from shardstream.sampling.intervals import count_at_most
from shardstream.storage.cancel import LET_GO_S, CancelScope

__all__ = ["Fetch", "last_uses", "locate"]


class Fetch(Stepped[LocatedBatch]):
    """The plan's batches located, their shards fetched (ahead) and opened (a stage).

    Args:
        plan: The plan stage.
        shard_starts: The first dataset-wide sample id of every shard, plus the total.
        opened: The reader's open shards.
        cache: The node's shard cache.
        policy: The read policy (fetch threads, when shards are let go).
        predownload: Samples ahead of the batch at hand whose shards are fetched.
        ranges: Read the first batch's samples by range requests where its shards are not
            here yet (the samples and columns stages; not the ids stage, whose reader needs
            the shards whole).
    """

    def __init__(
        self,
        plan: Plan,
        shard_starts: NDArray[np.int64],
        opened: OpenShards,
        cache: ShardCache,
        policy: ReadPolicy,
        predownload: int,
        *,
        ranges: bool = False,
    ) -> None:
        super().__init__()
        self.plan = plan
        self._starts = shard_starts
        self._opened = opened
        self._cache = cache
        self._policy = policy
        self._predownload = predownload
        self._ranges = ranges and policy.first_batch_ranges

    def reset(self, state: StageState | None = None) -> None:
        """Start again at ``state`` (from the start if ``None``)."""
        super().reset(state)
        self.plan.reset(state)

    def _run(self, start: int) -> Iterator[LocatedBatch]:
        """Each batch's shards and in-shard indices, with the views of its shards open."""
        self.plan.reset({"batch": start})
        ids = self.plan.rest()
        width = self.plan.width
        if ids.size == 0:
            return
        opened = self._opened
        opened.new_epoch()
        # The fetch threads are given up on, never joined, when the walk ends (a reader that
        # stops early must not wait for fetches ahead that wait on a silent server): their
        # waits end with the scope (shardstream.storage.cancel), and with them their fetches,
        # which are given a moment to clear their records and temporaries.
        pool = ThreadPoolExecutor(
            self._policy.fetch_threads, thread_name_prefix="shardstream-fetch"
        )
        scope = CancelScope()
        ahead = _LookAhead(pool, scope, opened, self._cache)
        try:
            # The first batch is located alone: it need not wait for the search and sort
            # over every sample of the plan (time to first batch); its look-ahead starts
            # once it is out.
            for first, part in ((True, ids[:width]), (False, ids[width:])):
                if not len(part):
                    break
                shards, local, needed, needed_at = locate(self._starts, part)
                rows = -(-len(part) // width)
                done_after: dict[int, list[int]] = {}
                if not first:  # the rest of the plan: let go of each shard after its last use
                    done_after = last_uses(shards, width, self._policy.release_before(rows))
                    wanted = set(needed)
                    for shard in [shard for shard in opened.shards() if shard not in wanted]:
                        opened.release(shard)  # the first batch's, or an earlier epoch's
                    if self._ranges:  # the node's first batches' ranges before this bulk
                        opened.wait_for_ranges()
                ranged: dict[int, ShardView] = {}
                if first and self._ranges:
                    ahead.fetch_large_now(needed, self._policy)
                    ranged = opened.read_by_ranges(shards.tolist(), local.tolist(), pool)
                ahead.plan(needed, needed_at, whole_later=ranged.keys())
                for row in range(rows):
                    begin, stop = row * width, min((row + 1) * width, len(part))
                    ahead.submit(stop, stop + (0 if first else self._predownload))
                    in_row = shards[begin:stop]
                    # One shard (read in order): no sort of every sample's shard.
                    one = bool((in_row == in_row[0]).all())
                    keys = [int(in_row[0])] if one else distinct(in_row).tolist()
                    if ranged:
                        views = {
                            shard: ranged[shard] if shard in ranged else ahead.take(shard)
                            for shard in keys
                        }
                    else:
                        views = ahead.take_all(keys)
                    self.plan.skip(1)
                    # Arrays: the decode stage makes lists only where its reads take them.
                    yield LocatedBatch(in_row, local[begin:stop], views)
                    for shard in done_after.get(row, ()):
                        opened.release(shard)
        finally:
            opened.ranges_done()
            scope.cancel()
            ahead.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            ahead.shutdown()


def locate(
    shard_starts: NDArray[np.int64], batches: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64], list[int], list[int]]:
    """The shard and in-shard index of every sample, and the shards in order of first need.

    Returns:
        ``(shards, local, needed, needed_at)``: arrays shaped as ``batches``, then each
        distinct shard once with the flat position where it is first needed, by position.
    """
    shards = count_at_most(shard_starts, batches)  # a bucketed search: no binary search
    shards -= 1
    local = batches - shard_starts[shards]
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
        self._early: ThreadPoolExecutor | None = None

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
            if shard in self._whole_later:
                # Present already (read in place): opened, read whole, behind the batch at hand.
                if shard not in opened and shard not in pending and self._cache.is_present(shard):
                    pending[shard] = self._pool.submit(self._scope.run, opened.open_in_pool, shard)
            elif shard not in opened and shard not in pending:
                if self._needed_at[self._next] < current:
                    pending[shard] = self._pool.submit(self._scope.run, opened.open_in_pool, shard)
                elif not self._cache.is_present(shard):  # a stat, not a task
                    pending[shard] = self._pool.submit(self._scope.run, opened.fetch_in_pool, shard)
            self._next += 1

    def fetch_large_now(self, shards: list[int], policy: ReadPolicy) -> None:
        """Start fetching whole every shard of ``shards`` above ``range_whole_bytes``, now.

        The first batch's shards whose samples are read by ranges: their ranges cost round
        trips, not the link's bytes, so the whole shards' transfer runs beside them instead
        of after the batch (a cold epoch would otherwise wait that long for every byte). In
        threads of their own, so that the ranges keep the fetch threads; small shards are left
        to the look-ahead, as their whole fetch costs what their range does.
        """
        cache, pending = self._cache, self._pending
        large = [
            shard for shard in shards
            if shard not in pending and shard not in self._opened
            and cache.locate(shard)[1].raw_data.bytes > policy.range_whole_bytes
            and not cache.is_present(shard)
        ]  # fmt: skip
        if not large:
            return
        self._early = ThreadPoolExecutor(
            min(len(large), policy.fetch_threads), thread_name_prefix="shardstream-fetch-whole"
        )
        for shard in large:
            pending[shard] = self._early.submit(self._scope.run, self._opened.fetch_in_pool, shard)

    def take(self, shard: int) -> ShardView:
        """The open view of ``shard``: opened by a thread, kept open, or opened now."""
        opened = self._opened
        future = self._pending.pop(shard, None)
        view = None if future is None else future.result()
        view = opened.view(shard) if view is None else opened.keep(shard, view)
        if not opened.marked(shard):  # open since an earlier epoch
            opened.mark(shard)
        return view

    def take_all(self, shards: list[int]) -> dict[int, ShardView]:
        """:meth:`take` of each of ``shards``, in one call where none is being opened."""
        pending = self._pending
        if not pending or pending.keys().isdisjoint(shards):
            return self._opened.views(shards)
        return {shard: self.take(shard) for shard in shards}

    def cancel(self) -> None:
        """Cancel the tasks not started; give those running :data:`LET_GO_S` to let go."""
        running = [future for future in self._pending.values() if not future.cancel()]
        wait(running, timeout=LET_GO_S)

    def shutdown(self) -> None:
        """Let the threads of :meth:`fetch_large_now` go (never joined, as the pool's)."""
        if self._early is not None:
            self._early.shutdown(wait=False, cancel_futures=True)


def last_uses(
    shards: NDArray[np.int64], width: int, before: int | None = None
) -> dict[int, list[int]]:
    """Row -> the shards used for the last time in that row of ``shards`` (rows of ``width``).

    A reader lets go of a shard (unmaps it) once the plan needs it no more: mapped pages count
    in the process's resident memory until then, and a shuffle reads its shards a window at a
    time, so an epoch would otherwise end with every shard it read mapped. Only rows before
    ``before`` are listed (the policy's ``release_before``): a shard last used near the end
    of an epoch adds nothing to the epoch's peak, and the next epoch would have to map it
    (and fault its pages in) again.
    """
    flat = shards.reshape(-1)
    unique, first_from_end = first_occurrences(flat[::-1])  # last uses, counted from the end
    rows = (flat.size - 1 - first_from_end) // max(width, 1)
    done: dict[int, list[int]] = {}
    for row, shard in zip(rows.tolist(), unique.tolist(), strict=True):
        if before is None or row < before:
            done.setdefault(row, []).append(shard)
    return done
