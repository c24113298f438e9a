"""One version of a Delta table as the Parquet stream reads it: files, values, deletions, names.

A Delta table is a folder of Parquet files and a transaction log (``_delta_log/``) that says
which files make up each version. What a reader needs of a version, once the log is read
(:mod:`shardstream.tables.delta_log`), is pure data: the files (in sorted key order), each
file's partition values, the rows a deletion vector removes from it, and the table's logical
schema with each column's physical name in the files (column mapping renames columns without
rewriting them). :func:`assemble` turns one decoded row group into the version's rows.

Pure: data in, ``pyarrow`` tables out (imported lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream._optional import require

__all__ = ["DeltaFile", "DeltaSnapshot", "TableColumn", "assemble"]


@dataclass(frozen=True)
class TableColumn:
    """One top-level column of the table's schema.

    Attributes:
        name: The logical name readers see.
        physical: The column's name in the Parquet files (``name`` without column mapping).
        type: The ``pyarrow.DataType`` of the logical schema.
        partition: A partition column: its value is in the log, not in the files.
    """

    name: str
    physical: str
    type: Any
    partition: bool = False


@dataclass(frozen=True)
class DeltaFile:
    """One data file of the version.

    Attributes:
        key: The file's path relative to the table's root, with ``/``.
        size: Its size in bytes, from the log.
        partition: Its value of each partition column (the snapshot's order), typed.
        keep: Rows its deletion vector leaves (``True``: kept), or ``None``: all of them.
    """

    key: str
    size: int
    partition: tuple[Any, ...]
    keep: NDArray[np.bool_] | None = None

    def window(self, first: int, rows: int) -> NDArray[np.bool_] | None:
        """The kept rows among ``first .. first + rows - 1`` (``None``: all of them).

        A deletion vector's mask may stop short of the file's end: the rows past it are kept.
        """
        if self.keep is None:
            return None
        part = self.keep[first : first + rows]
        if len(part) < rows:
            part = np.concatenate([part, np.ones(rows - len(part), bool)])
        return None if part.all() else part


@dataclass(frozen=True)
class DeltaSnapshot:
    """The files and schema of one version of a Delta table.

    Attributes:
        table: The table's URL or path, named in errors and recorded with states and indexes.
        version: The version read.
        columns: The schema's top-level columns, in schema order.
        files: The version's data files, in sorted key order.
        latest: The table's latest version when this one was read.
    """

    table: str
    version: int
    columns: tuple[TableColumn, ...]
    files: tuple[DeltaFile, ...]
    latest: int = -1

    @property
    def partition_columns(self) -> tuple[TableColumn, ...]:
        """The partition columns, in schema order."""
        return tuple(column for column in self.columns if column.partition)

    @property
    def names(self) -> list[str]:
        """The logical column names, in schema order."""
        return [column.name for column in self.columns]

    def physical(self, names: Sequence[str], held: Sequence[str]) -> list[str]:
        """The physical columns to read from a file holding ``held`` for the columns ``names``."""
        wanted = [self.column(name) for name in names]
        have = set(held)
        return [c.physical for c in wanted if not c.partition and c.physical in have]

    def column(self, name: str) -> TableColumn:
        """The column of logical name ``name``."""
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)


def assemble(
    table: Any,
    snapshot: DeltaSnapshot,
    file: DeltaFile,
    columns: Sequence[str],
    keep: NDArray[np.bool_] | None,
) -> Any:
    """The rows of one decoded row group as the version has them.

    Args:
        table: The row group read from the file (its physical columns that the file holds).
        snapshot: The version.
        file: The file the row group is of.
        columns: The logical columns wanted, in order.
        keep: The row group's slice of the file's deletion mask (``None``: every row).

    Returns:
        A ``pyarrow.Table`` of ``columns``: renamed to logical names, cast to the schema's
        types, nulls for a column the file lacks (written before the column was added), the
        partition values, and without the deleted rows.
    """
    pa = require("pyarrow", extra="delta", purpose="Reading Delta tables")
    if keep is not None:
        table = table.filter(pa.array(keep, pa.bool_()))
    rows = table.num_rows
    present = set(table.schema.names)
    parts = {
        column.name: value
        for column, value in zip(snapshot.partition_columns, file.partition, strict=True)
    }
    arrays = []
    for name in columns:
        column = snapshot.column(name)
        if column.partition:
            arrays.append(pa.array([parts[name]] * rows, column.type))
        elif column.physical in present:
            values = table.column(column.physical)
            arrays.append(values if values.type == column.type else values.cast(column.type))
        else:
            arrays.append(pa.nulls(rows, column.type))
    return pa.table(arrays, names=list(columns))
