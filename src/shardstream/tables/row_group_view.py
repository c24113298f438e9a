"""Random access to the rows of one decoded Parquet row group, as samples or as columns.

Each column is turned into Python values once, on first use, and indexed from then on:

* numbers and booleans without nulls: a numpy array (a row's value is a numpy scalar);
* lists of numbers without nulls: one numpy array per row (ragged lengths are fine);
* strings and binaries: a numpy array of ``str`` / ``bytes`` objects (``None`` for nulls),
  so that a batch's are one array index, not a pick per row;
* everything else as ``pyarrow`` gives it (``str``, ``bytes``, ``None`` for nulls,
  ``datetime``, ``Decimal``, ``list``, ``dict`` for structs).

Runs of rows in order (:meth:`RowGroupView.get_many`, :meth:`RowGroupView.gather_columns`)
take their strings and binaries from the Arrow column instead, a batch's at a time, until the
column's objects are made for another reader (a row's ``get``, rows picked at random, a
gatherer's arrays): objects made all at once for the row group stay in memory until it is
released, while a batch's are made and dropped together, in memory the allocator hands out
again warm, which costs several times less a value. The values and their types are the same
either way.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream._optional import require
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.shard_file import SampleFile

__all__ = ["RowGroupView", "batch_values"]

#: Numbers whose rows go into a batch as one array: the tensor ``default_collate`` makes of
#: their scalars one by one (it refuses numpy's uint64 scalars, which stay a list).
_AS_ARRAY = frozenset(
    np.dtype(name) for name in ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "f2", "f4", "f8")
)
#: Strings and binaries: their batch is one array index, then a list (``tolist``).
_OBJECTS = np.dtype(object)
#: Columns a batch across row groups takes with one index per row group.
_JOINED = _AS_ARRAY | {_OBJECTS}


class RowGroupView:
    """The rows of one row group, by their index within it.

    Implements :class:`~shardstream.format.shard_view.ShardView`; the row group is decoded
    whole when read, so it is held in this process's memory.

    Args:
        table: The row group, read (and projected) into a ``pyarrow.Table``.
        source: The file and row group, named in errors.
    """

    def __init__(self, table: Any, *, source: str) -> None:
        self.source = source
        self.schema = table.schema  # ``.names``: the columns, in get_many's order
        self.names: list[str] = list(table.schema.names)
        #: Bytes the decoded row group holds in memory.
        self.held_bytes = int(table.nbytes)
        self._rows = int(table.num_rows)
        self._table: Any = table
        self._columns: list[Any] = [None] * len(self.names)
        self._all: list[Any] | None = None  # every column, once all are decoded
        self._batch: list[Any] | None = None  # what batches read, strings left in Arrow
        # Each decoded column's dtype and row shape where it goes into a batch as one array.
        self._kinds: tuple[tuple[np.dtype[Any], tuple[int, ...]] | None, ...] = ()

    in_memory = True
    grouped_decode = False  # decoded whole already: one call or many cost the same
    reads_runs = False

    def __len__(self) -> int:
        return self._rows

    def get(self, index: int) -> dict[str, Any]:
        """Row ``index`` as ``{column: value}``."""
        if not 0 <= index < self._rows:
            raise IndexError(f"{self.source}: row {index} is out of range for {self._rows} rows")
        columns = self._all if self._all is not None else self._decode_all()
        return {name: values[index] for name, values in zip(self.names, columns, strict=True)}

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Row ``index`` (negative counts from the end)."""
        return self.get(index + self._rows if index < 0 else index)

    def get_many(self, indices: Sequence[int]) -> list[ColumnValues]:
        """Rows ``indices`` as the values of each column (in :attr:`names` order).

        A column of numbers (but uint64) comes as one 1-D array, one of number lists of one
        length as one 2-D array (its rows the values), any other as a list.
        """
        if isinstance(indices, np.ndarray):
            picked = indices.astype(np.int64, copy=False)
        else:
            picked = np.fromiter(indices, np.int64, len(indices))
        size = picked.size
        run = size > 1 and picked[-1] - picked[0] == size - 1
        if run and bool((picked[1:] > picked[:-1]).all()):  # a run of rows, in order
            first, stop = int(picked[0]), int(picked[-1]) + 1
            if first < 0 or stop > self._rows:
                raise IndexError(f"{self.source}: rows {indices} run outside {self._rows} rows")
            return _run(self._batch_sources(), first, stop)
        if size and (picked.min() < 0 or picked.max() >= self._rows):
            raise IndexError(f"{self.source}: rows {indices} run outside {self._rows} rows")
        rows: list[int] | None = None
        out: list[ColumnValues] = []
        for k, values in enumerate(self._batch_sources()):
            if isinstance(values, np.ndarray):
                # A fancy index copies: the batch owns its (writable) values.
                out.append(batch_values(values[picked]))
                continue
            if isinstance(values, _Strings):
                out.append(self._string_rows(k, values, picked))
                continue
            if rows is None:
                rows = picked.tolist()
            if len(rows) > 1:
                out.append(list(operator.itemgetter(*rows)(values)))
            else:
                out.append([values[row] for row in rows])
        return out

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Rows ``indices`` as the values of each column (:meth:`get_many`)."""
        return self.get_many(indices)

    @staticmethod
    def gather_columns(
        views: Mapping[int, RowGroupView],
        shards: Sequence[int] | NDArray[np.int64],
        local: Sequence[int] | NDArray[np.int64],
    ) -> list[ColumnValues]:
        """Row ``local[i]`` of ``views[shards[i]]`` for each ``i``, as :meth:`get_many` gives.

        One batch drawn from many row groups costs one array index per row group and column
        (a shuffled batch touches every open row group), not a call through the whole
        per-view protocol. The views must share their columns.
        """
        which = np.asarray(shards, dtype=np.int64)
        rows = np.asarray(local, dtype=np.int64)
        order = np.argsort(which, kind="stable")
        grouped, picked = which[order], rows[order]
        cuts = [0, *(np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist(), len(order)]
        spans = list(itertools.pairwise(cuts))
        parts = [views[shard] for shard in grouped[cuts[:-1]].tolist()]
        sizes = np.repeat([view._rows for view in parts], np.diff(cuts))
        if len(picked) and (picked.min() < 0 or (picked >= sizes).any()):
            raise IndexError(f"rows {list(local)} run outside their row groups")
        back = np.empty(len(order), np.int64)  # batch slot -> position in grouped order
        back[order] = np.arange(len(order))
        decoded = [view._batch_sources() for view in parts]
        kinds = {view._kinds for view in parts}  # () where a view is not decoded whole
        one_kind = parts[0]._kinds if len(kinds) == 1 and parts else ()
        out: list[ColumnValues] = []
        for k in range(len(parts[0].names) if parts else 0):
            columns = [values[k] for values in decoded]
            if (one_kind and one_kind[k] is not None) or _one_array_type(columns):
                taken = [c[picked[b:e]] for c, (b, e) in zip(columns, spans, strict=True)]
                out.append(batch_values(np.concatenate(taken)[back]))  # batch order
                continue
            values: list[Any] = []
            for view, c, (b, e) in zip(parts, columns, spans, strict=True):
                if isinstance(c, np.ndarray):
                    values.extend(c[picked[b:e]])
                elif isinstance(c, _Strings):
                    values.extend(view._string_rows(k, c, picked[b:e]))
                elif e - b > 1:
                    values.extend(operator.itemgetter(*picked[b:e].tolist())(c))
                else:
                    values.append(c[int(picked[b])])
            if len(values) > 1:
                values = list(operator.itemgetter(*back.tolist())(values))
            out.append(values)
        return out

    @property
    def released(self) -> bool:
        """Whether :meth:`release` let go of the decoded data."""
        return self._table is None

    def kinds(self) -> tuple[tuple[np.dtype[Any], tuple[int, ...]] | None, ...]:
        """Each column's dtype and row shape where a batch takes it with one array index.

        Numbers (but uint64) and number lists of one length, and strings and binaries (an
        object array); ``None`` for any other column. Decodes the row group.
        """
        if self._all is None:
            self._decode_all()
        return self._kinds

    def decoded(self) -> list[Any]:
        """Each column's values (an array where :meth:`kinds` names one); decodes them."""
        return self._all if self._all is not None else self._decode_all()

    def sample_file(self) -> SampleFile | None:
        """``None``: a row group is read whole."""
        return None

    def let_go(self, first: int, stop: int) -> None:
        """Held until released."""

    def release(self) -> None:
        """Drop the decoded data (values already handed out stay valid)."""
        self._table = None
        self._columns = [None] * len(self.names)
        self._all = None
        self._batch = None

    def _decode_all(self) -> list[Any]:
        columns = [self._column(k) for k in range(len(self.names))]
        self._kinds = tuple(
            (c.dtype, c.shape[1:]) if isinstance(c, np.ndarray) and c.dtype in _JOINED else None
            for c in columns
        )
        self._all = columns
        return columns

    def _batch_sources(self) -> list[Any]:
        """Each column as batches read it: decoded, or its strings kept in Arrow (not decoded)."""
        if self._all is not None:
            return self._all
        if self._batch is None:
            if self._table is None:
                raise ValueError(f"{self.source}: the row group view was released")
            self._batch = [
                self._column(k) if self._columns[k] is not None else _Strings.of(column)
                for k, column in enumerate(self._table.columns)
            ]
            for k, values in enumerate(self._batch):
                if values is None:
                    self._batch[k] = self._column(k)
        return self._batch

    def _string_rows(self, k: int, strings: _Strings, picked: NDArray[np.int64]) -> list[Any]:
        """Rows ``picked`` (in range) of column ``k``, kept in Arrow as ``strings``.

        A run of rows in order comes from Arrow; rows picked at random from the column's
        objects, made once from then on: a shuffle's picks of a row group add up to all of
        its rows, each pick a call into Arrow where an object array's index costs little.
        """
        if not len(picked):
            return []
        first, last = int(picked[0]), int(picked[-1])
        if last - first == len(picked) - 1 and bool((picked[1:] > picked[:-1]).all()):
            return strings.run(first, last + 1)
        objects = self._column(k)
        if self._batch is not None:
            self._batch[k] = objects
        values: list[Any] = objects[picked].tolist()
        return values

    def _column(self, k: int) -> Any:
        values = self._columns[k]
        if values is None:
            if self._table is None:
                raise ValueError(f"{self.source}: the row group view was released")
            values = self._columns[k] = _values(self._table.column(k))
        return values


