"""What the first use of a ``StreamingDataset`` loads: the streams, their indexes, the cache.

Loaded from the dataset's :class:`~shardstream.dataset.settings.DatasetSettings` alone, once
per process (a DataLoader worker gets it pickled, its stores opened again), and kept with the
dataset: the streams resolved, each stream's shard table, the node's shard cache, the epoch's
draw over the streams, the read policy, and what is made from them on first use (the reader
that keeps shards open, the reference's shard tables, the data's fingerprint).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.cache import CacheStream, ShardCache
from shardstream.cache.listing_check import ListingCheck
from shardstream.config import io_uring_enabled
from shardstream.dataset.fingerprint import dataset_fingerprint
from shardstream.dataset.local import LocalDataset, check_empty_shards
from shardstream.dataset.settings import DatasetSettings
from shardstream.dataset.shard_tables import ShardTables
from shardstream.dataset.stream import ResolvedStream
from shardstream.dataset.stream_data import StreamData, open_remote, open_stream_data
from shardstream.dataset.stream_data import cache_stream as _cache_stream
from shardstream.errors import ConfigurationError, EmptyStreamError
from shardstream.format.index import INDEX_BASENAME
from shardstream.pipeline.policy import ReadPolicy
from shardstream.pipeline.reader import SampleReader
from shardstream.sampling import derived_weights, stream_choices
from shardstream.storage import ObjectStore
from shardstream.storage.filesystems import is_local_disk
from shardstream.tables.dataset import ParquetDataset

__all__ = ["MAX_FETCH_THREADS", "PreparedDataset", "fetch_threads", "slot_share"]

#: Fetch threads a reader has at most by default (the policy's ``max_fetch_threads``).
MAX_FETCH_THREADS = ReadPolicy.max_fetch_threads


class PreparedDataset:
    """What the first use of a dataset loads: indexes, shard tables, the cache."""

    def __init__(
        self,
        resolved: list[ResolvedStream],
        datasets: list[StreamData],
        cache: ShardCache,
        choices: NDArray[np.int64],
        policy: ReadPolicy,
    ) -> None:
        self.resolved = resolved
        self.policy = policy
        self.datasets = datasets
        self.cache = cache
        self.choices = choices
        self.stream_shard_sizes = [dataset.shard_sizes for dataset in datasets]
        counts = [len(sizes) for sizes in self.stream_shard_sizes]
        self.stream_first_shard = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        sizes = (
            np.concatenate(self.stream_shard_sizes) if counts else np.empty(0, np.int64)
        ).astype(np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.reader: SampleReader | None = None  # made on first read, kept for the process

    @property
    def num_samples(self) -> int:
        """Unique samples over every stream (before weighting)."""
        return int(self.shard_starts[-1])

    @property
    def epoch_size(self) -> int:
        """Samples per epoch, after the streams' weights."""
        return int(self.choices.sum())

    @cached_property
    def fingerprint(self) -> str:
        """The data's fingerprint, as state dicts record it."""
        return dataset_fingerprint(self.datasets)

    @cached_property
    def tables(self) -> ShardTables:
        """The reference's tables of the shards."""
        return ShardTables.of(
            self.resolved, self.datasets, self.stream_first_shard, self.shard_starts
        )

    def sample_reader(self) -> SampleReader:
        """The reader of this process, made on first use and kept (it keeps shards open)."""
        if self.reader is None:
            self.reader = SampleReader(
                self.datasets,
                self.shard_starts,
                self.stream_first_shard.tolist(),
                self.cache,
                self.policy,
            )
        return self.reader

    def __getstate__(self) -> dict[str, Any]:
        # Stores hold clients and locks that do not pickle (a spawned DataLoader worker): send
        # the cache's settings and open the stores again on arrival.
        state = self.__dict__.copy()
        cache = state.pop("cache")
        # The copy's cache has no listing to ask: it is sent once the listing has settled the
        # cache (deleted what changed), so that it trusts only confirmed files.
        for stream in cache.streams:
            if stream.check is not None:
                stream.check.wait()
        state["_cache_settings"] = (cache.limit, cache.download_slots)
        state["reader"] = None  # its mapped shards stay in this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        limit, slots = state.pop("_cache_settings")
        self.__dict__.update(state)
        streams = [
            _cache_stream(stream, dataset)
            for stream, dataset in zip(self.resolved, self.datasets, strict=True)
        ]
        self.cache = ShardCache(streams, limit=limit, download_slots=slots)

    @classmethod
    def load(cls, settings: DatasetSettings) -> PreparedDataset:
        """Resolve the streams, open their indexes and stores, and draw the epoch.

        Each of ``settings.streams`` is then settled with the weights derived for it.

        Raises:
            ConfigurationError: Two streams share a local folder, or a stream is invalid.
            EmptyStreamError: A stream's index holds no samples.
        """
        resolved = [
            stream.resolve(
                download_retry=settings.download_retry,
                download_timeout=settings.download_timeout,
                validate_hash=settings.validate_hash,
                keep_zip=settings.keep_zip,
                download_concurrency=settings.download_concurrency,
                columns=None if settings.columns is None else list(settings.columns),
                split=settings.split,
            )
            for stream in settings.streams
        ]
        for number, version in settings.table_pins.items():  # resuming on a saved Delta version
            resolved[number] = resolved[number].pinned(version)
        locals_seen: dict[str, str | None] = {}
        for stream in resolved:
            if stream.local in locals_seen:
                raise ConfigurationError(
                    f"two streams use the local folder {stream.local}: give each its own"
                )
            locals_seen[stream.local] = stream.remote
        stores = [open_remote(stream) for stream in resolved]
        if settings.read_policy is not None:
            policy = settings.read_policy.replace(zero_copy=settings.zero_copy)
        else:  # its fetch threads are known once the shards' sizes are (below)
            policy = ReadPolicy.for_settings(
                zero_copy=settings.zero_copy,
                cache_limit=settings.cache_limit,
                io_uring=io_uring_enabled(),
            )
        datasets: list[StreamData] = []
        cache_streams: list[CacheStream] = []
        for stream, store in zip(resolved, stores, strict=True):
            # The start's listing runs on while the first shards are fetched: the cache asks it
            # before handing over a shard cached before the start.
            checks: list[ListingCheck] = []
            local = open_stream_data(
                stream,
                store,
                allow_unsafe_types=settings.allow_unsafe_types,
                policy=policy,
                checks=checks,
            )
            datasets.append(local)
            check = checks[0] if checks else None
            cache_streams.append(_cache_stream(stream, local, store, check))
        if settings.read_policy is None:
            share = slot_share(cache_streams)
            threads = fetch_threads(stores, settings.download_concurrency, share, policy)
            policy = policy.replace(fetch_threads=threads)
        cache = ShardCache(
            cache_streams, limit=settings.cache_limit, download_slots=settings.download_concurrency
        )
        _check_empty_remote_shards(datasets, stores, cache)
        sizes = [int(local.shard_sizes.sum()) for local in datasets]
        for number, (stream, local, size) in enumerate(zip(resolved, datasets, sizes, strict=True)):
            if size == 0:
                raise _empty(number, stream, local)
        weights = [stream.weight for stream in resolved]
        epoch_size = settings.requested_epoch_size
        choices = stream_choices(sizes, weights, epoch_size=epoch_size, seed=settings.shuffle_seed)
        proportions, repeats = derived_weights(sizes, weights, choices, epoch_size=epoch_size)
        for given, proportion, repeat, choose in zip(
            settings.streams, proportions, repeats, choices, strict=True
        ):
            given.settle(proportion, repeat, choose)
        return cls(resolved, datasets, cache, choices, policy)


