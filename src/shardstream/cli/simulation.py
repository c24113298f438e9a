"""``shardstream simulate``: how a cluster shape will read a dataset, before it runs.

From the dataset's index alone (no shard is downloaded): the epoch's plans for every rank and
worker, exactly as the job will compute them, then per node the shards and bytes it downloads
through its cache, the cache it needs to download nothing twice, the bytes before its first
step (and the time at a given bandwidth), and the shuffle's quality.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream._optional import require
from shardstream.cli.arguments import byte_size, count
from shardstream.cli.source import add_dataset_arguments, download_options, open_source
from shardstream.errors import ConfigurationError
from shardstream.sampling import DEFAULT_SHUFFLE_ALGORITHM, SHUFFLE_ALGORITHMS, ShuffleConfig
from shardstream.sampling.simulation import (
    JobShape,
    displacement,
    epoch_order,
    lru_bytes,
    node_cost,
    node_sequence,
    positions_of,
    shard_of,
    shards_per_batch,
    step_batches,
)
from shardstream.units import format_bytes

__all__ = ["register", "simulate"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``simulate`` to the sub-commands."""
    parser = commands.add_parser(
        "simulate",
        parents=parents,
        help="downloads per node, cache needed, time to first batch and shuffle quality",
        description="Simulate one epoch of a dataset on a cluster shape from its index alone. "
        "Example: shardstream simulate s3://bucket/my-ds --nodes 4 --ranks-per-node 8 "
        "--workers 4 --batch-size 32 --cache-limit 50gb --plot sim.png",
    )
    add_dataset_arguments(parser)
    parser.add_argument("--nodes", type=count(1), default=1, help="physical nodes (default 1)")
    parser.add_argument("--ranks-per-node", type=count(1), default=8, help="ranks per node (8)")
    parser.add_argument(
        "--workers", type=count(1), default=8, help="DataLoader workers per rank (8)"
    )
    parser.add_argument("--batch-size", type=count(1), default=32, help="per-device batch (32)")
    parser.add_argument(
        "--num-canonical-nodes",
        type=count(1),
        help="default: as StreamingDataset's (the nodes; 64 x that for py1s and py2s)",
    )
    parser.add_argument(
        "--shuffle-algo", default=DEFAULT_SHUFFLE_ALGORITHM, choices=sorted(SHUFFLE_ALGORITHMS)
    )
    parser.add_argument("--no-shuffle", action="store_true", help="simulate shuffle=False")
    parser.add_argument("--shuffle-block-size", type=count(1), help="default: the algorithm's")
    parser.add_argument("--seed", type=count(0), default=9176, help="shuffle_seed (9176)")
    parser.add_argument("--epoch", type=count(0), default=0)
    parser.add_argument(
        "--cache-limit",
        type=byte_size,
        help="each node's cache_limit, e.g. '50gb' (default: no limit)",
    )
    parser.add_argument(
        "--bandwidth",
        type=byte_size,
        default="1gb",
        help="download bandwidth per node per second, for the time to first batch ('1gb')",
    )
    parser.add_argument("--plot", help="write a PNG figure here (needs shardstream[plot])")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=_run)


def simulate(
    shard_sizes: list[int],
    shard_bytes: NDArray[np.int64],
    shape: JobShape,
    config: ShuffleConfig,
    cache_limit: int | None,
) -> tuple[dict[str, Any], NDArray[np.int64]]:
    """Every measure as plain data, and the shard ids of the step batches.

    ``cache_limit`` None means unlimited; the shard ids are ``[steps, ranks, device batch]``.
    """
    started = time.perf_counter()
    batches = step_batches(shape, config)
    shards = shard_of(shape.shard_sizes, batches)
    order = epoch_order(shape, batches)[: shape.epoch_size]
    plain = epoch_order(shape, step_batches(shape, ShuffleConfig(False, seed=config.seed)))
    limit = cache_limit if cache_limit is not None else int(shard_bytes.sum())
    costs = [node_cost(shape, shards, shard_bytes, node, limit) for node in range(shape.nodes)]
    result = {
        "dataset": {
            "shards": len(shard_sizes),
            "samples": int(sum(shard_sizes)),
            "stored_bytes": int(shard_bytes.sum()),
        },
        "job": {
            "nodes": shape.nodes,
            "ranks_per_node": shape.ranks_per_node,
            "workers_per_rank": shape.workers_per_rank,
            "device_batch": shape.device_batch,
            "global_batch": shape.global_batch,
            "num_canonical_nodes": shape.num_canonical_nodes,
            "shuffle": config.shuffle,
            "shuffle_algo": config.algo,
            "shuffle_block_size": config.block_size,
            "seed": config.seed,
            "epoch": shape.epoch,
            "cache_limit": cache_limit,
        },
        "steps": len(batches),
        "shards_per_batch": shards_per_batch(shards.reshape(len(shards), -1)),
        "displacement": displacement(positions_of(order), positions_of(plain[: len(order)])),
        "nodes": [cost.__dict__ for cost in costs],
        "seconds": time.perf_counter() - started,
    }
    return result, shards


