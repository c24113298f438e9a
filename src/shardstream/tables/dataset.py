"""``ParquetDataset``: a Parquet dataset's row groups presented as shards.

Every row group that holds rows is one shard: its rows are the shard's samples, in file order,
and files come in sorted key order. The epoch plan, the shuffle, the partition over ranks and
workers and the resume points are those of MDS shards, so they hold the same guarantees. A
sample is ``{column: value}`` over the projected columns (see
:mod:`shardstream.tables.row_group_view` for the value types). Files in ``key=value`` folders
have those partition columns too, after the files' own
(:mod:`shardstream.tables.partitions`); ``filters`` on them leave whole files out.

A local folder is read in place (each shard's "file" is the Parquet file itself, checked by
size). For a remote, each shard's file is the row group's compact cache file
(:mod:`shardstream.tables.row_group_files`), fetched, limited and evicted by the shard cache like
any shard.

A Delta table's version (:class:`~shardstream.tables.delta_snapshot.DeltaSnapshot`) is read
the same way: its files are the version's, its partition values, deleted rows and column
names come from the log, and each row group is assembled into the version's rows.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.errors import ConfigurationError, ShardFormatError
from shardstream.format.column_types import reads_as
from shardstream.format.index import FileInfo, ShardEntry
from shardstream.pipeline.locate import Getter, Locate
from shardstream.pipeline.plan import IdPlan
from shardstream.tables.delta_snapshot import DeltaSnapshot, assemble
from shardstream.tables.filters import Filters
from shardstream.tables.layout import ParquetFileLayout, RowGroupSpan, parse_metadata
from shardstream.tables.partitions import Partitioning
from shardstream.tables.row_group_files import RowGroupFetcher, read_row_group, row_group_basename
from shardstream.tables.row_group_gather import RowGroupGather
from shardstream.tables.row_group_view import RowGroupView

__all__ = ["ParquetDataset"]


class ParquetDataset:
    """Random access to the rows of a Parquet dataset whose footers were read.

    ``len(ds)`` counts rows and ``ds[i]`` is row ``i`` as a dict: a one-id plan, located and
    decoded by the locate stage (:mod:`shardstream.pipeline.locate`) over this dataset's row
    groups. A stream of a :class:`~shardstream.StreamingDataset` uses it as it uses a
    ``LocalDataset``.

    Args:
        root: The folder holding the files (read in place) or the row groups' cache files.
        layouts: The files, in dataset order.
        columns: The columns to read (``None``: every column of the files, then the
            partition columns).
        cached: ``root`` holds row-group cache files (the data is remote), not the files.
        source: The dataset's URL or path, named in errors.
        filters: pyarrow's DNF filters; files whose partition values cannot pass are left
            out (terms on other columns are not applied here).
        snapshot: A Delta table's version, whose files ``layouts`` are (in its order): its
            partition values, deletions and logical columns apply.
        partitioned: ``key=value`` folders are partition columns (``False``: the files are
            read as given, as pyarrow reads a list of files).

    Raises:
        ConfigurationError: A projected column is missing from a file, a partition folder
            names a column the files hold, or a filter's value on a partition column does not
            read as the column's type (:meth:`Filters.typed`).
        ShardFormatError: The files do not share their columns or their partition folders,
            or a file holds a column read in a type the dataset does not read it as
            (:mod:`shardstream.format.column_types`).
    """

    #: A decode stage's gatherer of batches across row groups (the read policy's route).
    gatherer = RowGroupGather

    def __init__(
        self,
        root: str,
        layouts: Sequence[ParquetFileLayout],
        *,
        columns: Sequence[str] | None = None,
        cached: bool = False,
        source: str | None = None,
        filters: Filters | None = None,
        snapshot: DeltaSnapshot | None = None,
        partitioned: bool = True,
    ) -> None:
        self.root = root
        self.source = source or root
        self.snapshot = snapshot
        if snapshot is not None:
            partitioning = _delta_partitioning(snapshot)
        elif partitioned:
            partitioning = Partitioning.of([layout.key for layout in layouts], source=self.source)
        else:
            partitioning = Partitioning((), (), tuple(() for _ in layouts))
        if filters is not None:  # terms on partition columns compare values of their types
            filters = filters.typed(dict(zip(partitioning.names, partitioning.types, strict=True)))
        kept = [
            number
            for number in range(len(layouts))
            if filters is None or filters.may_match(partitioning.row(number))
        ]
        self.filters = filters
        #: How many files the filters left out.
        self.filtered_out = len(layouts) - len(kept)
        self.layouts = [layouts[number] for number in kept]
        self._files = None if snapshot is None else [snapshot.files[number] for number in kept]
        self.partitioning = Partitioning(
            partitioning.names, partitioning.types, tuple(partitioning.values[n] for n in kept)
        )
        self.cached = cached
        self.columns = None if columns is None else list(columns)
        if snapshot is None:
            _check_columns(self.layouts, self.columns, self.source, self.partitioning.names)
        else:
            _check_table_columns(snapshot, self.columns)
        _check_types(self.layouts, self.columns, self.source, snapshot)
        # The columns read from the files; partition columns are appended after reading.
        self._file_columns = (
            None
            if self.columns is None
            else [name for name in self.columns if name not in self.partitioning.names]
        )
        self._groups: list[tuple[int, RowGroupSpan]] = []
        self._keeps: list[np.ndarray[Any, np.dtype[np.bool_]] | None] = []
        for number, layout in enumerate(self.layouts):
            file = None if self._files is None else self._files[number]
            first = 0
            for group in layout.row_groups:
                keep = None if file is None else file.window(first, group.rows)
                first += group.rows
                if keep is not None and not keep.any():
                    continue  # every row of the group is deleted
                self._groups.append((number, group))
                self._keeps.append(keep)
        sizes = np.array(
            [
                group.rows if keep is None else int(keep.sum())
                for (_, group), keep in zip(self._groups, self._keeps, strict=True)
            ],
            dtype=np.int64,
        )
        self._entries = [
            self._entry(number, group, int(rows))
            for (number, group), rows in zip(self._groups, sizes, strict=True)
        ]
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._views: dict[int, RowGroupView] = {}
        self._metadata: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._total = int(self._starts[-1])
        self._start_list: list[int] = self._starts.tolist()
        self._getters: list[Getter | None] = []
        self._read = self._locate_stage()

    @property
    def shards(self) -> list[ShardEntry]:
        """One entry per row group (``raw_data``: the file read in place, or the cache file)."""
        return list(self._entries)

    @property
    def shard_sizes(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Rows in each row group, in dataset order."""
        return np.diff(self._starts)

    @property
    def fetcher(self) -> RowGroupFetcher | None:
        """What downloads the row groups of a remote dataset (``None`` when read in place)."""
        if not self.cached:
            return None
        return RowGroupFetcher(
            {
                entry.raw_data.basename: (self.layouts[number].key, group)
                for entry, (number, group) in zip(self._entries, self._groups, strict=True)
            }
        )

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Row ``index`` of the dataset (negative counts from the end)."""
        total = self._total
        position = index + total if index < 0 else index
        if not 0 <= position < total:
            raise IndexError(f"row {index} is out of range for {total} rows")
        return self._read(position)

    def _locate_stage(self) -> Callable[[int], dict[str, Any]]:
        """The locate stage's read of a one-id plan, over this dataset's row groups."""
        self._getters = [None] * len(self._groups)  # each decoded row group's ``get``
        return Locate(IdPlan(), self._start_list, self._getters, self.shard_view).read

    def shard_view(self, shard: int) -> RowGroupView:
        """Row group ``shard`` read and decoded (its file must be present).

        Raises:
            ShardNotFoundError: The file is missing (evicted meanwhile).
            ShardFormatError: The bytes do not decode.
        """
        view = self._views.get(shard)
        if view is not None:
            return view
        table, where = self._table(shard)
        view = RowGroupView(table, source=where)
        self._views[shard] = view
        self._getters[shard] = view.get
        return view

    def read_table(self, shard: int) -> Any:
        """Row group ``shard``'s rows as a ``pyarrow.Table``, as :meth:`shard_view` reads them.

        The projection, partition columns, and a Delta version's deletions and logical
        columns apply; nothing is kept (a reader of whole row groups in order, such as a
        converter, lets each go).

        Raises:
            ShardNotFoundError: The file is missing.
            ShardFormatError: The bytes do not decode.
        """
        return self._table(shard)[0]

    def _table(self, shard: int) -> tuple[Any, str]:
        """Row group ``shard`` read and assembled, and its name for errors."""
        number, group = self._groups[shard]
        layout = self.layouts[number]
        with self._lock:
            metadata = self._metadata.get(number)
            if metadata is None:
                metadata = self._metadata[number] = parse_metadata(layout.footer, source=layout.key)
        where = f"{self.source}/{layout.key}, row group {group.index}"
        table = read_row_group(
            os.path.join(self.root, self._entries[shard].raw_data.basename),
            metadata,
            group,
            size=layout.size,
            compact=self.cached,
            columns=self._file_columns if self.snapshot is None else self._physical(layout),
            source=where,
        )
        if table.num_rows != group.rows:
            raise ShardFormatError(
                f"{where}: read {table.num_rows} rows, expected {group.rows}; the file changed "
                "since its footer was read: start again"
            )
        if self.snapshot is None or self._files is None:
            table = self._with_partitions(table, number)
        else:
            names = self.columns or self.snapshot.names
            table = assemble(table, self.snapshot, self._files[number], names, self._keeps[shard])
        return table, where

    def file_shards(self) -> list[tuple[ParquetFileLayout, range]]:
        """Each file (its layout) and its row groups' shard numbers, in dataset order."""
        spans: list[tuple[ParquetFileLayout, range]] = []
        first = 0
        for number, layout in enumerate(self.layouts):
            stop = first
            while stop < len(self._groups) and self._groups[stop][0] == number:
                stop += 1
            spans.append((layout, range(first, stop)))
            first = stop
        return spans

    def _physical(self, layout: ParquetFileLayout) -> list[str]:
        """The physical columns of a Delta version to read from a file: those it holds."""
        assert self.snapshot is not None
        return self.snapshot.physical(self.columns or self.snapshot.names, layout.columns)

    def _with_partitions(self, table: Any, number: int) -> Any:
        """``table`` with file ``number``'s partition columns, in projection order."""
        parts = self.partitioning
        if not parts.names:
            return table
        pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
        for name, kind, value in zip(parts.names, parts.types, parts.values[number], strict=True):
            if self.columns is None or name in self.columns:
                values = pa.array(
                    [value] * table.num_rows, pa.int64() if kind == "int64" else pa.string()
                )
                table = table.append_column(name, values)
        return table if self.columns is None else table.select(self.columns)

    def why_empty(self) -> str:
        """Why the dataset has no rows, for the error that a stream holds none.

        The filters are named when they left out every file: an empty result is theirs, not
        the folder's.
        """
        if self.filtered_out and not self.layouts:
            assert self.filters is not None
            terms = [list(group) for group in self.filters.conjunctions]
            return (
                f"the filters {terms[0] if len(terms) == 1 else terms} keep none of its "
                f"{self.filtered_out} files (by their partition values); check the filters' "
                f"values against the partition values, or leave the stream out"
            )
        if self.snapshot is not None:
            return (
                f"version {self.snapshot.version} of the Delta table has no rows. Read another "
                "version (version=), or leave the stream out"
            )
        return (
            f"its folder {self.root} has no Parquet rows. Write rows to it (is the split "
            "right?), or leave the stream out"
        )

    def release(self, shard: int) -> None:
        """Forget row group ``shard``'s view; it is read again on next use.

        The view stays valid for whoever holds it; its memory goes with the last reference.
        """
        self._views.pop(shard, None)
        self._getters[shard] = None

    def __getstate__(self) -> dict[str, Any]:
        # Decoded row groups and parsed footers stay in this process; each worker reads its own.
        state = self.__dict__.copy()
        state["_views"] = {}
        state["_metadata"] = {}
        state["_lock"] = None
        state["_getters"] = state["_read"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._read = self._locate_stage()

    def _entry(self, number: int, group: RowGroupSpan, rows: int) -> ShardEntry:
        layout = self.layouts[number]
        if self.cached:
            raw = FileInfo(row_group_basename(layout, group.index), group.nbytes)
        else:
            raw = FileInfo(layout.key, layout.size)
        parts = self.partitioning
        if self.snapshot is not None:
            types = {column.name: str(column.type) for column in self.snapshot.columns}
            names = self.columns if self.columns is not None else list(types)
        else:
            names = self.columns if self.columns is not None else [*layout.columns, *parts.names]
            types = dict(zip(layout.columns, layout.types, strict=True))
            types.update(zip(parts.names, parts.types, strict=True))
        return ShardEntry(
            format="parquet",
            samples=rows,
            raw_data=raw,
            zip_data=None,
            compression=None,
            hashes=(),
            size_limit=None,
            columns={name: types[name] for name in names},
        )


def _delta_partitioning(snapshot: DeltaSnapshot) -> Partitioning:
    """A Delta version's partition columns and each file's values, as the log gives them."""
    columns = snapshot.partition_columns
    return Partitioning(
        tuple(column.name for column in columns),
        tuple(str(column.type) for column in columns),
        tuple(file.partition for file in snapshot.files),
    )


def _check_table_columns(snapshot: DeltaSnapshot, columns: list[str] | None) -> None:
    """Every projected column is one of the version's (a file may lack it: nulls)."""
    if columns is None:
        return
    if not columns or len(set(columns)) != len(columns):
        raise ConfigurationError(f"columns must be distinct column names, got {columns!r}")
    names = [column.name for column in snapshot.columns]
    missing = [name for name in columns if name not in names]
    if missing:
        raise ConfigurationError(
            f"columns={columns!r}: {missing} not in version {snapshot.version} of the Delta "
            f"table {snapshot.table}, whose columns are {names}"
        )


def _check_types(
    layouts: list[ParquetFileLayout],
    columns: list[str] | None,
    source: str,
    snapshot: DeltaSnapshot | None,
) -> None:
    """Each file holds each column it is read for in the dataset's type (``reads_as``).

    The dataset's type is the first file's (Parquet) or the schema's (Delta). Files whose
    columns and types repeat an earlier file's are not looked at again, and a footer is parsed
    only for a pair of type names not seen before.

    Raises:
        ShardFormatError: A file holds a column in another type; it names the file, the
            column and both types.
    """
    if not layouts:
        return
    first = layouts[0]
    wanted_names = dict(zip(first.columns, first.types, strict=True))
    wanted_types: dict[str, Any] = {}
    verdicts: dict[tuple[str, str], bool] = {}
    seen: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()  # files' columns and types
    for layout in layouts:
        if (layout.columns, layout.types) in seen:
            continue  # a file like one checked already
        seen.add((layout.columns, layout.types))
        held_names = dict(zip(layout.columns, layout.types, strict=True))
        held_types: dict[str, Any] = {}
        for name in columns or (layout.columns if snapshot is None else snapshot.names):
            if snapshot is None:
                physical, wanted = name, wanted_names.get(name)
            else:
                column = snapshot.column(name)
                physical, wanted = column.physical, None if column.partition else str(column.type)
            held = held_names.get(physical)
            if held is None or wanted is None:
                continue  # a partition column, or a Delta column the file predates: nulls
            verdict = verdicts.get((held, wanted))
            if verdict is None:
                if held == wanted:
                    verdict = True
                else:
                    held_types = held_types or _arrow_types(layout)
                    if snapshot is None:
                        wanted_types = wanted_types or _arrow_types(first)
                    want = wanted_types[name] if snapshot is None else column.type
                    verdict = reads_as(held_types[physical], want, widen=snapshot is not None)
                verdicts[(held, wanted)] = verdict
            if not verdict:
                raise _type_error(source, layout, name, held, wanted, first, snapshot)


def _arrow_types(layout: ParquetFileLayout) -> dict[str, Any]:
    """A file's top-level columns and their ``pyarrow`` types, from its footer."""
    schema = parse_metadata(layout.footer, source=layout.key).schema.to_arrow_schema()
    return dict(zip(schema.names, schema.types, strict=True))


def _type_error(
    source: str,
    layout: ParquetFileLayout,
    name: str,
    held: str,
    wanted: str,
    first: ParquetFileLayout,
    snapshot: DeltaSnapshot | None,
) -> ShardFormatError:
    if snapshot is None:
        return ShardFormatError(
            f"{source}: column {name!r} is {held} in {layout.key} but {wanted} in {first.key}; "
            "the files of a dataset must hold each column in one type (none is promoted): "
            "rewrite the files with one type, or leave the column out with columns=[...]"
        )
    return ShardFormatError(
        f"{source}: column {name!r} is {held} in {layout.key}, which version "
        f"{snapshot.version} of the Delta table does not read as its type {wanted} (nor "
        "widen to it); the file was not written for this table's schema: rewrite it, or "
        "leave the column out with columns=[...]"
    )


def _check_columns(
    layouts: list[ParquetFileLayout],
    columns: list[str] | None,
    source: str,
    partitions: tuple[str, ...],
) -> None:
    """Every file has the projected columns; without a projection, the same columns."""
    for layout in layouts:
        clash = [name for name in partitions if name in layout.columns]
        if clash:
            raise ConfigurationError(
                f"{source}/{layout.key} lies in the partition folder of {clash[0]!r} but also "
                f"holds a column of that name; rename the folder or the column"
            )
    if columns is not None:
        if not columns or len(set(columns)) != len(columns):
            raise ConfigurationError(f"columns must be distinct column names, got {columns!r}")
        for layout in layouts:
            missing = [
                name for name in columns if name not in layout.columns and name not in partitions
            ]
            if missing:
                raise ConfigurationError(
                    f"columns={columns!r}: {missing} not in {source}/{layout.key}, whose "
                    f"columns are {[*layout.columns, *partitions]}"
                )
        return
    if layouts:
        first = layouts[0]
        for layout in layouts[1:]:
            if layout.columns != first.columns:
                raise ShardFormatError(
                    f"{source}: {layout.key} has the columns {list(layout.columns)} but "
                    f"{first.key} has {list(first.columns)}; pass columns=[...] to read the "
                    f"ones they share"
                )
