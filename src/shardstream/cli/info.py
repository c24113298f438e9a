"""``shardstream inspect`` (what a dataset holds) and ``shardstream head`` (its first samples)."""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from typing import Any

import numpy as np

from shardstream.cli.arguments import column_names, count, folder
from shardstream.cli.source import (
    DatasetSource,
    add_dataset_arguments,
    download_options,
    open_source,
)
from shardstream.errors import ConfigurationError
from shardstream.units import format_bytes

__all__ = ["describe", "readable", "register"]


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``inspect`` and ``head`` to the sub-commands."""
    inspect = commands.add_parser(
        "inspect",
        parents=parents,
        help="schema, shards, samples, sizes, compression and hashes of a dataset",
        description="Summarise a dataset from its index.json: nothing else is downloaded. "
        "Example: shardstream inspect s3://bucket/my-ds",
    )
    add_dataset_arguments(inspect, parquet_file=True)
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(run=_inspect)

    head = commands.add_parser(
        "head",
        parents=parents,
        help="print the first samples of a dataset, readably",
        description="Print the first N samples (downloading only the shards that hold them). "
        "Example: shardstream head s3://bucket/my-ds -n 3",
    )
    add_dataset_arguments(head)
    head.add_argument(
        "-n", "--samples", type=count(0), default=5, help="how many (0 or more; default 5)"
    )
    head.add_argument(
        "--columns", type=column_names, help="comma-separated columns to show (default: all)"
    )
    head.add_argument("--cache", type=folder, help="keep downloaded shards in this folder")
    head.add_argument(
        "--allow-unsafe-types", action="store_true", help="decode pkl columns (runs code)"
    )
    head.set_defaults(run=_head)


def describe(source: DatasetSource) -> dict[str, Any]:
    """The summary ``inspect`` prints, as plain data."""
    entries = source.entries
    samples = [entry.samples for entry in entries]
    stored = source.shard_bytes
    raw_bytes = (
        source.stored_bytes
        if source.parquet is not None
        else sum(entry.raw_data.bytes for entry in entries)
    )
    schemas = Counter(
        tuple(
            (name, encoding, size)
            for (name, encoding), size in zip(
                entry.columns.items(),
                entry.column_sizes or (None,) * len(entry.columns),
                strict=True,
            )
        )
        for entry in entries
    )
    snapshot = None if source.parquet is None else source.parquet.snapshot
    return {
        "url": source.url,
        "format": source.format,
        # A Delta table: the version read (the latest) and the latest when it was read.
        **({} if snapshot is None else {"version": snapshot.version, "latest": snapshot.latest}),
        "shards": len(entries),
        "samples": sum(samples),
        "formats": dict(Counter(entry.format for entry in entries)),
        "schemas": [
            {
                "shards": count,
                "columns": [
                    {"name": name, "encoding": encoding, "size": size}
                    for name, encoding, size in schema
                ],
            }
            for schema, count in schemas.most_common()
        ],
        "compression": dict(Counter(entry.compression or "none" for entry in entries)),
        "hashes": sorted({name for entry in entries for name in entry.hashes}),
        "stored_bytes": source.stored_bytes,
        "raw_bytes": raw_bytes,
        "size_limits": sorted({entry.size_limit for entry in entries}, key=lambda x: x or 0),
        "samples_per_shard": _spread(samples),
        "bytes_per_shard": _spread(stored),
    }


def _spread(values: list[int]) -> dict[str, float]:
    if not values:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _inspect(args: argparse.Namespace) -> int:
    with open_source(args.url, options=download_options(args), split=args.split) as source:
        summary = describe(source)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"dataset      {summary['url']}")
    print(f"format       {_format(summary)}")
    formats = ", ".join(f"{name} ({count})" for name, count in summary["formats"].items())
    print(f"shards       {summary['shards']:,}  ({formats or 'none'})")
    print(f"samples      {summary['samples']:,}")
    print(
        f"size         {format_bytes(summary['stored_bytes'])} stored, "
        f"{format_bytes(summary['raw_bytes'])} uncompressed"
    )
    compression = ", ".join(f"{name} ({n})" for name, n in summary["compression"].items())
    print(f"compression  {compression or 'none'}")
    print(f"hashes       {', '.join(summary['hashes']) or 'none'}")
    spread, sizes = summary["samples_per_shard"], summary["bytes_per_shard"]
    print(
        f"per shard    {spread['min']:,}-{spread['max']:,} samples (median {spread['median']:,}), "
        f"{format_bytes(int(sizes['min']))}-{format_bytes(int(sizes['max']))}"
    )
    for schema in summary["schemas"]:
        print(f"columns      ({schema['shards']:,} shards)")
        for column in schema["columns"]:
            size = "" if column["size"] is None else f"  [{column['size']} bytes]"
            print(f"  {column['name']:<20} {column['encoding']}{size}")
    return 0


def _format(summary: dict[str, Any]) -> str:
    """The dataset's format in words; a Delta table's with its version."""
    if summary["format"] == "delta":
        return f"Delta table, version {summary['version']} (the latest)"
    return {"mds": "MDS", "parquet": "Parquet"}[summary["format"]]


def _head(args: argparse.Namespace) -> int:
    wanted = args.columns  # names, checked when parsed; against the dataset's below
    with open_source(
        args.url, args.cache, progress=not args.quiet, options=download_options(args),
        split=args.split,
    ) as source:  # fmt: skip
        _check_columns(wanted, source)
        total = min(args.samples, source.samples)
        shard, seen = 0, 0
        while seen < total:  # fetch only the shards that hold the first samples
            source.fetch(shard)
            seen += source.entries[shard].samples
            shard += 1
        dataset = source.dataset(allow_unsafe_types=args.allow_unsafe_types)
        for index in range(total):
            sample = dataset[index]
            names = wanted if wanted is not None else list(sample)
            print(f"[{index}]")
            for name in names:
                value = sample.get(name, "<no such column>")
                print(f"  {name}: {readable(value)}")
    return 0


def _check_columns(wanted: list[str] | None, source: DatasetSource) -> None:
    """Refuse ``--columns`` that name a column no shard has, naming the ones there are."""
    have = list(dict.fromkeys(name for entry in source.entries for name in entry.columns))
    missing = [name for name in wanted or () if name not in have]
    if missing:
        raise ConfigurationError(
            f"--columns names {', '.join(missing)}, which {source.url} does not have; its "
            f"columns are {', '.join(have)}"
        )


def readable(value: Any, width: int = 72) -> str:
    """One line for a decoded value: its type and size, and the start of its content."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value[:16])
        more = "..." if len(value) > 16 else ""
        return f"<{len(value):,} bytes: {data.hex()}{more}>"
    if isinstance(value, np.ndarray):
        flat = np.array2string(value.reshape(-1)[:8], separator=", ", threshold=8)
        more = " ..." if value.size > 8 else ""
        return f"<ndarray {value.dtype} {value.shape}: {flat}{more}>"
    if hasattr(value, "mode") and hasattr(value, "size") and hasattr(value, "getpixel"):
        return f"<image {value.mode} {value.size[0]}x{value.size[1]}>"
    if isinstance(value, list) and value and all(hasattr(v, "getpixel") for v in value):
        return f"<{len(value)} images>"
    if isinstance(value, np.generic):  # a Parquet scalar: shown as the number it holds
        value = value.item()
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
