"""``JSONWriter``, ``XSVWriter``, ``CSVWriter``, ``TSVWriter``: samples in, split shards out.

mosaicml-streaming's writers of the same names, with its parameters, file names and bytes.
Each shard is a data file (JSON lines, or delimited text under a header line) and a ``.meta``
file of offsets; ``format/split_schema.py`` says how their bytes are made. Everything else
(shard cutting, compression, hashes, atomic files, uploads, the index written last) is
:class:`~shardstream.MDSWriter`'s machinery, which these writers drive through its format hooks.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Literal, TypeVar

from shardstream.errors import ConfigurationError
from shardstream.format.index import ShardEntry
from shardstream.format.split_schema import SplitSchema
from shardstream.writer.mds_writer import MDSWriter, Out
from shardstream.writer.publish import shard_basename

__all__ = ["CSVWriter", "JSONWriter", "TSVWriter", "XSVWriter"]

_Writer = TypeVar("_Writer", bound="_SplitWriter")


class _SplitShards(MDSWriter):
    """MDSWriter's machinery writing split shards: its three format hooks, overridden."""

    # A split shard's offsets live in its .meta file: size_limit counts only sample bytes.
    _offset_bytes = 0

    def __init__(self, schema: SplitSchema, **kwargs: Any) -> None:
        self._split = schema
        super().__init__(columns=schema.columns, **kwargs)

    def _set_format(self, columns: Mapping[str, str], compression: str | None) -> list[str]:
        self.split_config = self._split.config(
            compression=compression, hashes=self._hashes, size_limit=self._size_limit
        )
        self._config = json.dumps(self.split_config, sort_keys=True).encode("utf-8")
        self._encode = self._split.encode_sample_sized
        self._shard_overhead = 0
        return self._split.names

    def _write_shard(self, number: int) -> ShardEntry:
        schema = self._split
        data, meta = schema.shard_files(self._parts, self._sizes, self._config)
        name = shard_basename(number, self._token, schema.format)
        raw_data, zip_data = self._write_shard_file(name, data)
        raw_meta, zip_meta = self._write_shard_file(f"{name}.meta", meta)
        return ShardEntry(
            format=schema.format,
            samples=len(self._sizes),
            raw_data=raw_data,
            zip_data=zip_data,
            compression=None if self._compression is None else self._compression.name,
            hashes=tuple(self._hashes),
            size_limit=self._size_limit,
            columns=schema.columns,
            raw_meta=raw_meta,
            zip_meta=zip_meta,
            newline=schema.newline,
            separator=schema.separator,
        )


