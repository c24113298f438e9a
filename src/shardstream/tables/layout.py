"""Where a Parquet file's row groups lie, read from its footer alone.

A Parquet file ends with its footer (Thrift ``FileMetaData``), the footer's length as a
little-endian uint32 and the magic ``PAR1``. The footer names every row group, its row count
and the byte span of each column chunk, so the last few KiB of a file are enough to plan
reading it row group by row group: no other byte is needed until a row group is read.

Pure: bytes in, frozen layouts out. ``pyarrow`` parses the footer (imported lazily).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shardstream._optional import require
from shardstream.errors import IndexFormatError, ShardFormatError

__all__ = [
    "FOOTER_TAIL",
    "MAGIC",
    "ParquetFileLayout",
    "RowGroupSpan",
    "dump_layouts",
    "footer_length",
    "layout_from_footer",
    "parse_layouts",
    "parse_metadata",
]

MAGIC = b"PAR1"
#: Bytes read from a file's end in the first request: most footers fit, saving a second one.
FOOTER_TAIL = 64 << 10
_LAYOUT_VERSION = 1


@dataclass(frozen=True)
class RowGroupSpan:
    """One row group: its position in its file, its rows and the bytes its column chunks span.

    Attributes:
        index: The row group's number in its file.
        rows: Its row count.
        start: The offset of its first column chunk's first page.
        end: The offset just past its last column chunk.
    """

    index: int
    rows: int
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        """The bytes of the span (what downloading the row group costs)."""
        return self.end - self.start


@dataclass(frozen=True)
class ParquetFileLayout:
    """One Parquet file: its key, size, version tag, footer and row groups.

    Attributes:
        key: The file's path relative to the dataset root, with ``/``.
        size: The file's size in bytes.
        etag: The store's version tag of the file, or ``None``.
        footer: The file's last ``8 + footer length`` bytes (the footer, its length, ``PAR1``).
        columns: The top-level column names, in file order.
        types: Each column's Arrow type, as text.
        row_groups: The row groups holding rows, in file order.
    """

    key: str
    size: int
    etag: str | None
    footer: bytes
    columns: tuple[str, ...]
    types: tuple[str, ...]
    row_groups: tuple[RowGroupSpan, ...]


def footer_length(tail: bytes, *, size: int, source: str) -> int:
    """The footer's length from a file's last bytes (at least 8 of them).

    Raises:
        ShardFormatError: The file is too short or does not end with ``PAR1``: not Parquet.
    """
    if size < 12 or len(tail) < 8 or tail[-4:] != MAGIC:
        raise ShardFormatError(
            f"{source} is not a Parquet file (it does not end with the magic bytes PAR1); "
            f"remove it from the dataset folder or give the Parquet files a folder of their own"
        )
    (length,) = struct.unpack("<I", tail[-8:-4])
    if length + 12 > size:
        raise ShardFormatError(
            f"{source}: its footer claims {length} bytes but the file is {size} bytes; the "
            f"file is truncated or corrupt"
        )
    return int(length)


def parse_metadata(footer: bytes, *, source: str) -> Any:
    """``pyarrow.parquet.FileMetaData`` of a footer (as :attr:`ParquetFileLayout.footer` holds).

    Raises:
        ShardFormatError: The footer does not parse.
    """
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    pq = require("pyarrow.parquet", extra="arrow", purpose="Reading Parquet")
    try:
        return pq.read_metadata(pa.BufferReader(footer))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise ShardFormatError(
            f"{source}: the Parquet footer does not parse: {exc}; the file is corrupt: "
            "rewrite it, or remove it from the dataset folder"
        ) from exc


def layout_from_footer(key: str, size: int, etag: str | None, footer: bytes) -> ParquetFileLayout:
    """The layout of a file from its footer bytes (the file's last ``8 + length`` bytes).

    Raises:
        ShardFormatError: The footer does not parse, or a row group's byte span lies outside
            the file.
    """
    meta = parse_metadata(footer, source=key)
    schema = meta.schema.to_arrow_schema()
    groups = []
    data_end = size - len(footer)
    for number in range(meta.num_row_groups):
        group = meta.row_group(number)
        if group.num_rows == 0:
            continue
        starts, ends = [], []
        for column in range(group.num_columns):
            chunk = group.column(column)
            first = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < first:
                first = chunk.dictionary_page_offset
            starts.append(first)
            ends.append(first + chunk.total_compressed_size)
        if not starts or min(starts) < 4 or max(ends) > data_end:
            raise ShardFormatError(
                f"{key}: row group {number} spans bytes outside the file's data (the footer "
                f"is corrupt, or the file was rewritten)"
            )
        groups.append(RowGroupSpan(number, int(group.num_rows), min(starts), max(ends)))
    return ParquetFileLayout(
        key=key,
        size=size,
        etag=etag,
        footer=bytes(footer),
        columns=tuple(schema.names),
        types=tuple(str(t) for t in schema.types),
        row_groups=tuple(groups),
    )


def dump_layouts(layouts: Sequence[ParquetFileLayout]) -> bytes:
    """The derived index saved in a cache folder: each file's key, size, etag and footer."""
    files = [
        {
            "key": layout.key,
            "size": layout.size,
            "etag": layout.etag,
            "footer": base64.b64encode(layout.footer).decode("ascii"),
        }
        for layout in layouts
    ]
    return json.dumps({"version": _LAYOUT_VERSION, "files": files}).encode()


def parse_layouts(
    data: bytes,
    *,
    source: str,
    make: Callable[[str, int, str | None, bytes], ParquetFileLayout] = layout_from_footer,
) -> list[ParquetFileLayout]:
    """The layouts saved by :func:`dump_layouts` (footers parsed again, by ``make``).

    Raises:
        IndexFormatError: The text is not a saved derived index.
        ShardFormatError: A saved footer does not parse.
    """
    try:
        obj = json.loads(data)
        if obj.get("version") != _LAYOUT_VERSION:
            raise IndexFormatError(f"{source}: unknown version {obj.get('version')!r}")
        return [
            make(
                str(item["key"]), int(item["size"]), item["etag"], base64.b64decode(item["footer"])
            )
            for item in obj["files"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IndexFormatError(f"{source} is not a saved Parquet index: {exc}") from exc
