"""Small MDS datasets for the streaming tests, and how to read global batches back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from shardstream import MDSWriter

COLUMNS = {"id": "int", "payload": "bytes"}


def write_dataset(
    root: Path,
    samples: int,
    *,
    size_limit: int = 2048,
    compression: str | None = None,
    first: int = 0,
    payload: int = 40,
) -> Path:
    """Write ``samples`` samples whose ``id`` column is ``first .. first + samples - 1``."""
    with MDSWriter(
        out=str(root), columns=COLUMNS, size_limit=size_limit, compression=compression,
        hashes=["xxh64"],
    ) as writer:  # fmt: skip
        for sample in range(first, first + samples):
            writer.write({"id": sample, "payload": bytes([sample % 251]) * payload})
    return root


def global_batches(per_rank: Sequence[Sequence[int]], device_batch: int) -> list[frozenset[int]]:
    """Step ``k``'s samples over all ranks, from each rank's yielded ids in order."""
    steps = min(len(ids) for ids in per_rank) // device_batch
    return [
        frozenset(i for ids in per_rank for i in ids[k * device_batch : (k + 1) * device_batch])
        for k in range(steps)
    ]


def ids_of(batches: Iterable[dict[str, Any]]) -> list[int]:
    """The ``id`` column of collated batches, flattened."""
    return [int(i) for batch in batches for i in batch["id"]]


def state_allowance(remote: Path, scratch: Path, readers: int = 1) -> int:
    """Bytes a cache of ``remote`` keeps beside its shards, measured, with room for processes.

    The index and the record of the remote, plus room for the run files and reservations of
    ``readers`` processes: ``cache_limit`` counts these too, so "N shards" is N shards plus this.
    """
    from shardstream.cache import sync_index
    from shardstream.cache.layout import kept_bytes
    from shardstream.storage import DownloadOptions
    from shardstream.storage.local import LocalStore

    sync_index(LocalStore(str(remote)), str(scratch), DownloadOptions())
    return kept_bytes(str(scratch)) + 512 * readers
