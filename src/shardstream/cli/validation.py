"""``shardstream validate``: each file against its size and digests, each sample decoded."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from shardstream.cli.arguments import folder
from shardstream.cli.source import (
    DatasetSource,
    add_dataset_arguments,
    download_options,
    open_source,
    stored_files,
)
from shardstream.errors import ShardstreamError
from shardstream.format.hashing import hash_bytes
from shardstream.format.index import FileInfo
from shardstream.format.sample_codec import DECODE_ERRORS

__all__ = ["Report", "register", "validate"]

_DECODE_CHUNK = 1024  # samples decoded at once

# A reader's advice for a damaged cached copy; validate may be reading the only copy there is.
_REFETCH_ADVICE = re.compile(
    r"delete (?:it|the file|the shard and its \.meta file) so (?:it is|they are) fetched "
    r"again(?:, or rewrite the dataset)?"
)
_REWRITE_ADVICE = (
    "the dataset's own copy is damaged (keep it for now): write the shard again from its "
    "source, or restore it from a backup"
)


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``validate`` to the sub-commands."""
    parser = commands.add_parser(
        "validate",
        parents=parents,
        help="check every shard's size and digests and decode every sample",
        description="Download (if remote) and check each shard: its size and every digest the "
        "index records, then decode every sample. Exits 1 if anything is wrong, naming the "
        "shard and what. Example: shardstream validate s3://bucket/my-ds",
    )
    add_dataset_arguments(parser)
    parser.add_argument(
        "--cache",
        type=folder,
        help="download remote shards into this folder and keep them (default: a temporary "
        "folder, each shard deleted once checked)",
    )
    parser.add_argument(
        "--no-decode", action="store_true", help="check sizes and digests only (faster)"
    )
    parser.add_argument(
        "--allow-unsafe-types", action="store_true", help="decode pkl columns (runs code)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(run=_run)


@dataclass
class Report:
    """What ``validate`` found."""

    shards: int = 0
    samples: int = 0
    digests: int = 0
    #: Stored files whose index entry records no digest: their bytes were not checked.
    undigested: int = 0
    problems: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


def validate(
    source: DatasetSource,
    *,
    decode: bool = True,
    allow_unsafe_types: bool = False,
    keep: bool = True,
    progress: bool = True,
) -> Report:
    """Check every shard of ``source``; problems are collected, not raised."""
    report = Report()
    bar = tqdm(
        total=source.samples, unit="sample", desc="validate", disable=not progress, leave=False
    )
    # Compressed shards are decompressed here, never into the dataset's own folder.
    with bar, tempfile.TemporaryDirectory(prefix="shardstream-validate-") as scratch:
        dataset = source.dataset(allow_unsafe_types=allow_unsafe_types, cache_dir=scratch)
        for number, entry in enumerate(source.entries):
            name = entry.raw_data.basename
            try:
                source.fetch(number)
                for info in stored_files(entry):
                    checked = _check_file(source, info, report, name)
                    report.digests += checked
                    report.undigested += not info.hashes
                if decode and not _has_problem(report, name):
                    _decode_all(dataset, number, entry.samples)
                    report.samples += entry.samples
            except (ShardstreamError, OSError, *DECODE_ERRORS) as exc:
                problem = _REFETCH_ADVICE.sub(_REWRITE_ADVICE, str(exc))
                report.problems.append({"shard": name, "problem": problem})
            finally:
                dataset.release(number)
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(scratch, entry.raw_data.basename))
                if not keep:
                    source.drop(number)
            report.shards += 1
            bar.update(entry.samples)
    return report


def _check_file(source: DatasetSource, info: FileInfo, report: Report, shard: str) -> int:
    """Check one stored file's size and digests; return how many digests were checked."""
    path = os.path.join(source.local, info.basename)
    with open(path, "rb") as handle:
        data = handle.read()
    if len(data) != info.bytes:
        report.problems.append(
            {
                "shard": shard,
                "problem": f"{info.basename} is {len(data)} bytes but the index says {info.bytes}",
            }
        )
        return 0
    for algorithm, expected in sorted(info.hashes.items()):
        actual = hash_bytes(algorithm, data)
        if actual != expected:
            report.problems.append(
                {
                    "shard": shard,
                    "problem": f"{info.basename}: {algorithm} digest is {actual} but the index "
                    f"says {expected}",
                }
            )
    return len(info.hashes)


def _has_problem(report: Report, shard: str) -> bool:
    return any(problem["shard"] == shard for problem in report.problems)


def _decode_all(dataset: Any, shard: int, samples: int) -> None:
    """Decode every sample of one shard (each corrupt one raises, naming it)."""
    view = dataset.shard_view(shard)
    get_many = getattr(view, "get_many", None)
    for start in range(0, samples, _DECODE_CHUNK):
        indices = range(start, min(start + _DECODE_CHUNK, samples))
        if get_many is not None:
            get_many(list(indices))
        else:
            for index in indices:
                view.get(index)


def _run(args: argparse.Namespace) -> int:
    with open_source(
        args.url, args.cache, progress=not args.quiet, options=download_options(args),
        split=args.split,
    ) as source:  # fmt: skip
        report = validate(
            source,
            decode=not args.no_decode,
            allow_unsafe_types=args.allow_unsafe_types,
            keep=args.cache is not None or source.store is None,
            progress=not args.quiet,
        )
    if args.json:
        print(json.dumps({"ok": report.ok, **report.__dict__}, indent=2))
    else:
        for problem in report.problems:
            print(f"PROBLEM {problem['shard']}: {problem['problem']}")
        verdict = "OK" if report.ok else f"{len(report.problems)} problem(s)"
        print(
            f"{verdict}: {report.shards:,} shards, {report.digests:,} digests checked, "
            f"{report.samples:,} samples decoded"
        )
        if report.undigested:
            print(_unchecked(report, parquet=source.parquet is not None))
    return 0 if report.ok else 1


def _unchecked(report: Report, *, parquet: bool) -> str:
    """What was not checked: files with no digest recorded, and how to record them."""
    if parquet:
        return (
            "NOTE: Parquet files carry no digests in an index: their bytes were checked by size "
            "and by decoding only"
        )
    files = "every file" if report.digests == 0 else f"{report.undigested:,} files"
    return (
        f"NOTE: the index records no digest for {files}, so their bytes were NOT checked "
        "against digests (only sizes, and that samples decode): changed bytes that still "
        "decode go unseen. Record digests when writing: shardstream convert --hashes xxh64, "
        "MDSWriter(..., hashes=['xxh64']) or mds_kwargs={'hashes': ['xxh64']}"
    )
