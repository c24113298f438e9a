"""The reference's tables of a dataset's shards: ``ShardInfo`` and the arrays by stream.

What mosaicml-streaming's notebooks and FAQ read as ``shards``, ``samples_per_shard``,
``stream_per_shard``, ``shards_per_stream``, ..., with the reference's names, element types
and dtypes, made once from the loaded indexes; the arrays are read-only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.dataset.stream import ResolvedStream
from shardstream.dataset.stream_data import StreamData
from shardstream.format.index import FileInfo, ShardEntry

__all__ = ["ShardInfo", "ShardTables"]


class ShardInfo:
    """One shard of a dataset, with the attributes of the reference's shard readers.

    Attributes:
        dirname: The stream's local folder (without its split).
        split: The stream's split (``""``: none); the shard's files are under
            ``os.path.join(dirname, split)``.
        format: ``'mds'``, ``'json'``, ``'csv'``, ``'tsv'``, ``'xsv'`` or ``'parquet'``.
        samples: Samples in the shard (also ``size`` and ``len()``).
        compression: The compression of its files (``None``: none).
        hashes: The digests its files carry.
        size_limit: The writer's size limit, if any.
        column_names: Its columns, in stored order.
        column_encodings: Their encodings.
        column_sizes: Their fixed sizes (``None``: variable).
        raw_data: The uncompressed data file.
        zip_data: The compressed data file (``None``: uncompressed).
        raw_meta: The uncompressed metadata file of the split formats (``None`` for MDS).
        zip_meta: Its compressed file, if any.
        file_pairs: ``(uncompressed, compressed)`` pairs of files: metadata first.
        entry: The shard's entry of ``index.json``.

    Example:
        ds = StreamingDataset(remote="s3://bucket/my-ds", batch_size=32)
        first = ds.shards[0]
        print(first.samples, first.raw_data.basename, first.get_max_size())
    """

    def __init__(self, entry: ShardEntry, dirname: str, split: str) -> None:
        self.entry = entry
        self.dirname = dirname
        self.split = split
        self.format = entry.format
        self.samples = entry.samples
        self.compression = entry.compression
        self.hashes = list(entry.hashes)
        self.size_limit = entry.size_limit
        self.column_names = list(entry.columns)
        self.column_encodings = list(entry.columns.values())
        self.column_sizes = list(entry.column_sizes)
        self.raw_data = entry.raw_data
        self.zip_data = entry.zip_data
        self.raw_meta = entry.raw_meta
        self.zip_meta = entry.zip_meta
        pairs: list[tuple[FileInfo, FileInfo | None]] = [(entry.raw_data, entry.zip_data)]
        if entry.raw_meta is not None:
            pairs.insert(0, (entry.raw_meta, entry.zip_meta))
        self.file_pairs = pairs

    @property
    def size(self) -> int:
        """Samples in the shard."""
        return self.samples

    def __len__(self) -> int:
        return self.samples

    def get_raw_size(self) -> int:
        """Bytes of its uncompressed files."""
        return sum(raw.bytes for raw, _ in self.file_pairs)

    def get_zip_size(self) -> int | None:
        """Bytes of its compressed files (``None``: it is not compressed)."""
        if any(zipped is None for _, zipped in self.file_pairs):
            return None
        return sum(zipped.bytes for _, zipped in self.file_pairs if zipped is not None)

    def get_max_size(self) -> int:
        """The most bytes it takes on disk: compressed and uncompressed files at once."""
        return self.get_raw_size() + (self.get_zip_size() or 0)

    def get_persistent_size(self, keep_zip: bool) -> int:
        """Bytes it keeps on disk once decompressed (its compressed files too with keep_zip)."""
        return self.get_max_size() if self.compression and keep_zip else self.get_raw_size()

    def __repr__(self) -> str:
        name = os.path.join(self.dirname, self.split, self.raw_data.basename)
        return f"ShardInfo({name!r}, samples={self.samples})"


@dataclass(frozen=True)
class ShardTables:
    """The dataset's shards, and the reference's arrays of them by stream (int64, read-only).

    Attributes:
        shards: Every shard, streams end to end.
        samples_per_shard: Samples of each shard, streams end to end.
        sample_offset_per_shard: The dataset-wide id of each shard's first sample.
        stream_per_shard: The stream of each shard.
        shards_per_stream: Shards of each stream.
        shard_offset_per_stream: The dataset-wide number of each stream's first shard.
        samples_per_stream: Samples of each stream.
        sample_offset_per_stream: The dataset-wide id of each stream's first sample.
    """

    shards: list[ShardInfo]
    samples_per_shard: NDArray[np.int64]
    sample_offset_per_shard: NDArray[np.int64]
    stream_per_shard: NDArray[np.int64]
    shards_per_stream: NDArray[np.int64]
    shard_offset_per_stream: NDArray[np.int64]
    samples_per_stream: NDArray[np.int64]
    sample_offset_per_stream: NDArray[np.int64]

    @classmethod
    def of(
        cls,
        resolved: Sequence[ResolvedStream],
        datasets: Sequence[StreamData],
        stream_first_shard: NDArray[np.int64],
        shard_starts: NDArray[np.int64],
    ) -> ShardTables:
        """The tables of loaded streams: each one's data, first shard and sample offsets."""
        first_shard = stream_first_shard
        shards_per_stream = np.diff(first_shard)
        starts = shard_starts
        samples_per_stream = starts[first_shard[1:]] - starts[first_shard[:-1]]
        arrays = [
            np.diff(starts),
            starts[:-1],
            np.repeat(np.arange(len(shards_per_stream), dtype=np.int64), shards_per_stream),
            shards_per_stream,
            first_shard[:-1],
            samples_per_stream,
            starts[first_shard[:-1]],
        ]
        frozen = []
        for array in arrays:
            copy = np.array(array, np.int64)  # never a view of the arrays the reader uses
            copy.flags.writeable = False
            frozen.append(copy)
        shards = [
            ShardInfo(entry, _dirname(stream.local, stream.split), stream.split)
            for stream, data in zip(resolved, datasets, strict=True)
            for entry in data.shards
        ]
        return cls(shards, *frozen)


def _dirname(local: str, split: str) -> str:
    """The stream's folder without its split (``local`` ends with it)."""
    return local[: -len(split) - 1] if split else local
