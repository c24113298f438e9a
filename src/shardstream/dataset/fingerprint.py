"""Which data a dataset reads: a digest of its streams' shards, and the Delta versions read.

A state dict records it, so that a state is never resumed on other data. It names each
stream's shard names, sizes, sample counts and digests, in order (not where the data lives:
a copied dataset or a moved cache resumes), and the version of each Delta table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from shardstream.format.index import ShardEntry
from shardstream.tables.dataset import ParquetDataset

__all__ = ["data_fingerprint", "dataset_fingerprint", "table_snapshot", "table_versions"]


def data_fingerprint(
    streams: Sequence[Sequence[ShardEntry]], versions: Sequence[int | None] = ()
) -> str:
    """A short hex digest of each stream's shards: names, sizes, sample counts and digests.

    A stream read from a Delta table adds its version (``versions``: one per stream, ``None``
    for the others).
    """
    digest = hashlib.sha256()
    for number, shards in enumerate(streams):
        digest.update(b"\x00stream")
        if number < len(versions) and versions[number] is not None:
            digest.update(f"\x00delta version {versions[number]}".encode())
        for entry in shards:
            raw = entry.raw_data
            hashes = ",".join(f"{k}={v}" for k, v in sorted(raw.hashes.items()))
            digest.update(f"\n{raw.basename}\t{raw.bytes}\t{entry.samples}\t{hashes}".encode())
    return digest.hexdigest()[:16]


def dataset_fingerprint(datasets: Sequence[Any]) -> str:
    """:func:`data_fingerprint` of a dataset's streams, with the Delta versions they read."""
    return data_fingerprint([data.shards for data in datasets], table_versions(datasets))


def table_versions(datasets: Sequence[Any]) -> list[int | None]:
    """The Delta version each stream read (``None``: not a Delta table)."""
    return [
        None if (snapshot := table_snapshot(data)) is None else snapshot.version
        for data in datasets
    ]


def table_snapshot(data: object) -> Any:
    """The Delta snapshot a stream's data reads, or ``None`` (MDS, Parquet, empty)."""
    return data.snapshot if isinstance(data, ParquetDataset) else None
