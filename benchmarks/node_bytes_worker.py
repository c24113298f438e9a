r"""One node of the bytes-per-node benchmark (started by ``node_bytes_bench.py``, once per node).

Run with the Python of the venv that holds the library under test::

    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=... \\
        .venv/bin/python benchmarks/node_bytes_worker.py --lib shardstream --data DIR ...

A simulated node is one process: one rank (the launcher's variables say which) with
``--workers`` DataLoader workers and a cache folder of its own. It reads one shuffled epoch of
``--data`` (a local folder standing for the remote) through the library's
``StreamingDataLoader`` and appends one line per shard download, ``pid basename bytes``, to
``--ledger``; the library's own download function is wrapped for that, in this process only
(DataLoader workers inherit the wrapper). Every batch is checked against its labels; the labels
go to the result so that the driver can check exactly-once delivery over all the nodes.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, run as a file

import numpy as np

from benchmarks.streaming_worker import Checker, Payloads


class Ledger:
    """Appends one line per download; each line is written by one ``write`` (O_APPEND)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def record(self, name: str, size: int) -> None:
        """One download of ``size`` bytes of the file ``name``."""
        line = f"{os.getpid()} {os.path.basename(name)} {size}\n".encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def count_shardstream(ledger: Ledger) -> None:
    """Wrap the function the shard cache downloads every shard file with."""
    shard_cache = importlib.import_module("shardstream.cache.shard_cache")
    original = shard_cache.download_file

    def counted(store: Any, key: str, *args: Any, **kwargs: Any) -> int:
        size: int = original(store, key, *args, **kwargs)
        ledger.record(key, size)
        return size

    setattr(shard_cache, "download_file", counted)  # noqa: B010 - a module typed as such


def count_reference(ledger: Ledger) -> None:
    """Wrap ``Stream._download_file``, through which mosaicml-streaming fetches every file."""
    stream = importlib.import_module("streaming.base.stream").Stream
    original = stream._download_file

    def counted(self: Any, from_basename: str, to_basename: str | None = None) -> str:
        local: str = original(self, from_basename, to_basename)
        if os.path.basename(from_basename) != "index.json":  # shards only, as on our side
            ledger.record(from_basename, os.path.getsize(local))
        return local

    stream._download_file = counted


def separate_reference_nodes(node: int, nodes: int) -> None:
    """Let simulated node ``node`` pick only shared-memory prefixes ``node`` modulo ``nodes``.

    mosaicml-streaming names its shared memory (``/dev/shm``) by a prefix that each node's
    leader picks as the lowest one free on its machine; two simulated nodes on one machine pick
    it at the same moment (after a barrier) and the second fails with ``FileExistsError``. On
    real nodes the prefixes live on different machines; here each node scans its own residue
    class, so no stale segment left by an earlier run can make two nodes meet.
    """
    prefix = importlib.import_module("streaming.base.shared.prefix")

    def own_prefixes() -> Iterator[int]:
        return itertools.count(node, nodes)

    setattr(prefix, "_each_prefix_int", own_prefixes)  # noqa: B010 - a module typed as such


def make_loader(args: argparse.Namespace) -> Any:
    options: dict[str, Any] = {
        "remote": args.data,
        "local": args.cache,
        "shuffle": True,
        "shuffle_algo": args.algo,
        "shuffle_seed": args.seed,
        "num_canonical_nodes": args.ncn,
        "batch_size": args.batch_size,
        "cache_limit": args.cache_limit,
    }
    if args.block_size:
        options["shuffle_block_size"] = args.block_size
    if args.lib == "shardstream":
        from shardstream import StreamingDataLoader, StreamingDataset

        dataset = StreamingDataset(**options)
        return StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    streaming = importlib.import_module("streaming")
    dataset = streaming.StreamingDataset(**options)
    return streaming.StreamingDataLoader(
        dataset, batch_size=args.batch_size, num_workers=args.workers
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=["shardstream", "streaming"], required=True)
    parser.add_argument("--data", required=True, help="the dataset (the 'remote')")
    parser.add_argument("--cache", required=True, help="this node's cache folder")
    parser.add_argument("--ledger", required=True, help="file of this node's downloads")
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--algo", default="py1e")
    parser.add_argument("--ncn", type=int, required=True, help="num_canonical_nodes")
    parser.add_argument("--block-size", type=int, help="shuffle_block_size (default: the libs')")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache-limit", type=int, help="cache_limit in bytes (default: none)")
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    ledger = Ledger(args.ledger)
    if args.lib == "shardstream":
        count_shardstream(ledger)
    else:
        count_reference(ledger)
        separate_reference_nodes(
            int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        )
    payloads = Payloads(args.samples, args.size, 0, args.seed)
    checker = Checker(payloads)
    started = time.perf_counter()
    loader = make_loader(args)
    for batch in loader:
        checker.batch(batch)
    seconds = time.perf_counter() - started
    labels = np.concatenate(checker.labels) if checker.labels else np.empty(0, np.int64)
    result = {
        "lib": args.lib,
        "version": importlib.import_module(args.lib).__version__,
        "rank": int(os.environ.get("RANK", "0")),
        "seconds": seconds,
        "labels": labels.astype(np.int64).tolist(),
        "sample_failures": checker.failures,
    }
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
