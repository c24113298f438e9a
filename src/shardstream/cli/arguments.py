"""The command line's argument types: every value is checked while the command line is parsed.

The rule: whatever the command line alone decides (a count's range, a size, a codec, a column
list, that a dataset path is a folder and an output path is not a file) is checked here, as
argparse parses it, before a command reads a byte or draws a progress bar. A wrong value exits
with the usage code (2) and one line on stderr that names the argument. Each check reuses the
library's own rule (``parse_bytes``, ``get_compression``, ``check_hash_names``,
``get_encoding``), so the command line accepts exactly what the library does. What only the
data can decide (a column the dataset lacks) is checked by the command before its first bar.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from shardstream.errors import ShardstreamError
from shardstream.format.compression import get_compression
from shardstream.format.encodings import get_encoding
from shardstream.format.hashing import check_hash_names
from shardstream.format.index import INDEX_BASENAME
from shardstream.storage import is_remote, local_path
from shardstream.units import parse_bytes

__all__ = [
    "byte_size",
    "column_encodings",
    "column_names",
    "compression",
    "count",
    "dataset_root",
    "delimiter",
    "folder",
    "hash_names",
    "megabits_per_second",
    "output_root",
    "positive_seconds",
    "table_version",
]

T = TypeVar("T")


def _library(check: Callable[[str], T]) -> Callable[[str], T]:
    """``check`` as an argparse type: the library's refusal becomes the usage error's line."""

    def parse(text: str) -> T:
        try:
            return check(text)
        except ShardstreamError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = check.__name__
    return parse


def count(minimum: int) -> Callable[[str], int]:
    """A whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """A number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def megabits_per_second(text: str) -> float:
    """A link's capacity in megabits per second: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of megabits per second (e.g. 1000 for 1 Gbit/s)"
        ) from None
    if not 0 < value < float("inf"):  # NaN too
        raise argparse.ArgumentTypeError(
            f"must be a number of megabits per second above 0 (e.g. 1000 for 1 Gbit/s), got {text}"
        )
    return value


@_library
def byte_size(text: str) -> int:
    """A size such as ``64mb`` (as ``parse_bytes`` reads it), of at least one byte."""
    value = parse_bytes(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


@_library
def compression(text: str) -> str | None:
    """A shard compression such as ``zstd`` or ``zstd:7``; ``none`` for none."""
    if text.lower() == "none":
        return None
    get_compression(text)
    return text


@_library
def hash_names(text: str) -> list[str] | None:
    """Comma-separated digests, in the order and uniqueness the index needs."""
    names = sorted({name.strip() for name in text.split(",") if name.strip()})
    return check_hash_names(names) or None


@_library
def column_encodings(text: str) -> dict[str, str]:
    """``name:encoding`` pairs, comma-separated, each encoding a registered one."""
    columns = {}
    for item in _column_items(text):
        name, sep, encoding = item.partition(":")
        if not sep or not name.strip() or not encoding.strip():
            raise argparse.ArgumentTypeError(
                f"{item!r} is not name:encoding; write e.g. --columns text:str,label:int"
            )
        get_encoding(encoding.strip())
        columns[name.strip()] = encoding.strip()
    return columns


def _column_items(text: str) -> list[str]:
    """The items of a column list; the commas inside ``ndarray:float32:3,32,32`` stay."""
    items: list[str] = []
    for part in text.split(","):
        if items and ":" not in part:
            items[-1] += "," + part  # a shape's next dimension
        else:
            items.append(part)
    return items


def column_names(text: str) -> list[str]:
    """Comma-separated column names, none empty."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty column name; write e.g. --columns text,label"
        )
    return names


def folder(text: str) -> str:
    """A local folder to keep files in (made when missing), never an existing file."""
    if os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text} is a file: name a folder (new or existing)")
    return text


def delimiter(text: str) -> str:
    """One character."""
    if len(text) != 1:
        raise argparse.ArgumentTypeError(f"must be one character, got {text!r}")
    return text


def table_version(text: str) -> int | str:
    """A Delta table's version: a number, or an ISO 8601 time."""
    if text.isdigit():
        return int(text)
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a version number nor an ISO 8601 time (e.g. 2024-05-01T12:00)"
        ) from None
    return text


def dataset_root(*, parquet_file: bool = False) -> Callable[[str], str]:
    """A dataset's root folder or URL; with ``parquet_file``, also one local Parquet file.

    A local file (the ``index.json``, a shard, a Parquet file) is refused naming the folder to
    give instead; so is a URL that ends in ``index.json``.
    """

    def parse(text: str) -> str:
        if is_remote(text):
            if text.rstrip("/").rsplit("/", 1)[-1] == INDEX_BASENAME:
                parent = text.rstrip("/").rsplit("/", 1)[0]
                raise argparse.ArgumentTypeError(
                    f"{text} is the dataset's index, not its root: name the folder, {parent}"
                )
            return text
        path = local_path(text)
        if not os.path.isfile(path):
            return text
        if parquet_file and path.endswith((".parquet", ".pq")):
            return text
        folder = os.path.dirname(text.rstrip("/")) or "."
        if os.path.basename(path) == INDEX_BASENAME:
            what = "the dataset's index"
        elif path.endswith((".parquet", ".pq")):
            what = "one Parquet file (shardstream inspect reads one)"
        else:
            what = "a file"
        raise argparse.ArgumentTypeError(
            f"{text} is {what}, not a dataset: name the dataset's folder, e.g. {folder}"
        )

    parse.__name__ = "dataset folder"
    return parse


def output_root(text: str) -> str:
    """A new dataset's root: a folder (new or not) or a URL, never an existing file."""
    if not is_remote(text) and os.path.isfile(local_path(text)):
        raise argparse.ArgumentTypeError(
            f"{text} is a file: name a folder for the new dataset (a new one, or an empty one)"
        )
    return text
