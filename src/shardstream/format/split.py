"""Shards of the split formats: JSON lines (``json``) and delimited text (``csv``/``tsv``/``xsv``).

Each keeps its samples in a data file and an offsets table in a ``.meta`` file: uint32 ``N``,
then ``N + 1`` uint32 offsets into the data file, then the config JSON. Read-only here.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shardstream.errors import IndexFormatError, ShardFormatError
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.encodings import Buffer
from shardstream.format.index import ShardEntry
from shardstream.format.shard_file import SampleFile
from shardstream.format.shard_view import columns_from_samples

__all__ = ["SplitShardView"]

_TEXT_DECODERS: dict[str, Callable[[str], Any]] = {"str": str, "int": int, "float": float}


class SplitShardView:
    """Random access to a json, csv, tsv or xsv shard held in two buffers.

    Implements :class:`~shardstream.format.shard_view.ShardView`; samples are decoded one by
    one (text has no batch decoder).

    Args:
        data: The whole uncompressed data file.
        meta: The whole uncompressed ``.meta`` file.
        entry: The shard's index entry.
        source: The data file's path or URL, named in errors.
    """

    def __init__(self, data: Buffer, meta: Buffer, entry: ShardEntry, *, source: str) -> None:
        meta_view = memoryview(meta)
        if len(meta_view) < 4:
            raise ShardFormatError(
                f"{source}: the .meta file is truncated; delete it so it is fetched again"
            )
        (count,) = struct.unpack_from("<I", meta_view, 0)
        if count != entry.samples or len(meta_view) < 4 * (count + 2):
            raise ShardFormatError(
                f"{source}: the .meta file lists {count} samples but index.json says "
                f"{entry.samples}; the files or index.json were replaced: fetch them again "
                "from one dataset"
            )
        offsets = np.frombuffer(meta_view, "<u4", count + 1, 4).astype(np.int64)
        data_view = memoryview(data)
        if count and (offsets[-1] > len(data_view) or bool(np.any(np.diff(offsets) < 0))):
            raise ShardFormatError(
                f"{source}: corrupt offsets in the .meta file; delete the shard and its .meta "
                "file so they are fetched again"
            )
        self.source = source
        self._data = data_view
        self._mapped = isinstance(data, mmap.mmap)
        self._offsets = offsets.tolist()
        self._newline = entry.newline or "\n"
        self._json = entry.format == "json"
        self._separator = entry.separator or ","
        self._names: list[str] | None = None  # a JSON shard's: its first sample's keys
        self._columns: list[tuple[str, Callable[[str], Any]]] = []
        for name, encoding in entry.columns.items():
            decoder = _TEXT_DECODERS.get(encoding)
            if decoder is None:
                raise IndexFormatError(
                    f"{source}: column {name!r} has encoding {encoding!r}; {entry.format} shards "
                    f"hold only {', '.join(_TEXT_DECODERS)}"
                )
            self._columns.append((name, decoder))

    grouped_decode = False
    reads_runs = False

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @property
    def names(self) -> list[str]:
        """The columns: a JSON shard's first sample's keys, else the index's columns."""
        if self._names is None:  # asked for every batch: sample 0 is decoded once
            json_keys = self._json and len(self)
            self._names = list(self.get(0)) if json_keys else [name for name, _ in self._columns]
        return self._names

    @property
    def held_bytes(self) -> int:
        """The data file's size."""
        return len(self._data)

    @property
    def in_memory(self) -> bool:
        """Whether the data file was read into memory (not mapped)."""
        return not self._mapped

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Samples ``indices`` as one list per column of :attr:`names`."""
        return columns_from_samples(self, indices)

    def sample_file(self) -> SampleFile | None:
        """``None``: text samples are decoded one by one."""
        return None

    def let_go(self, first: int, stop: int) -> None:
        """Kept mapped until released."""

    def release(self) -> None:
        """Drop the reference to the data (decoded samples stay valid)."""
        self._data = memoryview(b"")
        self._offsets = [0]

    def get(self, index: int) -> dict[str, Any]:
        """Decode sample ``index`` of this shard (0 <= index < len)."""
        data = self._data[self._offsets[index] : self._offsets[index + 1]]
        try:
            text = str(data, "utf-8")
            if self._json:
                value = json.loads(text)
                if not isinstance(value, dict):
                    raise ValueError("a JSON sample must be an object")
                return value
            if text.endswith(self._newline):
                text = text[: -len(self._newline)]
            fields = text.split(self._separator)
            if len(fields) != len(self._columns):
                raise ValueError(f"{len(fields)} fields for {len(self._columns)} columns")
            return {
                name: decode(field)
                for (name, decode), field in zip(self._columns, fields, strict=True)
            }
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
            raise ShardFormatError(
                f"{self.source}, sample {index}: cannot decode: {exc}; the shard is corrupt or "
                "does not match its index.json entry: delete it so it is fetched again, or "
                "rewrite the dataset"
            ) from exc

    __getitem__ = get
