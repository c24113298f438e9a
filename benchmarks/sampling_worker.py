"""Times one epoch plan in one library; run by sampling_bench.py under each library's venv.

shardstream computes one worker's plan (all a worker needs); the reference computes the whole
epoch (its node leader does this every epoch and shares it through shared memory).
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import time
from typing import Any

import numpy as np


def shardstream_plan(args: argparse.Namespace, shard_sizes: np.ndarray[Any, Any]) -> int:
    from shardstream.sampling import EpochPlan, ShuffleConfig, Topology

    topology = Topology(nodes=args.nodes, ranks_per_node=args.ranks, workers_per_rank=args.workers,
                        rank=args.ranks * args.nodes - 1, worker=args.workers - 1)  # fmt: skip
    plan = EpochPlan.for_worker(
        shard_sizes, topology=topology, num_canonical_nodes=args.ncn,
        global_batch_size=args.batch * args.nodes * args.ranks, epoch=1,
        shuffle=ShuffleConfig(shuffle=True, algo=args.algo, seed=9176, block_size=args.block),
    )  # fmt: skip
    return int(plan.ids.size)


def reference_epoch(args: argparse.Namespace, shard_sizes: np.ndarray[Any, Any]) -> int:
    partition = importlib.import_module("streaming.base.partition")
    shuffle = importlib.import_module("streaming.base.shuffle")
    ids = partition.get_partitions("orig", int(shard_sizes.sum()), args.ncn, args.nodes,
                                   args.ranks, args.workers, args.batch)  # fmt: skip
    perm = shuffle.get_shuffle(args.algo, shard_sizes, args.ncn, 9176, 1, args.block)
    ids = np.where(ids == -1, -1, perm[ids])
    return int(ids[-1, -1, -1].size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", choices=["shardstream", "streaming"], required=True)
    defaults = {"samples": 100_000_000, "shards": 10_000, "nodes": 8, "ranks": 8, "workers": 8,
                "ncn": 8, "batch": 32, "block": 1 << 18}  # fmt: skip
    for name, default in defaults.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--algo", default="py1e")
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    base, extra = divmod(args.samples, args.shards)
    shard_sizes = np.full(args.shards, base, np.int64)
    shard_sizes[:extra] += 1
    run = shardstream_plan if args.lib == "shardstream" else reference_epoch
    if args.lib == "streaming":
        importlib.import_module("streaming.base.partition")  # import time is not counted
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu_started = time.perf_counter(), time.process_time()
    samples = run(args, shard_sizes)
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started  # apart from waits for a busy machine
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(args.result, "w") as handle:
        result = {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_mib": peak_kib / 1024,
                  "rss_before_mib": rss_before / 1024, "worker_samples": samples}  # fmt: skip
        json.dump(result, handle)


if __name__ == "__main__":
    main()
