"""Parquet row groups as cached shards: fetched as byte ranges, read back at their offsets.

A remote row group is fetched alone: the byte span of its column chunks, one ranged request per
``part_size``, into a compact local file (``<key>.<version>.rowgroup-<n>``) written under a
temporary name and renamed. The footer is not in it: it is kept in the stream's derived index.
To read the row group, pyarrow is handed the footer's metadata and a file object that serves
the original offsets from the compact file, so the cache holds exactly the bytes downloaded (a
sparse file would count as the whole file against ``cache_limit``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Mapping
from typing import Any, cast

from shardstream._optional import require
from shardstream.cache.safe_paths import make_folders
from shardstream.errors import ShardFormatError, ShardNotFoundError, StorageError
from shardstream.format.index import ShardEntry
from shardstream.storage import DownloadOptions, ObjectStore, fetch_bytes
from shardstream.storage.local import temporary_sibling
from shardstream.tables.layout import ParquetFileLayout, RowGroupSpan

__all__ = ["RowGroupFetcher", "fetch_range", "read_row_group", "row_group_basename"]


def row_group_basename(layout: ParquetFileLayout, group: int) -> str:
    """The cache file of row group ``group`` of a file, named for the file's version.

    The name carries a digest of the file's size and etag, so a row group cached from an
    earlier version of the file is never taken for one of the current version.
    """
    version = hashlib.blake2s(f"{layout.size}:{layout.etag}".encode(), digest_size=4).hexdigest()
    return f"{layout.key}.{version}.rowgroup-{group}"


def fetch_range(
    store: ObjectStore, key: str, start: int, end: int, options: DownloadOptions
) -> bytes:
    """Bytes ``[start, end)`` of ``key``, with the timeout and retries of ``options``.

    Raises:
        StorageError: The last attempt failed (or the store sent a short body).
    """
    data = fetch_bytes(cast(ObjectStore, _Range(store, start, end)), key, options)
    if len(data) != end - start:
        raise StorageError(
            f"reading bytes [{start}, {end}) of {store.url(key)} gave {len(data)} bytes: the "
            "object changed while it was read (or the store sent a short body); if it was "
            "rewritten, start the run again"
        )
    return data


class RowGroupFetcher:
    """Fetches a stream's row groups for :class:`~shardstream.cache.ShardCache`.

    Args:
        spans: Each row group's cache basename -> (file key, row group span).
    """

    def __init__(self, spans: Mapping[str, tuple[str, RowGroupSpan]]) -> None:
        self.spans = dict(spans)

    def fetch(
        self, store: ObjectStore, entry: ShardEntry, dest: str, options: DownloadOptions
    ) -> None:
        """Download the row group ``entry`` stands for into ``dest``, atomically."""
        key, span = self.spans[entry.raw_data.basename]
        root = dest[: len(dest) - len(entry.raw_data.basename)]  # the stream's cache folder
        make_folders(os.path.dirname(dest), root=root)
        temporary = temporary_sibling(dest)
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                for first in range(span.start, span.end, options.part_size):
                    last = min(first + options.part_size, span.end)
                    data = memoryview(fetch_range(store, key, first, last, options))
                    offset = first - span.start
                    while data:
                        written = os.pwrite(fd, data, offset)
                        data, offset = data[written:], offset + written
            finally:
                os.close(fd)
            os.replace(temporary, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)
            raise


def read_row_group(
    path: str,
    metadata: Any,
    span: RowGroupSpan,
    *,
    size: int,
    compact: bool,
    columns: list[str] | None,
    source: str,
) -> Any:
    """Read one row group (projected to ``columns``) into a ``pyarrow.Table``.

    Args:
        path: The whole Parquet file, or (``compact``) the row group's cache file.
        metadata: The file's ``FileMetaData``.
        span: The row group.
        size: The whole file's size.
        compact: ``path`` holds only the span's bytes.
        columns: The columns to read (``None``: all).
        source: The file and row group, named in errors.

    Raises:
        ShardNotFoundError: The file is missing (evicted meanwhile: fetch it again).
        ShardFormatError: The bytes do not decode (the file changed since its footer was read).
    """
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    pq = require("pyarrow.parquet", extra="arrow", purpose="Reading Parquet")
    try:  # a whole file is read natively; a compact one through the offset-mapping wrapper
        handle: Any = _SpanFile(path, span, size) if compact else pa.OSFile(path)
    except FileNotFoundError as exc:
        raise ShardNotFoundError(
            f"{source}: {path} is missing (removed from the cache meanwhile?); check that "
            "nothing else deletes files in the cache folder, then start again"
        ) from exc
    try:
        if not compact and handle.size() != size:
            raise ShardFormatError(
                f"{source}: the file is now {handle.size()} bytes, not the {size} its footer "
                f"was read at; it changed during the run: start again"
            )
        reader = pq.ParquetFile(handle, metadata=metadata)
        return _without_views(reader.read_row_group(span.index, columns=columns), pa)
    except (OSError, ValueError, pa.ArrowException) as exc:
        if isinstance(exc, (ShardFormatError, ShardNotFoundError)):
            raise
        raise ShardFormatError(
            f"{source} does not decode: {exc}; the file is corrupt or was rewritten during "
            "the run: restore it and start again (a downloaded copy: delete it so it is "
            "fetched again)"
        ) from exc
    finally:
        handle.close()


def _without_views(table: Any, pa: Any) -> Any:
    """``table`` with view strings and bytes as plain ones, which every Arrow kernel takes.

    A file whose stored Arrow schema says ``string_view`` (as arrow-rs writers such as
    delta-rs leave it) reads back as views, and pyarrow has no take or filter for those.
    """
    plain = {"string_view": pa.string(), "binary_view": pa.binary()}
    fields = [
        field.with_type(plain[str(field.type)]) if str(field.type) in plain else field
        for field in table.schema
    ]
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)


class _Range:
    """A store whose ``get_bytes`` reads one byte range (for :func:`fetch_bytes`'s retries)."""

    def __init__(self, store: ObjectStore, start: int, end: int) -> None:
        self._store, self._start, self._end = store, start, end

    def url(self, key: str) -> str:
        return f"{self._store.url(key)} (bytes {self._start}-{self._end - 1})"

    def get_bytes(self, key: str) -> bytes:
        return self._store.get_range(key, self._start, self._end)


class _SpanFile(io.RawIOBase):
    """A read-only file of ``size`` bytes whose span ``[start, end)`` is a compact local file.

    Reads outside the span fail: pyarrow, given the footer, reads only the row group's chunks.
    """

    def __init__(self, path: str, span: RowGroupSpan, size: int) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._start, self._end, self._size = span.start, span.end, size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), max(0, self._size - self._position))
        if want == 0:
            return 0
        if not self._start <= self._position < self._end:
            raise OSError(
                f"a read at offset {self._position} falls outside the cached row group "
                f"[{self._start}, {self._end})"
            )
        want = min(want, self._end - self._position)
        data = os.pread(self._fd, want, self._position - self._start)
        if len(data) != want:
            raise ShardFormatError(f"the cached row group is short at offset {self._position}")
        view[:want] = data
        self._position += want
        return want

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()