class _SplitWriter:
    """What the four split-format writers share: everything but their columns' layout."""

    format: ClassVar[str]

    def __init__(
        self,
        schema: SplitSchema,
        *,
        out: Out,
        keep_local: bool,
        compression: str | None,
        hashes: Sequence[str] | None,
        size_limit: int | str | None,
        progress_bar: bool,
        max_workers: int | None,
        retry: int,
        exist_ok: bool,
        timeout: float,
        extra_keys: Literal["error", "drop"],
        source: Mapping[str, Any] | None,
    ) -> None:
        self._shards = _SplitShards(
            schema,
            out=out,
            keep_local=keep_local,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            progress_bar=progress_bar,
            max_workers=max_workers,
            retry=retry,
            exist_ok=exist_ok,
            timeout=timeout,
            extra_keys=extra_keys,
            source=source,
        )
        self._finished = False

    @property
    def local(self) -> str | None:
        """The local folder shards are written to (known once writing started)."""
        return self._shards.local

    @property
    def remote(self) -> str | None:
        """The URL shards are uploaded to, or ``None``."""
        return self._shards.remote

    def get_config(self) -> dict[str, Any]:
        """The shard config, as every shard's ``index.json`` entry and ``.meta`` file hold it."""
        return copy.deepcopy(self._shards.split_config)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Encode one sample and append it, starting a new shard when the limit is reached.

        Errors name the sample (its number among those written, from 0), the column and the
        dataset.

        Raises:
            MissingColumnError: The sample lacks a column.
            UnknownColumnError: The sample has keys that are not columns (unless
                ``extra_keys="drop"``).
            SampleTypeError: A value is not of its column's type: ``str``, ``int`` (not
                ``bool``) or ``float``.
            SampleValueError: A csv/tsv/xsv value holds the separator or the newline.
            UnencodableTextError: A ``str`` value holds a lone surrogate (csv/tsv/xsv).
            DiskFullError: The output folder's disk filled up; no shard is left half-written.
            UploadError: An earlier upload failed.
        """
        if self._finished:
            raise ConfigurationError(
                f"this {type(self).__name__} is finished; create a new one to write more"
            )
        self._shards.write(sample)

    def finish(self) -> None:
        """Write the last shard, wait for uploads, then publish ``index.json``.

        Raises:
            DiskFullError: The output folder's disk filled up; no index was published.
            UploadError: A shard could not be uploaded; no index was published.
        """
        self._finished = True
        self._shards.finish()

    def __enter__(self: _Writer) -> _Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._finished = True
        self._shards.__exit__(exc_type, exc, traceback)


class JSONWriter(_SplitWriter):
    r"""Writes a JSON-lines dataset (shards of format ``json``) that mosaicml-streaming reads.

    Each sample is one JSON object with sorted keys, followed by ``newline``; its shard's
    ``.meta`` file holds the offsets. Shards are byte for byte what mosaicml-streaming's
    ``JSONWriter`` writes for the same samples. Nothing is touched on disk until the first
    ``write``.

    Args:
        columns: Column name to encoding: ``"str"``, ``"int"`` or ``"float"``.
        newline: Text after each sample; spaces, tabs, ``"\n"`` and ``"\r"`` only.
        out: Where the dataset goes: a local folder, a URL (written to a temporary folder and
            uploaded), or a ``(local, remote)`` pair (written to ``local``, uploaded to ``remote``).
        keep_local: With a remote ``out``, keep the local copy after uploading.
        compression: ``None``, or a compression such as ``"zstd"`` or ``"zstd:7"`` (the data
            and ``.meta`` files are compressed alike).
        hashes: Digests to record for every file, e.g. ``["sha1", "xxh64"]`` (sorted, unique).
        size_limit: Start a new shard before a sample that would make the current one's samples
            larger than this many bytes (an int, or a string such as ``"64mb"``). ``None`` or
            ``0`` means one shard. Must be under 4 GiB.
        progress_bar, max_workers, retry, exist_ok, timeout, extra_keys, source: As for
            :class:`~shardstream.MDSWriter`.

    Example:
        columns = {"text": "str", "label": "int", "score": "float"}
        with JSONWriter(out="/tmp/my-json-ds", columns=columns) as writer:
            for i in range(100):
                writer.write({"text": f"sample {i}", "label": i % 10, "score": i / 4})
    """

    format = "json"

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        newline: str = "\n",
        out: Out,
        keep_local: bool = False,
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        progress_bar: bool = False,
        max_workers: int | None = None,
        retry: int = 2,
        exist_ok: bool = False,
        timeout: float = 60.0,
        extra_keys: Literal["error", "drop"] = "error",
        source: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            SplitSchema("json", _checked(columns), newline=newline),
            out=out,
            keep_local=keep_local,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            progress_bar=progress_bar,
            max_workers=max_workers,
            retry=retry,
            exist_ok=exist_ok,
            timeout=timeout,
            extra_keys=extra_keys,
            source=source,
        )


class XSVWriter(_SplitWriter):
    """Writes a delimited-text dataset (shards of format ``xsv``) that mosaicml-streaming reads.

    Each shard's data file starts with a line of the column names (sorted), then has one line
    per sample: its values as text, in that order, joined by ``separator``, followed by
    ``newline``. Values may not hold either (no quoting, as in mosaicml-streaming). Shards are
    byte for byte what mosaicml-streaming's ``XSVWriter`` writes for the same samples.

    Args:
        columns: Column name to encoding: ``"str"``, ``"int"`` or ``"float"``.
        separator: Text between a sample's values, e.g. ``"|"``; not empty.
        newline: Text after each sample; not empty.
        out: Where the dataset goes: a local folder, a URL (written to a temporary folder and
            uploaded), or a ``(local, remote)`` pair (written to ``local``, uploaded to ``remote``).
        keep_local: With a remote ``out``, keep the local copy after uploading.
        compression: ``None``, or a compression such as ``"zstd"`` or ``"zstd:7"`` (the data
            and ``.meta`` files are compressed alike).
        hashes: Digests to record for every file, e.g. ``["sha1", "xxh64"]`` (sorted, unique).
        size_limit: Start a new shard before a sample that would make the current one's samples
            larger than this many bytes (an int, or a string such as ``"64mb"``). ``None`` or
            ``0`` means one shard. Must be under 4 GiB.
        progress_bar, max_workers, retry, exist_ok, timeout, extra_keys, source: As for
            :class:`~shardstream.MDSWriter`.

    Example:
        columns = {"name": "str", "count": "int"}
        with XSVWriter(out="/tmp/my-xsv-ds", columns=columns, separator="|") as writer:
            writer.write({"name": "apple", "count": 3})
    """

    format = "xsv"

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        separator: str,
        newline: str = "\n",
        out: Out,
        keep_local: bool = False,
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        progress_bar: bool = False,
        max_workers: int | None = None,
        retry: int = 2,
        exist_ok: bool = False,
        timeout: float = 60.0,
        extra_keys: Literal["error", "drop"] = "error",
        source: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            SplitSchema(self.format, _checked(columns), newline=newline, separator=separator),
            out=out,
            keep_local=keep_local,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            progress_bar=progress_bar,
            max_workers=max_workers,
            retry=retry,
            exist_ok=exist_ok,
            timeout=timeout,
            extra_keys=extra_keys,
            source=source,
        )


class _ImpliedSeparatorWriter(XSVWriter):
    """An XSVWriter whose format implies its separator, so that neither takes one."""

    separator: ClassVar[str]

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        newline: str = "\n",
        out: Out,
        keep_local: bool = False,
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        progress_bar: bool = False,
        max_workers: int | None = None,
        retry: int = 2,
        exist_ok: bool = False,
        timeout: float = 60.0,
        extra_keys: Literal["error", "drop"] = "error",
        source: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            columns=columns,
            separator=self.separator,
            newline=newline,
            out=out,
            keep_local=keep_local,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            progress_bar=progress_bar,
            max_workers=max_workers,
            retry=retry,
            exist_ok=exist_ok,
            timeout=timeout,
            extra_keys=extra_keys,
            source=source,
        )


class CSVWriter(_ImpliedSeparatorWriter):
    """Writes a comma-separated dataset (shards of format ``csv``) that mosaicml-streaming reads.

    An :class:`XSVWriter` whose separator is ``","`` (not stored in ``index.json``: the
    format implies it). Values may not hold a comma or ``newline`` (no quoting, as in
    mosaicml-streaming).

    It takes the arguments of :class:`XSVWriter` but ``separator``.

    Example:
        columns = {"name": "str", "price": "float"}
        with CSVWriter(out="/tmp/my-csv-ds", columns=columns) as writer:
            writer.write({"name": "apple", "price": 0.5})
    """

    format = "csv"
    separator = ","


class TSVWriter(_ImpliedSeparatorWriter):
    """Writes a tab-separated dataset (shards of format ``tsv``) that mosaicml-streaming reads.

    An :class:`XSVWriter` whose separator is a tab (not stored in ``index.json``: the format
    implies it). Values may not hold a tab or ``newline``.

    It takes the arguments of :class:`XSVWriter` but ``separator``.

    Example:
        columns = {"word": "str", "count": "int"}
        with TSVWriter(out="/tmp/my-tsv-ds", columns=columns) as writer:
            writer.write({"word": "hello", "count": 2})
    """

    format = "tsv"
    separator = "\t"


def _checked(columns: Mapping[str, str]) -> Mapping[str, str]:
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigurationError(
            f"columns must be a non-empty dict of name to encoding, got {columns!r}"
        )
    return columns
