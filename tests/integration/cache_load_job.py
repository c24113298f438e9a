"""One rank of the cache load test: streams epochs from a shared cache and records what it got.

Run as ``python cache_load_job.py --rank R --world-size W ...`` (no process group: the rank and
the job's shape are given explicitly, as a launcher without environment variables would). Writes
``<out>/rank<R>.json``: the ids of each epoch, the seconds each epoch took, the CPU seconds it
took (this process and its DataLoader workers, which end with each epoch), and the largest
size the cache folder's shard files reached while it sampled them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time

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


def cpu_time() -> float:
    """CPU seconds of this process and of its children that have ended (the epoch's workers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--remote", "--cache", "--out", "--cache-limit"):
        parser.add_argument(name, required=True)
    for name in ("--rank", "--world-size", "--workers", "--batch-size", "--epochs"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
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
    epochs, seconds, cpu_seconds = [], [], []
    for _ in range(args.epochs):
        started, cpu_started = time.perf_counter(), cpu_time()
        epochs.append([int(i) for batch in loader for i in batch["id"]])
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(cpu_time() - cpu_started)
    done.set()
    watcher.join()
    with open(os.path.join(args.out, f"rank{args.rank}.json"), "w") as handle:
        json.dump({"epochs": epochs, "seconds": seconds, "cpu_seconds": cpu_seconds,
                   "peak_shard_bytes": peak}, handle)  # fmt: skip


if __name__ == "__main__":
    main()
