"""The footer stage: a Parquet file's footer read once, and what it says, for every reader.

Every read of a table starts here: the streams and ``ParquetDataset`` (through
:mod:`~shardstream.tables.layout_index`), the Delta converter, Petastorm's readers and
``materialize_dataset``. A footer is read with ranged requests (the last ``FOOTER_TAIL``
bytes, and more if the footer is longer) or ``pread`` on a local file, and parsed into a
:class:`~shardstream.tables.layout.ParquetFileLayout`.

A parsed layout is kept while anything in the process holds it (a weak mapping), under what
names the file's version: a local file's path and identity tag (inode, size and times), or
the footer's own bytes. A second open of the same files in the process (Petastorm's readers
look at the footers before the dataset opens them; a dataset made again) takes the layouts
already parsed, and pays one ``stat`` per file, not a read and a parse; a file rewritten
since has another tag, and is read again.

``_common_metadata`` (Petastorm's schema file) is a Parquet footer alone: its key-value
metadata is read, and written, here too.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from shardstream._optional import require
from shardstream.errors import ShardFormatError
from shardstream.storage import DownloadOptions, ObjectStore
from shardstream.storage.local import file_identity
from shardstream.tables.layout import (
    FOOTER_TAIL,
    ParquetFileLayout,
    footer_length,
    layout_from_footer,
)
from shardstream.tables.row_group_files import fetch_range

__all__ = [
    "fetch_footer",
    "key_value_metadata",
    "local_layout",
    "parsed_layout",
    "store_layout",
    "write_metadata_file",
]

#: Parsed layouts by what names their file's version, while something holds them.
_LAYOUTS: weakref.WeakValueDictionary[tuple[Any, ...], ParquetFileLayout] = (
    weakref.WeakValueDictionary()
)
_LOCK = threading.Lock()


def parsed_layout(key: str, size: int, etag: str | None, footer: bytes) -> ParquetFileLayout:
    """:func:`~shardstream.tables.layout.layout_from_footer`, parsed once while it is held.

    Raises:
        ShardFormatError: The footer does not parse, or a row group lies outside the file.
    """
    name = ("footer", key, size, etag, footer)
    with _LOCK:
        layout = _LAYOUTS.get(name)
    if layout is None:
        layout = layout_from_footer(key, size, etag, footer)
        with _LOCK:
            _LAYOUTS[name] = layout
    return layout


def fetch_footer(
    store: ObjectStore, key: str, size: int, options: DownloadOptions, *, source: str
) -> bytes:
    """The last ``8 + footer length`` bytes of ``key`` (``size`` bytes): one request, or two.

    Raises:
        ShardFormatError: The object is not Parquet (too short, or no ``PAR1`` at its end).
        StorageError: A request failed after every retry.
    """
    if size < 12:
        footer_length(b"", size=size, source=source)  # raises: too short to be Parquet
    tail = fetch_range(store, key, max(0, size - FOOTER_TAIL), size, options)
    need = footer_length(tail, size=size, source=source) + 8
    if need > len(tail):
        tail = fetch_range(store, key, size - need, size, options)
    return tail[-need:]


def store_layout(
    store: ObjectStore, key: str, size: int, etag: str | None, options: DownloadOptions
) -> ParquetFileLayout:
    """The layout of the store's object ``key`` of ``size`` bytes, read by range.

    Raises:
        ShardFormatError: The object is not Parquet, or its footer does not parse.
        StorageError: A request failed after every retry.
    """
    footer = fetch_footer(store, key, size, options, source=store.url(key))
    return parsed_layout(key, size, etag, footer)


def local_layout(root: str, key: str) -> ParquetFileLayout:
    """The layout of the local file ``root/key``, read in place (or kept, if unchanged).

    Raises:
        FileNotFoundError: The file is not there.
        ShardFormatError: The file is not Parquet, or its footer does not parse.
    """
    path = os.path.join(root, key)
    status = os.stat(path)
    name = ("file", os.path.abspath(path), key, file_identity(status))
    with _LOCK:
        layout = _LAYOUTS.get(name)
    if layout is not None:
        return layout
    with open(path, "rb") as handle:
        status = os.fstat(handle.fileno())
        size = status.st_size
        tail = os.pread(handle.fileno(), min(size, FOOTER_TAIL), max(0, size - FOOTER_TAIL))
        need = footer_length(tail, size=size, source=path) + 8
        if need > len(tail):
            tail = os.pread(handle.fileno(), need, size - need)
    identity = file_identity(status)
    layout = parsed_layout(key, size, identity, tail[-need:])
    with _LOCK:
        _LAYOUTS[("file", os.path.abspath(path), key, identity)] = layout
    return layout


def key_value_metadata(data: bytes, *, source: str) -> dict[bytes, bytes]:
    """The key-value metadata of the Parquet metadata file ``data`` (``_common_metadata``).

    Raises:
        ShardFormatError: ``data`` is not a Parquet (metadata) file.
    """
    pa = require("pyarrow", extra="arrow", purpose="Reading Petastorm metadata")
    pq = require("pyarrow.parquet", extra="arrow", purpose="Reading Petastorm metadata")
    try:
        schema = pq.read_schema(pa.BufferReader(data))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise ShardFormatError(f"{source} is not a Parquet metadata file: {exc}") from exc
    return dict(schema.metadata or {})


def write_metadata_file(schema: Any, path: str) -> None:
    """Write a Parquet metadata file (a footer alone) of the Arrow ``schema`` at ``path``."""
    pq = require("pyarrow.parquet", extra="arrow", purpose="materialize_dataset")
    pq.write_metadata(schema, path)