def _check_empty_remote_shards(
    datasets: Sequence[StreamData], stores: Sequence[ObjectStore | None], cache: ShardCache
) -> None:
    """:func:`check_empty_shards` for the remote MDS streams: fetched through the cache.

    Raises:
        ShardFormatError: A shard the index says is empty holds samples.
    """
    first = 0
    for data, store in zip(datasets, stores, strict=True):
        if store is not None and isinstance(data, LocalDataset):

            def open_shard(shard: int, data: LocalDataset = data, first: int = first) -> None:
                cache.open(first + shard, lambda: data.shard_view(shard))
                data.release(shard)

            check_empty_shards(data.shards, open_shard)
        first += len(data.shards)


def _empty(number: int, stream: ResolvedStream, data: StreamData) -> EmptyStreamError:
    """The error for a stream without samples: which, and where its index is."""
    what = f"stream {number} ({stream.remote or stream.local}) holds no samples"
    if isinstance(data, ParquetDataset):
        return EmptyStreamError(f"{what}: {data.why_empty()}")
    index = os.path.join(stream.local, INDEX_BASENAME)
    return EmptyStreamError(
        f"{what}: its index {index} lists {len(data.shards)} shards and no samples. "
        "Write samples to it (is the split right?), or leave the stream out"
    )


def fetch_threads(
    stores: Sequence[ObjectStore | None],
    download_concurrency: int,
    share: int = 1,
    policy: ReadPolicy | None = None,
) -> int:
    """Fetch threads of a reader over ``stores``: the policy's ``fetch_threads_for``.

    Args:
        stores: The store of each stream (``None`` for a local-only stream).
        download_concurrency: The node's download slots.
        share: Downloads of the dataset's shards one slot carries (:func:`slot_share`).
        policy: The read policy (default: ``ReadPolicy()``).
    """
    remote = [store for store in stores if store is not None]
    return (policy or ReadPolicy()).fetch_threads_for(
        remote=bool(remote),
        local_disk=all(is_local_disk(store) for store in remote),
        download_concurrency=download_concurrency,
        share=share,
    )


def slot_share(streams: Sequence[CacheStream]) -> int:
    """Downloads of the remote streams' typical shard that one download slot carries.

    The least over the remote streams of :meth:`DownloadOptions.slot_share` of each one's
    median stored shard (1 without remote streams, and for row groups fetched in ranges).
    """
    shares = [
        1
        if stream.fetcher is not None
        else stream.options.slot_share(
            int(np.median([entry.data_file.bytes for entry in stream.entries]))
        )
        for stream in streams
        if stream.store is not None and stream.entries
    ]
    return min(shares, default=1)
