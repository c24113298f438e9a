"""One rank of the cache load test: streams epochs from a shared cache and records what it got.

Run as ``python cache_load_job.py --rank R --world-size W ...`` (no process group: the rank and
the job's shape are given explicitly, as a launcher without environment variables would). Writes
``<out>/rank<R>.json``: the ids of each epoch, the seconds each epoch took, the shard files this
rank and its DataLoader workers downloaded in each epoch (counted by wrapping the one function
the shard cache downloads with, before the workers fork), and the largest size the cache
folder's shard files reached while it sampled them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import threading
import time
from typing import Any

from shardstream import StreamingDataLoader, StreamingDataset


def shard_bytes(folder: str) -> int:
    """Bytes of the shard files in ``folder`` (what cache_limit bounds)."""
    total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file() and entry.name.endswith((".mds", ".zstd")):
                with contextlib.suppress(FileNotFoundError):  # evicted while we look
                    total += entry.stat().st_size
    return total


def count_downloads(ledger: str) -> None:
    """Append a line to ``ledger`` for every shard file the cache downloads, in any process."""
    shard_cache = importlib.import_module("shardstream.cache.shard_cache")
    original = shard_cache.download_file

    def counted(store: Any, key: str, *args: Any, **kwargs: Any) -> int:
        size: int = original(store, key, *args, **kwargs)
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {os.path.basename(key)}\n".encode())
        finally:
            os.close(fd)
        return size

    setattr(shard_cache, "download_file", counted)  # noqa: B010 - a module typed as such


def ledger_lines(ledger: str) -> int:
    """How many downloads the ledger holds so far."""
    if not os.path.exists(ledger):
        return 0
    with open(ledger, encoding="utf-8") as handle:
        return sum(1 for _ in handle)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--remote", "--cache", "--out", "--cache-limit"):
        parser.add_argument(name, required=True)
    for name in ("--rank", "--world-size", "--workers", "--batch-size", "--epochs"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    ledger = os.path.join(args.out, f"rank{args.rank}.downloads")
    count_downloads(ledger)
    dataset = StreamingDataset(
        remote=args.remote, local=args.cache, batch_size=args.batch_size, shuffle=True,
        cache_limit=args.cache_limit, rank=args.rank, world_size=args.world_size,
        ranks_per_node=args.world_size, num_canonical_nodes=1, shuffle_seed=args.seed,
    )  # fmt: skip
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.01):
            peak = max(peak, shard_bytes(args.cache))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    epochs, seconds, downloads = [], [], []
    for _ in range(args.epochs):
        started, downloaded = time.perf_counter(), ledger_lines(ledger)
        epochs.append([int(i) for batch in loader for i in batch["id"]])
        seconds.append(time.perf_counter() - started)
        downloads.append(ledger_lines(ledger) - downloaded)
    done.set()
    watcher.join()
    with open(os.path.join(args.out, f"rank{args.rank}.json"), "w") as handle:
        json.dump({"epochs": epochs, "seconds": seconds, "downloads": downloads,
                   "peak_shard_bytes": peak}, handle)  # fmt: skip


if __name__ == "__main__":
    main()