def _run(args: argparse.Namespace) -> int:
    cache_limit, bandwidth = args.cache_limit, args.bandwidth  # bytes, checked when parsed
    if args.plot:
        _check_plot_path(args.plot)
    with open_source(args.url, options=download_options(args), split=args.split) as source:
        sizes = [entry.samples for entry in source.entries]
        shard_bytes = np.asarray(source.shard_bytes, dtype=np.int64)
    shape = JobShape(
        shard_sizes=tuple(sizes),
        num_canonical_nodes=args.num_canonical_nodes
        or args.nodes * (64 if args.shuffle_algo in ("py1s", "py2s") else 1),
        nodes=args.nodes,
        ranks_per_node=args.ranks_per_node,
        workers_per_rank=args.workers,
        device_batch=args.batch_size,
        seed=args.seed,
        epoch=args.epoch,
    )
    config = ShuffleConfig(
        not args.no_shuffle, args.shuffle_algo, args.seed, args.shuffle_block_size
    )
    result, shards = simulate(sizes, shard_bytes, shape, config, cache_limit)
    result["bandwidth"] = bandwidth
    for node in result["nodes"]:
        node["first_step_seconds"] = node["first_step_bytes"] / max(bandwidth, 1)
    if args.plot:
        try:
            _plot(args.plot, node_sequence(shape, shards, 0), shard_bytes, result)
        except OSError as exc:
            raise ConfigurationError(f"--plot {args.plot}: cannot write it: {exc}") from exc
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print(shape, result)
    if args.plot:
        print(f"figure: {args.plot}")
    return 0


def _print(shape: JobShape, result: dict[str, Any]) -> None:
    job = result["job"]
    shuffle = f"{job['shuffle_algo']} (seed {job['seed']})" if job["shuffle"] else "off"
    limit = job["cache_limit"]
    print(f"dataset     {result['dataset']['shards']:,} shards, {shape.epoch_size:,} samples, "
          f"{format_bytes(result['dataset']['stored_bytes'])}")  # fmt: skip
    print(f"job         {shape.nodes} nodes x {shape.ranks_per_node} ranks x "
          f"{shape.workers_per_rank} workers, device batch {shape.device_batch} (global "
          f"{shape.global_batch}), {shape.num_canonical_nodes} canonical nodes, shuffle "
          f"{shuffle}")  # fmt: skip
    print(f"steps       {result['steps']:,}")
    print(
        f"mixing      {result['shards_per_batch']:.1f} shards per global batch; "
        f"displacement {result['displacement']:.3f} (0: storage order, ~0.33: uniform)"
    )
    cache = "unlimited" if limit is None else format_bytes(limit)
    print(f"per node    (cache {cache}, {format_bytes(result['bandwidth'])}/s)")
    print("  node  shards  minimum     downloaded  (x min)  cache needed  first step")
    for node in result["nodes"]:
        ratio = node["downloaded_bytes"] / max(node["min_bytes"], 1)
        print(
            f"  {node['node']:>4}  {node['distinct_shards']:>6,}  "
            f"{format_bytes(node['min_bytes']):>10}  {format_bytes(node['downloaded_bytes']):>10}"
            f"  {ratio:>6.2f}x  {format_bytes(node['cache_needed']):>12}  "
            f"{format_bytes(node['first_step_bytes'])} ({node['first_step_seconds']:.2f} s)"
        )
    print(f"({result['seconds']:.1f} s)")


def _check_plot_path(path: str) -> None:
    """Refuse a figure path whose folder is missing, before the simulation's work."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigurationError(
            f"--plot {path}: the folder {folder} does not exist; create it first or name "
            "another path"
        )
    require("matplotlib", extra="plot", purpose="shardstream simulate --plot")


def _plot(
    path: str,
    first_node: NDArray[np.int64],
    shard_bytes: NDArray[np.int64],
    result: dict[str, Any],
) -> None:
    """Two panels: bytes per node against the minimum; node 0's downloads by cache size.

    ``first_node`` is the sequence of shards node 0 reads.
    """
    matplotlib = require("matplotlib", extra="plot", purpose="shardstream simulate --plot")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot", extra="plot", purpose="shardstream simulate --plot")
    nodes = result["nodes"]
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4))
    index = np.arange(len(nodes))
    mib = 1 << 20
    left.bar(index - 0.2, [n["min_bytes"] / mib for n in nodes], 0.4, label="minimum")
    left.bar(index + 0.2, [n["downloaded_bytes"] / mib for n in nodes], 0.4, label="downloaded")
    left.set_xticks(index)
    left.set_yscale("log")
    left.set_xlabel("node")
    left.set_ylabel("MiB per epoch")
    left.set_title("bytes each node downloads")
    left.legend()
    needed = max(nodes[0]["cache_needed"], int(shard_bytes.max()))
    capacities = np.unique(np.linspace(int(shard_bytes.max()), needed * 1.2, 24).astype(np.int64))
    downloaded = [lru_bytes(first_node, shard_bytes, int(c))[0] / mib for c in capacities]
    right.plot(capacities / mib, downloaded, marker="o")
    right.set_yscale("log")
    right.axhline(nodes[0]["min_bytes"] / mib, linestyle="--", color="gray", label="minimum")
    right.set_xlabel("cache size (MiB)")
    right.set_ylabel("MiB downloaded by node 0")
    right.set_title("downloads by cache size")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