def _one_array_type(columns: list[Any]) -> bool:
    """Whether the row groups' values of a column are arrays of one dtype and row shape."""
    first = columns[0]
    return (
        isinstance(first, np.ndarray)
        and first.dtype in _JOINED
        and all(
            isinstance(c, np.ndarray) and c.dtype == first.dtype and c.shape[1:] == first.shape[1:]
            for c in columns
        )
    )


def batch_values(values: NDArray[Any]) -> ColumnValues:
    """A batch's values of a column, taken (copied) from its array: an array, or a list."""
    if values.dtype in _AS_ARRAY:
        return values
    if values.dtype == _OBJECTS:
        objects: list[Any] = values.tolist()  # the str / bytes / None objects themselves
        return objects
    return list(values)  # numpy scalars (uint64, which default_collate refuses as an array)


def _run(columns: list[Any], first: int, stop: int) -> list[ColumnValues]:
    """Rows ``[first, stop)`` of each column, as :meth:`RowGroupView.get_many` gives them."""
    out: list[ColumnValues] = []
    for values in columns:
        if isinstance(values, _Strings):
            out.append(values.run(first, stop))
        elif not isinstance(values, np.ndarray):
            out.append(values[first:stop])  # a list's slice is a new list
        elif values.dtype in _AS_ARRAY:
            out.append(values[first:stop].copy())  # the batch owns its (writable) values
        else:
            out.append(batch_values(values[first:stop]))
    return out


