"""A Delta table's version written as MDS: the rows the Delta stream reads, in the same order.

The version is read as :class:`~shardstream.StreamingDataset` reads it, by the same stages
(:mod:`shardstream.tables.delta_log` for the log, the footer stage for the files, then each row
group read and assembled by :meth:`ParquetDataset.read_table
<shardstream.tables.dataset.ParquetDataset.read_table>`): deletion vectors applied, renamed
columns under their names, nulls for columns older files lack, partition values as columns.
The written ``index.json`` records the table and version under ``"source"``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from shardstream.converters.arrow_samples import OnNull
from shardstream.converters.arrow_types import arrow_module
from shardstream.converters.tables import arrow_to_mds
from shardstream.errors import ConfigurationError
from shardstream.storage import DownloadOptions, download_file, is_remote, local_path, open_store
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.delta_log import TableVersion, read_snapshot
from shardstream.tables.delta_snapshot import DeltaSnapshot
from shardstream.tables.layout_index import local_file_layouts, sync_layouts

__all__ = ["delta_to_mds", "table_and_version"]


def table_and_version(table: Any) -> tuple[str, int | None] | None:
    """``(URI, version)`` of a ``deltalake.DeltaTable``, or ``None`` for anything else."""
    module = type(table).__module__ or ""
    if not module.startswith("deltalake") or not hasattr(table, "table_uri"):
        return None
    uri = str(table.table_uri).rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return uri, int(table.version())


def delta_to_mds(
    table: str,
    out: Any,
    *,
    version: TableVersion = None,
    columns: Mapping[str, str] | None = None,
    read_columns: list[str] | None = None,
    on_null: OnNull = "error",
    progress: bool = True,
    **writer_kwargs: Any,
) -> int:
    """Write one version of the Delta table at ``table`` as an MDS dataset at ``out``.

    Args:
        table: The table's root: a local path or a URL of any store shardstream reads.
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        version: ``None`` (the latest), a version number, or a ``datetime`` (or ISO 8601
            text): the last version committed at or before it.
        columns: Column name to encoding; inferred from the schema when ``None``.
        read_columns: The table's columns to read (``None``: all of them, in schema order).
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments.

    Returns:
        The number of samples written.

    Raises:
        TableVersionError: The version is gone or not there yet.
        UnsupportedTableError: The version needs a reader feature shardstream lacks.

    Example:
        delta_to_mds("s3://bucket/events", "s3://bucket/events-mds", version=12)
    """
    with tempfile.TemporaryDirectory(prefix="shardstream-delta-") as scratch:
        snapshot, batches, rows = _rows(table, version, read_columns, scratch)
        names = read_columns or snapshot.names
        where = f"version {snapshot.version} of the Delta table {table}"
        source = {"format": "delta", "table": table, "version": snapshot.version}
        pa = arrow_module()
        schema = pa.schema([(name, snapshot.column(name).type) for name in names])
        return arrow_to_mds(
            pa.RecordBatchReader.from_batches(schema, batches), out, columns=columns,
            on_null=on_null, progress=progress, where=where, total_rows=rows, source=source,
            **writer_kwargs,
        )  # fmt: skip


def _rows(
    table: str, version: TableVersion, read_columns: list[str] | None, scratch: str
) -> tuple[DeltaSnapshot, Iterator[Any], int]:
    """The version, its rows as record batches (one per row group), and how many there are."""
    options = DownloadOptions()
    store = open_store(table) if is_remote(table) else None
    root = scratch if store is not None else local_path(table)
    snapshot, infos = read_snapshot(table, store, root, version, options)
    names = read_columns or snapshot.names
    unknown = [name for name in names if name not in snapshot.names]
    if unknown:
        raise ConfigurationError(
            f"{unknown} not in version {snapshot.version} of the Delta table {table}, whose "
            f"columns are {snapshot.names}"
        )
    keys = [file.key for file in snapshot.files]
    if store is None:
        layouts = local_file_layouts(root, keys)
    else:
        assert infos is not None
        layouts = sync_layouts(store, scratch, options, infos) if keys else []
        root = os.path.join(scratch, "files")  # each file downloaded whole, read, deleted
    # The row groups are those a stream of the version reads, read by the same stage.
    data = ParquetDataset(
        root, layouts, columns=read_columns or None, source=snapshot.table, snapshot=snapshot
    )

    def batches() -> Iterator[Any]:
        for layout, shards in data.file_shards():
            if not shards:
                continue  # every row of the file is deleted
            path = os.path.join(root, layout.key)
            if store is not None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                download_file(store, layout.key, path, expected_size=layout.size)
            for shard in shards:
                yield from data.read_table(shard).to_batches()
            if store is not None:
                os.remove(path)

    return snapshot, batches(), int(data.shard_sizes.sum())
