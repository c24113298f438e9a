"""What a ``StreamingDataset`` tells about its streams and shards, as mosaicml-streaming's does.

The attributes its notebooks and FAQ read (``shards``, ``samples_per_shard``,
``stream_per_shard``, ``shards_per_stream``, ...) and the two cache calls they make
(``prepare_shard``, ``evict_shard``), with the reference's names, element types and dtypes.
Each is answered from the loaded data (:class:`~shardstream.dataset.prepared.PreparedDataset`,
loaded at first use); the tables are :mod:`~shardstream.dataset.shard_tables`'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.dataset.prepared import PreparedDataset
from shardstream.dataset.shard_tables import ShardInfo, ShardTables
from shardstream.dataset.stream import Stream

__all__ = ["Introspection", "ShardInfo", "ShardTables"]


class Introspection:
    """The reference's attributes of a dataset's streams and shards, and its shard calls.

    A mixin of :class:`~shardstream.StreamingDataset`, which loads its indexes on first use.
    """

    streams: list[Stream]

    def _prepare(self) -> PreparedDataset:
        raise NotImplementedError  # StreamingDataset loads the indexes

    def _tables(self) -> ShardTables:
        return self._prepare().tables

    # --- sizes ----------------------------------------------------------------------------------

    @property
    def num_samples(self) -> int:
        """Unique samples over every stream (before weighting)."""
        return int(self._prepare().shard_starts[-1])

    @property
    def size(self) -> int:
        """The same as :attr:`num_samples`."""
        return self.num_samples

    @property
    def epoch_size(self) -> int:
        """Samples per epoch, after the streams' weights."""
        return int(self._prepare().choices.sum())

    @property
    def num_shards(self) -> int:
        """Shards over every stream."""
        return self._prepare().cache.num_shards

    @property
    def num_streams(self) -> int:
        """The number of streams."""
        return len(self.streams)

    # --- tables ---------------------------------------------------------------------------------

    @property
    def shards(self) -> list[ShardInfo]:
        """Every shard, streams end to end (the reference lists its shard readers)."""
        return self._tables().shards

    @property
    def samples_per_shard(self) -> NDArray[np.int64]:
        """Samples of each shard, streams end to end."""
        return self._tables().samples_per_shard

    @property
    def sample_offset_per_shard(self) -> NDArray[np.int64]:
        """The dataset-wide id of each shard's first sample."""
        return self._tables().sample_offset_per_shard

    @property
    def stream_per_shard(self) -> NDArray[np.int64]:
        """The stream of each shard."""
        return self._tables().stream_per_shard

    @property
    def shards_per_stream(self) -> NDArray[np.int64]:
        """Shards of each stream."""
        return self._tables().shards_per_stream

    @property
    def shard_offset_per_stream(self) -> NDArray[np.int64]:
        """The dataset-wide number of each stream's first shard."""
        return self._tables().shard_offset_per_stream

    @property
    def samples_per_stream(self) -> NDArray[np.int64]:
        """Samples of each stream (before weighting)."""
        return self._tables().samples_per_stream

    @property
    def sample_offset_per_stream(self) -> NDArray[np.int64]:
        """The dataset-wide id of each stream's first sample."""
        return self._tables().sample_offset_per_stream

    # --- the cache ------------------------------------------------------------------------------

    def prepare_shard(self, shard_id: int, blocking: bool = True) -> None:
        """Fetch shard ``shard_id`` into the node's cache now (decompressed), or mark it used.

        A fetch another process has under way is waited for, ``blocking`` or not.

        Raises:
            IndexError: There is no such shard.
            ShardNotFoundError: A local-only stream lacks the shard's files.
            StorageError: The download failed after every retry.
        """
        shard = self._shard_number(shard_id)
        cache = self._prepare().cache
        if not cache.ensure(shard):
            cache.touch(shard)

    def evict_shard(self, shard_id: int) -> None:
        """Delete shard ``shard_id``'s files from the node's cache (a later read fetches it).

        Shards of a local-only stream (``remote=None``) are the dataset itself, never
        deleted; nor is a shard another process is fetching now.

        Raises:
            IndexError: There is no such shard.
        """
        self._prepare().cache.evict(self._shard_number(shard_id))

    def _shard_number(self, shard_id: Any) -> int:
        """``shard_id`` checked (negative counts from the end, as numpy indexes)."""
        count = self.num_shards
        if not isinstance(shard_id, (int, np.integer)) or not -count <= shard_id < count:
            raise IndexError(f"shard id {shard_id!r} is out of range for {count} shards")
        return int(shard_id) % count
