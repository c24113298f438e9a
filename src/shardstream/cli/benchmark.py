"""``shardstream bench``: this dataset's throughput on this machine, through StreamingDataLoader.

A remote dataset (``s3://``, ``gs://``, ...) is read through a cache folder, so each pass also
reports the bytes that crossed the network (the stored size of each file the pass brought into
the cache) and their MB/s: with an empty cache, the first pass measures the link to the store
as training would use it. ``--link-mbps N`` names the link's capacity (megabits per second) and
adds to each pass the fraction of it the pass reached: of the bytes that crossed the network
for a remote dataset, of the samples' stored bytes read for a local one.
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

from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.cli.arguments import count, folder, megabits_per_second
from shardstream.cli.source import (
    DatasetSource,
    add_dataset_arguments,
    download_options,
    open_source,
)
from shardstream.errors import ConfigurationError
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
    add_dataset_arguments(parser)
    parser.add_argument("--batch-size", type=count(1), default=256, help="per-device batch (256)")
    parser.add_argument("--workers", type=count(0), default=0, help="DataLoader workers (0)")
    parser.add_argument("--epochs", type=count(1), default=1, help="passes over the data (1)")
    parser.add_argument(
        "--max-batches", type=count(1), help="stop each pass after this many batches"
    )
    parser.add_argument("--no-shuffle", action="store_true")
    parser.add_argument("--cache", type=folder, help="cache folder for a remote dataset")
    parser.add_argument(
        "--download-concurrency",
        type=count(1),
        help="downloads at once (StreamingDataset's default)",
    )
    parser.add_argument(
        "--link-mbps",
        type=megabits_per_second,
        help="your link's capacity in megabits per second (e.g. 1000): each pass also reports "
        "the fraction of it that it reached",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    options = download_options(args)
    with open_source(args.url, options=options, split=args.split) as source:
        # The size of a sample, from the index (Parquet: from the files' sizes).
        stored = (
            source.stored_bytes
            if source.parquet is not None
            else sum(entry.raw_data.bytes for entry in source.entries)
        )
        mean_sample = stored / max(source.samples, 1)
        _check_one_schema(source)
        entries = None if source.parquet is not None else source.entries
    from shardstream.dataset.streaming import StreamingDataset  # torch-facing: loaded lazily
    from shardstream.loader import StreamingDataLoader

    with contextlib.ExitStack() as stack:
        cache = args.cache
        if is_remote(args.url) and cache is None:
            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="shardstream-bench-"))
        remote, local = (args.url, cache) if is_remote(args.url) else (None, args.url)
        extra = {}
        if args.download_concurrency is not None:
            extra["download_concurrency"] = args.download_concurrency
        dataset = StreamingDataset(
            remote=remote, local=local, split=args.split or None, batch_size=args.batch_size,
            shuffle=not args.no_shuffle, download_retry=options.retry,
            download_timeout=options.timeout, **extra,
        )  # fmt: skip
        loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
        # Where the pass's downloads land: the split's folder of the cache.
        folder = None if remote is None else os.path.join(str(cache), args.split.strip("/"))
        passes = []
        for epoch in range(args.epochs):
            before = _cached(folder, entries)
            run = _one_pass(loader, args.max_batches, not args.quiet, epoch)
            after = _cached(folder, entries)
            moved = sum(size for name, size in after.items() if name not in before)
            run["bytes_downloaded"] = moved
            run["download_mb_per_s"] = moved / run["seconds"] / 1e6 if run["seconds"] else 0.0
            passes.append(run)
    for run in passes:
        run["mb_per_s"] = run["samples_per_s"] * mean_sample / 1e6
        if args.link_mbps is not None:
            run["fraction_of_link"] = link_fraction(run, args.link_mbps, remote=remote is not None)
    result = {
        "url": args.url, "remote": remote is not None, "batch_size": args.batch_size,
        "workers": args.workers, "mean_sample_bytes": mean_sample, "passes": passes,
    }  # fmt: skip
    if args.link_mbps is not None:
        result["link_mbps"] = args.link_mbps
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
            + (
                f"; {run['fraction_of_link']:.0%} of a {args.link_mbps:g} Mbit/s link"
                if args.link_mbps is not None
                else ""
            )
        )
    return 0


def link_fraction(run: dict[str, Any], link_mbps: float, *, remote: bool) -> float:
    """The share of a link of ``link_mbps`` megabits per second that a pass ``run`` reached.

    A remote dataset's pass is rated by the bytes that crossed the network (a pass that read
    the cache moved none); a local one's by the samples' stored bytes it read.
    """
    mb_per_s = run["download_mb_per_s"] if remote else run["mb_per_s"]
    return float(mb_per_s) * 8 / link_mbps


def _cached(folder: str | None, entries: list[ShardEntry] | None) -> dict[str, int]:
    """The files in the cache ``folder``, each with the bytes its download moved.

    MDS (``entries``: the index's): a compressed shard moved its compressed size, though the
    cache may keep only what it was decompressed into. Parquet (``None``): each file's size.
    """
    if folder is None or not os.path.isdir(folder):
        return {}
    found: dict[str, int] = {}
    if entries is None:
        for parent, _, names in os.walk(folder):
            if STATE_FOLDER in os.path.relpath(parent, folder).split(os.sep):
                continue  # locks and records: not the dataset's bytes
            for name in names:
                with contextlib.suppress(FileNotFoundError):  # a temporary, renamed meanwhile
                    found[os.path.join(parent, name)] = os.path.getsize(os.path.join(parent, name))
        return found
    for entry in entries:
        for raw, zipped in shard_file_pairs(entry):
            names = [raw.basename] + ([zipped.basename] if zipped is not None else [])
            if any(os.path.exists(os.path.join(folder, name)) for name in names):
                found[raw.basename] = (zipped or raw).bytes
    with contextlib.suppress(FileNotFoundError):
        found[INDEX_BASENAME] = os.path.getsize(os.path.join(folder, INDEX_BASENAME))
    return found


def _check_one_schema(source: DatasetSource) -> None:
    """Refuse shards of different columns: their samples cannot be batched together."""
    schemas: dict[tuple[tuple[str, str], ...], str] = {}
    for entry in source.entries:
        schemas.setdefault(tuple(entry.columns.items()), entry.raw_data.basename)
    if len(schemas) > 1:
        (first, one), (second, other) = list(schemas.items())[:2]
        raise ConfigurationError(
            f"{source.url} mixes shards of different columns ({one}: {_names(first)}; {other}: "
            f"{_names(second)}), which do not batch together: bench one kind at a time"
        )


def _names(schema: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{name}:{encoding}" for name, encoding in schema)


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
