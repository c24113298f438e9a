"""Parquet files written as MDS (``shardstream convert --from parquet``) by the tables' stages.

The files are read as pyarrow reads a list of files: in the order given, the first file's
columns (a file lacking one is refused, naming it; columns only later files hold are left
out), no partition columns from folder names. Their footers go through the footer stage and
each row group through :meth:`ParquetDataset.read_table
<shardstream.tables.dataset.ParquetDataset.read_table>`, the stage a Parquet stream reads with.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from shardstream.converters.arrow_samples import OnNull
from shardstream.converters.arrow_types import arrow_module
from shardstream.converters.tables import arrow_to_mds
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
        ShardFormatError: A file is not Parquet, or holds a column in another type.
    """
    absolute = [os.path.abspath(path) for path in paths]
    root = os.path.commonpath([os.path.dirname(path) for path in absolute])
    keys = [os.path.relpath(path, root).replace(os.sep, "/") for path in absolute]
    layouts = local_file_layouts(root, keys)
    data = ParquetDataset(
        root, layouts, columns=list(layouts[0].columns), source=where, partitioned=False
    )
    tables = (data.read_table(shard) for shard in range(len(data.shards)))
    first = next(tables, None)
    if first is None:  # no rows: the writer says so, with the files' schema
        schema = parse_metadata(layouts[0].footer, source=layouts[0].key).schema.to_arrow_schema()
    else:
        schema = first.schema
    pa = arrow_module()

    def batches() -> Iterator[Any]:
        if first is not None:
            yield from first.to_batches()
        for table in tables:
            yield from table.to_batches()

    return arrow_to_mds(
        pa.RecordBatchReader.from_batches(schema, batches()), out, columns=columns,
        on_null=on_null, progress=progress, where=where, total_rows=int(data.shard_sizes.sum()),
        **writer_kwargs,
    )  # fmt: skip
