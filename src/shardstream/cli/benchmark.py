"""``shardstream bench``: this dataset's throughput on this machine, through StreamingDataLoader.

A remote dataset (``s3://``, ``gs://``, ...) is read through a cache folder, so each pass also
reports the bytes that crossed the network (the stored size of each file the pass brought into
the cache) and their MB/s: with an empty cache, the first pass measures the link to the store
as training would use it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from typing import Any

from tqdm import tqdm

from shardstream.cache.shard_files import shard_file_pairs
from shardstream.cli.source import open_source
from shardstream.format.index import INDEX_BASENAME, ShardEntry
from shardstream.storage import is_remote
from shardstream.units import format_bytes

__all__ = ["register"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``bench`` to the sub-commands."""
    parser = commands.add_parser(
        "bench",
        parents=parents,
        help="time to first batch and samples/s of this dataset on this machine",
        description="Read the dataset through StreamingDataset and StreamingDataLoader (needs "
        "torch) and report the time to the first batch, samples/s and MB/s. A remote dataset "
        "is cached in --cache (default: a temporary folder, so the first pass is cold), and "
        "each pass also reports the bytes it downloaded and their MB/s: the speed of the link "
        "to the store. Example: shardstream bench s3://bucket/my-ds --workers 4 --epochs 2",
    )
    parser.add_argument("url", help="the dataset root: a folder or a URL")
    parser.add_argument("--batch-size", type=int, default=256, help="per-device batch (256)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (0)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the data (1)")
    parser.add_argument("--max-batches", type=int, help="stop each pass after this many batches")
    parser.add_argument("--no-shuffle", action="store_true")
    parser.add_argument("--cache", help="cache folder for a remote dataset")
    parser.add_argument(
        "--download-concurrency", type=int, help="downloads at once (StreamingDataset's default)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from shardstream.dataset.streaming import StreamingDataset  # torch-facing: loaded lazily
    from shardstream.loader import StreamingDataLoader

    with open_source(args.url) as source:  # the size of a sample, from the index
        entries = source.entries
        stored = sum(entry.raw_data.bytes for entry in entries)
        mean_sample = stored / max(source.samples, 1)
    with contextlib.ExitStack() as stack:
        cache = args.cache
        if is_remote(args.url) and cache is None:
            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="shardstream-bench-"))
        remote, local = (args.url, cache) if is_remote(args.url) else (None, args.url)
        options = {}
        if args.download_concurrency is not None:
            options["download_concurrency"] = args.download_concurrency
        dataset = StreamingDataset(
            remote=remote, local=local, batch_size=args.batch_size, shuffle=not args.no_shuffle,
            **options,
        )  # fmt: skip
        loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
        passes = []
        for epoch in range(args.epochs):
            before = _cached(cache, entries) if remote is not None else {}
            run = _one_pass(loader, args.max_batches, not args.quiet, epoch)
            after = _cached(cache, entries) if remote is not None else {}
            moved = sum(size for name, size in after.items() if name not in before)
            run["bytes_downloaded"] = moved
            run["download_mb_per_s"] = moved / run["seconds"] / 1e6 if run["seconds"] else 0.0
            passes.append(run)
    for run in passes:
        run["mb_per_s"] = run["samples_per_s"] * mean_sample / 1e6
    result = {
        "url": args.url, "remote": remote is not None, "batch_size": args.batch_size,
        "workers": args.workers, "mean_sample_bytes": mean_sample, "passes": passes,
    }  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.url}: batch {args.batch_size}, {args.workers} workers, "
          f"~{format_bytes(int(mean_sample))} per sample")  # fmt: skip
    for number, run in enumerate(passes):
        print(
            f"  pass {number}: first batch {run['first_batch_s']:.3f} s, "
            f"{run['samples']:,} samples in {run['seconds']:.2f} s: "
            f"{run['samples_per_s']:,.0f} samples/s, {run['mb_per_s']:,.1f} MB/s"
            + (
                f"; downloaded {format_bytes(run['bytes_downloaded'])} at "
                f"{run['download_mb_per_s']:,.1f} MB/s"
                if result["remote"]
                else ""
            )
        )
    return 0


def _cached(folder: str | None, entries: list[ShardEntry]) -> dict[str, int]:
    """The index's files in the cache ``folder``, each with the bytes its download moved.

    A compressed file moved its compressed size, though the cache may keep only what it was
    decompressed into.
    """
    if folder is None:
        return {}
    found = {}
    for entry in entries:
        for raw, zipped in shard_file_pairs(entry):
            names = [raw.basename] + ([zipped.basename] if zipped is not None else [])
            if any(os.path.exists(os.path.join(folder, name)) for name in names):
                found[raw.basename] = (zipped or raw).bytes
    with contextlib.suppress(FileNotFoundError):
        found[INDEX_BASENAME] = os.path.getsize(os.path.join(folder, INDEX_BASENAME))
    return found


def _one_pass(loader: Any, max_batches: int | None, progress: bool, epoch: int) -> dict[str, Any]:
    started = time.perf_counter()
    first = None
    samples = 0
    with tqdm(desc=f"pass {epoch}", unit="sample", disable=not progress, leave=False) as bar:
        for number, batch in enumerate(loader):
            if first is None:
                first = time.perf_counter() - started
            count = len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)
            samples += count
            bar.update(count)
            if max_batches is not None and number + 1 >= max_batches:
                break
    seconds = time.perf_counter() - started
    return {
        "first_batch_s": first or 0.0,
        "samples": samples,
        "seconds": seconds,
        "samples_per_s": samples / seconds if seconds else 0.0,
    }
