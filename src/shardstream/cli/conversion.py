"""``shardstream convert``: Parquet, CSV, JSONL, Delta, image folders or Spark sources to MDS."""

from __future__ import annotations

import argparse
import glob
import os
from typing import Any

from shardstream._optional import require
from shardstream.cli.arguments import (
    byte_size,
    column_encodings,
    compression,
    delimiter,
    hash_names,
    output_root,
    table_version,
)
from shardstream.cli.source import open_source
from shardstream.converters.image_folder import IMAGE_ENCODINGS
from shardstream.converters.parquet import parquet_files_to_mds
from shardstream.errors import ConfigurationError
from shardstream.storage import is_remote, open_store
from shardstream.writer.publish import check_destination

__all__ = ["register"]

SOURCES = ("parquet", "csv", "jsonl", "images", "spark", "delta")


def register(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``convert`` to the sub-commands."""
    parser = commands.add_parser(
        "convert",
        parents=parents,
        help="turn Parquet, CSV, JSONL, an image folder or anything Spark reads into MDS",
        description="Convert SOURCE (a file, a folder of files, or a glob) into an MDS dataset "
        "at OUT (a folder or a URL such as s3://bucket/ds). The kind is guessed from the "
        "extension unless --from is given. Examples: shardstream convert data/*.parquet "
        "s3://bucket/ds; shardstream convert photos/ out/ --from images --image-encoding jpeg; "
        "shardstream convert events/ out/ --from spark --spark-format orc",
    )
    parser.add_argument("source", help="a file, a folder or a glob")
    parser.add_argument("out", type=output_root, help="the new dataset's root: a folder or a URL")
    parser.add_argument("--from", dest="kind", choices=SOURCES, help="the kind of SOURCE")
    parser.add_argument(
        "--compression", type=compression, default="zstd", help="shard compression ('zstd'; 'none')"
    )
    parser.add_argument(
        "--hashes", type=hash_names, default="", help="comma-separated digests to record"
    )
    parser.add_argument(
        "--size-limit", type=byte_size, default="64mb", help="shard size limit ('64mb')"
    )
    parser.add_argument(
        "--columns",
        type=column_encodings,
        help="the columns to write and their encodings, comma-separated name:encoding "
        "(e.g. 'img:jpeg,y:int8'; default: every column, encodings inferred)",
    )
    parser.add_argument(
        "--skip-nulls", action="store_true", help="drop rows with nulls instead of failing"
    )
    parser.add_argument("--delimiter", type=delimiter, default=",", help="CSV delimiter (',')")
    parser.add_argument(
        "--image-encoding",
        default="bytes",
        choices=IMAGE_ENCODINGS,
        help="images: bytes (as stored), jpeg, png or pil",
    )
    parser.add_argument(
        "--spark-format", default="parquet", help="--from spark: spark.read.format (parquet)"
    )
    parser.add_argument(
        "--spark-master", default="local[*]", help="--from spark: the master ('local[*]')"
    )
    parser.add_argument(
        "--version",
        dest="table_version",
        type=table_version,
        help="--from delta: the table version, a number or an ISO 8601 time (default: latest)",
    )
    parser.add_argument("--exist-ok", action="store_true", help="write into a non-empty OUT")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from shardstream import converters

    kind = args.kind or _guess(args.source)
    if not args.exist_ok:
        # The writer's refusal of a destination that holds files, before any bar (or Spark)
        # starts: the writer itself starts at the first row.
        check_destination(open_store(args.out), exist_ok=False, hint="--exist-ok")
    # Each value was checked as the command line was parsed (shardstream.cli.arguments).
    writer: dict[str, Any] = {
        "compression": args.compression,
        "hashes": args.hashes,
        "size_limit": args.size_limit,
        "exist_ok": args.exist_ok,
    }
    columns = args.columns
    progress = not args.quiet
    on_null = "skip" if args.skip_nulls else "error"
    if kind == "images":
        written = converters.image_folder_to_mds(
            args.source, args.out, image_encoding=args.image_encoding, progress=progress,
            progress_bar=progress and is_remote(args.out), **writer,
        )  # fmt: skip
    elif kind == "spark":
        written = _spark(args, columns, writer, on_null, progress)
    elif kind == "delta":
        written = converters.delta_to_mds(
            args.source, args.out, version=args.table_version, columns=columns,
            on_null="skip" if args.skip_nulls else "error", progress=progress,
            progress_bar=progress and is_remote(args.out), **writer,
        )  # fmt: skip
    else:
        # Beside the bar of rows, one of bytes uploaded when OUT is a URL.
        writer["progress_bar"] = progress and is_remote(args.out)
        paths = _paths(args.source, kind)
        common: dict[str, Any] = {"columns": columns, "on_null": on_null, "progress": progress}
        if kind == "csv":
            written = converters.csv_to_mds(
                paths, args.out, delimiter=args.delimiter, **common, **writer
            )
        elif kind == "jsonl":
            written = converters.jsonl_to_mds(paths, args.out, **common, **writer)
        else:
            written = parquet_files_to_mds(paths, args.out, where=args.source, **common, **writer)
    print(f"wrote {written:,} samples to {args.out}")
    return 0


def _spark(
    args: argparse.Namespace,
    columns: dict[str, str] | None,
    writer: dict[str, Any],
    on_null: str,
    progress: bool,
) -> int:
    from shardstream.converters import dataframe_to_mds

    sql = require("pyspark.sql", extra="spark", purpose="shardstream convert --from spark")
    session = (
        sql.SparkSession.builder.master(args.spark_master)
        .appName("shardstream convert")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        frame = session.read.format(args.spark_format).load(args.source)
        kwargs = {"out": args.out, **writer, **({"columns": columns} if columns else {})}
        dataframe_to_mds(frame, mds_kwargs=kwargs, on_null=on_null, progress=progress)  # type: ignore[arg-type]
    finally:
        session.stop()
    with open_source(args.out) as written:
        return written.samples


def _guess(source: str) -> str:
    if not is_remote(source) and os.path.isdir(os.path.join(source, "_delta_log")):
        return "delta"  # before its *.parquet files, which include removed versions' files
    if os.path.isdir(source):
        names = os.listdir(source)
        for kind, ext in (("parquet", ".parquet"), ("csv", ".csv"), ("jsonl", ".jsonl")):
            if any(name.endswith(ext) for name in names):
                return kind
        if any(os.path.isdir(os.path.join(source, name)) for name in names):
            return "images"
    for kind, extensions in (
        ("parquet", (".parquet", ".pq")),
        ("csv", (".csv", ".tsv")),
        ("jsonl", (".jsonl", ".json", ".ndjson")),
    ):
        if source.endswith(extensions):
            return kind
    raise ConfigurationError(
        f"cannot tell what {source!r} holds: pass --from with one of {', '.join(SOURCES)}"
    )


def _paths(source: str, kind: str) -> list[str]:
    """The files of ``source``: itself, the matching files of a folder, or a glob's matches."""
    extensions = {"parquet": (".parquet", ".pq"), "csv": (".csv", ".tsv"),
                  "jsonl": (".jsonl", ".json", ".ndjson")}[kind]  # fmt: skip
    if os.path.isdir(source):
        found = sorted(
            os.path.join(folder, name)
            for folder, _, names in os.walk(source)
            for name in names
            if name.endswith(extensions)
        )
    elif os.path.exists(source):
        found = [source]
    else:
        found = sorted(glob.glob(source))
    if not found:
        raise ConfigurationError(
            f"no {kind} files in {source!r} (looked for {', '.join(extensions)}): check the "
            "path, or pass --from with the kind of files it holds"
        )
    return found