class _Strings:
    """A column of strings or binaries kept in Arrow: a batch's values made when it is read."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    @classmethod
    def of(cls, column: Any) -> _Strings | None:
        """The column kept so, if it holds strings or binaries (``None`` otherwise)."""
        return cls(cls.array_of(column)) if _is_strings(column.type) else None

    @staticmethod
    def array_of(column: Any) -> Any:
        """A chunked column as one array: its one chunk (a row group read whole), or joined."""
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

    def run(self, first: int, stop: int) -> list[Any]:
        """Rows ``[first, stop)``: ``str`` / ``bytes`` objects, ``None`` for nulls."""
        values: list[Any] = _objects(self.array.slice(first, stop - first)).tolist()
        return values


def _objects(array: Any) -> NDArray[Any]:
    """An Arrow array of strings or binaries as an object array of ``str`` / ``bytes`` / ``None``.

    The array's own ``to_numpy``: older pyarrow's ``to_pylist`` makes a scalar of each value,
    and a chunked array's ``to_numpy`` costs several times an array's.
    """
    values: NDArray[Any] = array.to_numpy(zero_copy_only=False)
    return values


def _is_strings(kind: Any) -> bool:
    """Whether an Arrow type is one of strings or binaries (their values ``str`` / ``bytes``)."""
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _values(column: Any) -> Any:
    """A chunked Arrow column as an indexable sequence of Python (or numpy) values."""
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    kind = column.type
    if column.null_count == 0 and (
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    ):
        # Read-only when zero-copy: a row is a numpy scalar and a batch a fancy-indexed copy.
        return column.to_numpy()
    if _is_strings(kind):
        # ``str`` / ``bytes`` objects (``None`` for nulls), as ``to_pylist`` makes them.
        return _objects(_Strings.array_of(column))
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and column.null_count == 0:
        item = kind.value_type
        if pa.types.is_integer(item) or pa.types.is_floating(item):
            array = column.combine_chunks()
            if array.values.null_count == 0:
                offsets = array.offsets.to_numpy()
                flat = np.array(array.values.to_numpy()[offsets[0] : offsets[-1]])
                lengths = np.diff(offsets)
                if len(array) and (lengths == lengths[0]).all():
                    return flat.reshape(len(array), int(lengths[0]))  # rows: the values
                starts = (offsets - offsets[0]).tolist()
                return [flat[a:b] for a, b in itertools.pairwise(starts)]
    return column.to_pylist()
