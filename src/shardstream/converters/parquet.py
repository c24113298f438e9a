"""Parquet files written as MDS (``shardstream convert --from parquet``) by the tables' stages.

The files are read as pyarrow reads a list of files: in the order given, the first file's
columns in the first file's types (a file lacking one is refused, naming it; a column held in
another type is cast, and a value the cast would change is refused; columns only later files
hold are left out), no partition columns from folder names. Their footers go through the
footer stage and each row group through :meth:`ParquetDataset.read_table
<shardstream.tables.dataset.ParquetDataset.read_table>`, the stage a Parquet stream reads with.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from shardstream.converters.arrow_samples import OnNull
from shardstream.converters.arrow_types import arrow_module
from shardstream.converters.tables import arrow_to_mds
from shardstream.errors import ShardFormatError
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.layout import parse_metadata
from shardstream.tables.layout_index import local_file_layouts

__all__ = ["parquet_files_to_mds"]


def parquet_files_to_mds(
    paths: Sequence[str],
    out: Any,
    *,
    where: str,
    columns: Mapping[str, str] | None = None,
    on_null: OnNull = "error",
    progress: bool = True,
    **writer_kwargs: Any,
) -> int:
    """Write the rows of the local Parquet files ``paths``, in order, as MDS at ``out``.

    Args:
        paths: The files (at least one).
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        where: What the files are, for error messages.
        columns: Column name to encoding; inferred from the first file's schema when ``None``.
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments.

    Returns:
        The number of samples written.

    Raises:
        ConfigurationError: A file lacks a column of the first file's, or there are no rows.
        ShardFormatError: A file is not Parquet, or holds a column that does not cast to the
            first file's type.
    """
    absolute = [os.path.abspath(path) for path in paths]
    root = os.path.commonpath([os.path.dirname(path) for path in absolute])
    keys = [os.path.relpath(path, root).replace(os.sep, "/") for path in absolute]
    layouts = local_file_layouts(root, keys)
    names = list(layouts[0].columns)
    pa = arrow_module()
    schema = parse_metadata(layouts[0].footer, source=layouts[0].key).schema.to_arrow_schema()
    schema = pa.schema([schema.field(name) for name in names])
    # One dataset a file: each file is read in its own types, then cast as pyarrow's scan casts.
    files = [
        ParquetDataset(root, [layout], columns=names, source=where, partitioned=False)
        for layout in layouts
    ]

    def batches() -> Iterator[Any]:
        for layout, data in zip(layouts, files, strict=True):
            for shard in range(len(data.shards)):
                yield from _cast(data.read_table(shard), schema, f"{where}/{layout.key}")

    return arrow_to_mds(
        pa.RecordBatchReader.from_batches(schema, batches()), out, columns=columns,
        on_null=on_null, progress=progress, where=where,
        total_rows=sum(int(data.shard_sizes.sum()) for data in files), **writer_kwargs,
    )  # fmt: skip


def _cast(table: Any, schema: Any, where: str) -> Any:
    """``table``'s batches in ``schema``'s types; a value the cast would change is refused."""
    if table.schema.equals(schema):
        return table.to_batches()
    try:
        return table.cast(schema).to_batches()
    except (ValueError, TypeError, NotImplementedError) as error:  # pyarrow's Arrow errors
        types = ", ".join(f"{field.name}: {field.type}" for field in schema)
        raise ShardFormatError(
            f"{where}: its columns do not cast to the first file's types ({types}): {error}; "
            "rewrite the file in those types, or convert it apart"
        ) from error
