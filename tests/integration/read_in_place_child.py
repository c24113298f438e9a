"""Reads a dataset in place every way there is; run by test_read_in_place.py, also as a child.

As a child (``python read_in_place_child.py DATA WARMUP CACHE``), it reads the copy ``WARMUP`` as
root first (so that every module the reading needs is imported: the interpreter's own library
may be unreadable to others), then drops to the user ``nobody`` and reads ``DATA``, its cache
root set to ``CACHE``. It prints one JSON line: the ids read each way, or the error raised.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from shardstream import LocalDataset, StreamingDataLoader, StreamingDataset

NOBODY = 65534


def ids_of(batches: Any) -> list[int]:
    """The ``id`` column of collated batches, flattened."""
    return [int(i) for batch in batches for i in batch["id"]]


def read_everything(root: str, *, parquet: bool = False) -> dict[str, list[int]]:
    """The ids read from ``root`` by each reader: loaders of 0 and 2 workers, resumed, local."""
    options: dict[str, Any] = {"columns": ["id", "name"]} if parquet else {"validate_hash": "xxh64"}
    read: dict[str, list[int]] = {}
    for workers in (0, 2):
        dataset = StreamingDataset(local=root, batch_size=8, cache_limit="64mb", **options)
        loader = StreamingDataLoader(dataset, batch_size=8, num_workers=workers)
        read[f"workers={workers}"] = ids_of(loader)
        resumed = StreamingDataset(local=root, batch_size=8, **options)
        resumed.load_state_dict(loader.state_dict())  # the end of epoch 0: epoch 1 next
        read[f"workers={workers}, resumed"] = ids_of(
            StreamingDataLoader(resumed, batch_size=8, num_workers=workers)
        )
        resumed.set_epoch(2)
        read[f"workers={workers}, epoch 2"] = ids_of(
            StreamingDataLoader(resumed, batch_size=8, num_workers=workers)
        )
    if not parquet:
        with LocalDataset(root, validate_hash="xxh64") as local:
            read["LocalDataset"] = [int(sample["id"]) for sample in local]
    return read


def main() -> None:
    data, warmup, cache = sys.argv[1:4]
    os.environ["SHARDSTREAM_CACHE_DIR"] = os.path.join(warmup, ".cache")
    read_everything(warmup)
    os.environ["SHARDSTREAM_CACHE_DIR"] = cache
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    outcome: dict[str, Any] = {"uid": os.getuid()}
    try:
        with open(os.path.join(data, "written-by-nobody"), "wb"):
            outcome["data_writable"] = True
    except PermissionError:
        outcome["data_writable"] = False
    try:
        outcome["read"] = read_everything(data)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which shows it
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
