"""Reading a worker's planned samples in order, fetching shards ahead of the reader.

The plan is an array of dataset-wide sample ids. It is cut into *visits*: runs of samples from
one shard. A small thread pool makes the shards of the visits within ``predownload`` samples
of the reader present in the node's cache (the cache itself bounds the node's concurrent
downloads); the reader waits only for the shard it needs now. Each sample is decoded by its
shard's generated getter: one call per sample, no per-sample lookups.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.cache import ShardCache
from shardstream.dataset.local import LocalDataset
from shardstream.errors import ShardNotFoundError

__all__ = ["SampleReader"]

logger = logging.getLogger(__name__)

_OPEN_SHARDS = 8  # mapped shards a reader keeps; the rest are unmapped so eviction frees disk
_REOPEN_ATTEMPTS = 3  # a shard evicted between being fetched and being opened is fetched again


class SampleReader:
    """Decodes samples by dataset-wide id, making their shards present first.

    Args:
        datasets: One reader per stream, over the stream's local folder.
        shard_starts: The first dataset-wide sample id of every shard, plus the total.
        stream_first_shard: The first dataset-wide shard of every stream, plus the total.
        cache: The node's shard cache.
        threads: Download threads of this reader.
    """

    def __init__(
        self,
        datasets: Sequence[LocalDataset],
        shard_starts: NDArray[np.int64],
        stream_first_shard: Sequence[int],
        cache: ShardCache,
        *,
        threads: int = 4,
    ) -> None:
        self.datasets = list(datasets)
        self.shard_starts = shard_starts
        self._starts = shard_starts.tolist()
        self._stream_of_shard = np.repeat(
            np.arange(len(datasets)), np.diff(np.asarray(stream_first_shard))
        ).tolist()
        self._first_shard = list(stream_first_shard)
        self.cache = cache
        self.threads = threads
        self._open: OrderedDict[int, Callable[[int], dict[str, Any]]] = OrderedDict()

    def get(self, sample_id: int) -> dict[str, Any]:
        """Decode one sample by dataset-wide id, fetching its shard if needed."""
        shard = int(np.searchsorted(self.shard_starts, sample_id, side="right")) - 1
        return self._getter(shard)(sample_id - self._starts[shard])

    def samples(self, ids: NDArray[np.int64], *, predownload: int) -> Iterator[dict[str, Any]]:
        """Yield the samples ``ids`` in order, fetching shards up to ``predownload`` ahead."""
        if len(ids) == 0:
            return
        shards = np.searchsorted(self.shard_starts, ids, side="right") - 1
        begins = np.flatnonzero(np.r_[True, shards[1:] != shards[:-1]])  # visits' first samples
        ends = np.r_[begins[1:], len(ids)].tolist()
        visit_shards = shards[begins].tolist()
        begin_list = begins.tolist()
        local = (ids - self.shard_starts[shards]).tolist()
        pending: dict[int, Future[None]] = {}
        ahead = 0  # the next visit to schedule
        with ThreadPoolExecutor(self.threads, thread_name_prefix="shardstream-fetch") as pool:
            try:
                for visit, shard in enumerate(visit_shards):
                    horizon = begin_list[visit] + max(predownload, 1)
                    while ahead < len(visit_shards) and begin_list[ahead] < horizon:
                        upcoming = visit_shards[ahead]
                        if upcoming not in pending and upcoming not in self._open:
                            pending[upcoming] = pool.submit(self.cache.ensure, upcoming)
                        ahead += 1
                    future = pending.pop(shard, None)
                    if future is not None:
                        future.result()
                    get = self._getter(shard)
                    for index in local[begin_list[visit] : ends[visit]]:
                        yield get(index)
            finally:
                for future in pending.values():
                    future.cancel()

    def close(self) -> None:
        """Unmap every shard this reader opened."""
        for shard in list(self._open):
            self._release(shard)

    def _getter(self, shard: int) -> Callable[[int], dict[str, Any]]:
        """The open decoder of ``shard``, fetching and mapping it when needed."""
        get = self._open.get(shard)
        if get is not None:
            self._open.move_to_end(shard)
            return get
        stream = self._stream_of_shard[shard]
        within = shard - self._first_shard[stream]
        opened: Callable[[int], dict[str, Any]]
        for attempt in range(_REOPEN_ATTEMPTS):
            self.cache.ensure(shard)
            try:
                opened = self.datasets[stream].shard_getter(within)
                break
            except ShardNotFoundError:  # evicted by another process in between
                if attempt == _REOPEN_ATTEMPTS - 1:
                    raise
                logger.debug("shard %d vanished before it was opened; fetching it again", shard)
        else:  # pragma: no cover - the loop either breaks or raises
            raise AssertionError("unreachable")
        self.cache.touch(shard)
        self._open[shard] = opened
        while len(self._open) > _OPEN_SHARDS:
            self._release(next(iter(self._open)))
        return opened

    def _release(self, shard: int) -> None:
        self._open.pop(shard, None)
        stream = self._stream_of_shard[shard]
        self.datasets[stream].release(shard - self._first_shard[stream])
