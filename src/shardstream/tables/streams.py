"""Opening a stream's table: a Delta version's files, or a Parquet folder's, as row groups.

A Delta table's version is read as the Parquet files the log names for it
(:mod:`shardstream.tables.delta_log`); a Parquet folder as its ``*.parquet`` files, or those
``files=`` names. Either way each file's footer is read in place or synced to the cache.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from shardstream.errors import ConfigurationError, ShardNotFoundError
from shardstream.storage import DownloadOptions, ObjectStore, fetch_listing
from shardstream.storage.base import ObjectInfo
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.delta_log import LOG_FOLDER, read_snapshot
from shardstream.tables.filters import Filters
from shardstream.tables.layout_index import (
    local_file_layouts,
    local_layouts,
    parquet_files,
    sync_layouts,
)

__all__ = ["TableStream", "has_log", "is_local_table", "open_delta", "open_parquet"]

logger = logging.getLogger(__name__)


class TableStream(Protocol):
    """What opening a table needs of a stream (a resolved ``Stream`` is one)."""

    @property
    def remote(self) -> str | None:
        """The table's remote root URL, or ``None`` for a local table."""

    @property
    def local(self) -> str:
        """The local folder: the table itself, or its cache."""

    @property
    def options(self) -> DownloadOptions:
        """Download retries, timeout and parallelism."""

    @property
    def validate_hash(self) -> str | None:
        """A digest asked for (a Parquet file carries none: warned about)."""

    @property
    def columns(self) -> list[str] | None:
        """The columns to read, or ``None`` for all."""

    @property
    def filters(self) -> Filters | None:
        """Which files to read, by their partition values (``None``: all)."""

    @property
    def version(self) -> int | datetime | str | None:
        """The Delta version asked for (``None``: the latest)."""

    @property
    def files(self) -> tuple[str, ...] | None:
        """The Parquet files to read, under the root (``None``: all)."""


def has_log(listed: Mapping[str, ObjectInfo]) -> bool:
    """Whether a remote folder's listing holds a Delta log."""
    return any(key.startswith(LOG_FOLDER + "/") for key in listed)


def is_local_table(stream: TableStream) -> bool:
    """A local-only stream that is a Delta table."""
    return stream.remote is None and os.path.isdir(os.path.join(stream.local, LOG_FOLDER))


def open_delta(stream: TableStream, store: ObjectStore | None) -> ParquetDataset:
    """The stream's Delta version, its files' footers read in place or synced to its cache.

    Raises:
        ShardNotFoundError: There is no ``_delta_log/`` at the stream's root.
        TableVersionError: The version asked for is not in the log, or was vacuumed.
    """
    source = stream.remote or stream.local
    snapshot, infos = read_snapshot(source, store, stream.local, stream.version, stream.options)
    keys = [file.key for file in snapshot.files]
    if store is None:
        layouts = local_file_layouts(stream.local, keys)
    else:
        assert infos is not None
        layouts = sync_layouts(store, stream.local, stream.options, infos) if keys else []
    return ParquetDataset(
        stream.local,
        layouts,
        columns=stream.columns,
        cached=store is not None,
        source=source,
        filters=stream.filters,
        snapshot=snapshot,
    )


def open_parquet(
    stream: TableStream,
    store: ObjectStore | None,
    listed: Mapping[str, ObjectInfo] | None = None,
) -> ParquetDataset:
    """The stream's Parquet files (``listed``, or those its folder holds), footers read.

    Raises:
        ConfigurationError: ``version=`` is given, or the folder is a Delta table.
        ShardNotFoundError: A file named in ``files=`` is not there.
    """
    if stream.validate_hash is not None:
        logger.warning(
            "validate_hash=%r does not apply to the Parquet stream %s: its files carry no "
            "digests in an index", stream.validate_hash, stream.remote or stream.local,
        )  # fmt: skip
    where = stream.remote or stream.local
    if stream.version is not None:
        raise ConfigurationError(
            f"version= applies to Delta tables; {where} is a Parquet folder (no _delta_log/)"
        )
    if store is None:
        if is_local_table(stream):
            raise _not_parquet(where)
        if stream.files is None:
            layouts = local_layouts(stream.local)
        else:
            present = {f for f in stream.files if os.path.isfile(os.path.join(stream.local, f))}
            _check_files(stream.files, present, where)
            layouts = local_file_layouts(stream.local, list(stream.files))
    else:
        if listed is None:
            every = fetch_listing(store, "", stream.options)
            if has_log(every):
                raise _not_parquet(where)
            listed = parquet_files(every) if stream.files is None else every
        if stream.files is not None:
            _check_files(stream.files, set(listed), where)
            listed = {key: listed[key] for key in stream.files}
        layouts = sync_layouts(store, stream.local, stream.options, listed)
    return ParquetDataset(
        stream.local,
        layouts,
        columns=stream.columns,
        cached=store is not None,
        source=stream.remote or stream.local,
        filters=stream.filters,
    )


def _check_files(files: tuple[str, ...], present: set[str], where: str) -> None:
    """Raises ShardNotFoundError naming the files of ``files=`` that ``where`` lacks."""
    missing = [name for name in files if name not in present]
    if missing:
        raise ShardNotFoundError(
            f"{where} holds no file {', '.join(map(repr, missing[:5]))}"
            f"{f' (and {len(missing) - 5} more)' if len(missing) > 5 else ''}, named in files=; "
            "give paths of existing files under the stream's root"
        )


def _not_parquet(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"{where} is a Delta table (it has a {LOG_FOLDER}/ folder): its folder also holds files "
        "that earlier versions removed, so it is not read as plain Parquet; pass "
        "format='delta' (or leave format unset)"
    )
