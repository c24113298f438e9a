"""Device batches gathered across many row groups: one array index per batch, not per group.

A shuffled batch draws its rows from every row group of the shuffle's window (tens of them).
Picking each group's rows of each column costs an array index, a Python call, per group and
column, more than the values themselves. So a decode stage of a table keeps the row groups'
values in arrays of its own (:class:`RowGroupGather`), into which each row group is copied
once, the first time a batch draws from it: a batch is then one index into those arrays,
however many row groups it spans.

The numeric columns are held row by row, in one array of records (a structured dtype whose
rows are padded to a power of two of bytes where they are small): a shuffled batch reads
each of its rows from anywhere in the arrays, and one record is one read of memory (and
numpy's fast copy of a power-of-two size) where a column each would be one read per column.
Strings and binaries are held in one object array each. Each batch's column is then copied
out of the records it took, contiguous, in its own dtype and row shape.

The arrays grow by doubling, and drop the rows of released row groups when they would grow,
so each row group is copied a bounded number of times; they hold the row groups a reader has
open, and some it released since. Row groups whose columns are not all numbers (of one shape)
or strings are gathered row group by row group (:meth:`RowGroupView.gather_columns`), as are
batches from fewer than ``min_groups`` row groups. The values, their types and their order are
the row groups' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.format.batch_decode import ColumnValues
from shardstream.pipeline.batch_assembly import Indices
from shardstream.tables.row_group_view import RowGroupView, batch_values

__all__ = ["RowGroupGather"]

Kinds = tuple[tuple[np.dtype[Any], tuple[int, ...]] | None, ...]

#: Records up to this many bytes are padded to a power of two (numpy copies those fastest).
_PADDED = 64
_OBJECTS = np.dtype(object)


class RowGroupGather:
    """Gathers batches across row groups through arrays of its own (see the module).

    Made per decode stage (an epoch's pipeline); called as
    :meth:`RowGroupView.gather_columns` is.

    Args:
        min_groups: Batches from fewer row groups are gathered group by group (the policy's
            ``gather_min_groups``).
    """

    def __init__(self, min_groups: int) -> None:
        self._min_groups = min_groups
        self._kinds: Kinds | None = None  # of the columns held; () once they cannot be held
        self._layout: _Layout | None = None
        self._records: NDArray[Any] = np.empty(0)  # the numeric columns, a record a row
        self._objects: list[NDArray[Any]] = []  # each string or binary column
        self._size = 0  # rows the arrays have room for
        self._used = 0  # rows of the arrays in use
        self._start: dict[RowGroupView, int] = {}  # each held row group's first row
        # The last batch's row groups, and by shard number their first row in the arrays
        # and their rows (0 where not among them): a batch's index is one lookup per row.
        self._views: dict[int, RowGroupView] | None = None
        self._first_of = np.zeros(0, np.int64)
        self._rows_of = np.zeros(0, np.uint64)
        self._placed = np.zeros(0, np.int64)

    def __call__(
        self, views: Mapping[int, RowGroupView], shards: Indices, local: Indices
    ) -> list[ColumnValues]:
        """Row ``local[i]`` of ``views[shards[i]]`` for each ``i``, as ``get_many`` gives."""
        if views != self._views:  # other row groups than the last batch's
            if len(views) < self._min_groups or not self._hold(views.values()):
                return RowGroupView.gather_columns(views, shards, local)
            self._place(views)
        which = _int64(shards)
        rows = _int64(local)
        if len(which):
            # Unsigned, a negative number is out of range too: one comparison a bound.
            if int(which.view(np.uint64).max()) >= len(self._first_of):
                raise _not_open(views, which)
            limit = self._rows_of[which]
            if not bool((rows.view(np.uint64) < limit).all()):
                if not set(which.tolist()) <= views.keys():
                    raise _not_open(views, which)
                raise IndexError(f"rows {list(local)} run outside their row groups")
            index = self._first_of[which]
            index += rows
        else:
            index = which
        assert self._layout is not None
        return self._layout.columns(self._records, self._objects, index)

    def _place(self, views: Mapping[int, RowGroupView]) -> None:
        """Make ``views`` (all held) the row groups the shard-number tables point into."""
        keys = np.fromiter(views.keys(), np.int64, len(views))
        top = int(keys.max()) + 1 if len(keys) else 0
        if top > len(self._first_of):
            size = max(top, 2 * len(self._first_of))
            self._first_of = np.zeros(size, np.int64)
            self._rows_of = np.zeros(size, np.uint64)
        else:
            self._rows_of[self._placed] = 0
        self._first_of[keys] = [self._start[view] for view in views.values()]
        self._rows_of[keys] = [len(view) for view in views.values()]
        self._placed = keys
        self._views = dict(views)

    def _hold(self, views: Any) -> bool:
        """Copy the row groups not held yet into the arrays; false if they cannot be held."""
        new = [view for view in views if view not in self._start]
        for view in new:
            kinds = view.kinds()
            if self._kinds is None:
                held = bool(kinds) and all(kind is not None for kind in kinds)
                self._kinds = kinds if held else ()
                self._layout = _Layout(kinds) if held else None
            if not self._kinds or kinds != self._kinds:
                return False
        if not new:
            return True
        needed = sum(len(view) for view in new)
        if self._used + needed > self._size:
            self._make_room(needed, keep=set(views))
            self._views = None  # the held row groups moved
        assert self._layout is not None
        for view in new:
            rows = len(view)
            self._layout.put(self._records, self._objects, self._used, view.decoded())
            self._start[view] = self._used
            self._used += rows
        return True

    def _make_room(self, needed: int, keep: set[RowGroupView]) -> None:
        """New arrays holding the row groups still open (and ``keep``), with room to spare."""
        assert self._layout is not None
        live = [view for view in self._start if view in keep or not view.released]
        held = sum(len(view) for view in live)
        size = max(2 * (held + needed), 1024)
        records, objects = self._layout.empty(size)
        start: dict[RowGroupView, int] = {}
        used = 0
        for view in live:
            first, rows = self._start[view], len(view)
            if self._layout.fields:
                records[used : used + rows] = self._records[first : first + rows]
            for new, old in zip(objects, self._objects, strict=True):
                new[used : used + rows] = old[first : first + rows]
            start[view] = used
            used += rows
        self._records, self._objects, self._size = records, objects, size
        self._start, self._used = start, used


class _Layout:
    """Where each column of the held row groups lives: a field of the records, or its array."""

    def __init__(self, kinds: Kinds) -> None:
        numeric = [k for k, kind in enumerate(kinds) if kind is not None and kind[0] != _OBJECTS]
        # Widest first: each field lands on an offset its own size divides (sizes are powers
        # of two), so no field straddles its alignment.
        numeric.sort(key=lambda k: -_item(kinds[k]).alignment)
        names, formats, offsets, end = [], [], [], 0
        for k in numeric:
            dtype, shape = kinds[k]  # type: ignore[misc]  # numeric: not None
            align = _item(kinds[k]).alignment
            end = -(-end // align) * align
            names.append(f"c{k}")
            formats.append((dtype, shape) if shape else dtype)
            offsets.append(end)
            end += dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        width = max(end, 1)
        width = 1 << (width - 1).bit_length() if width <= _PADDED else -(-width // 8) * 8
        self.fields: list[str] = names
        self.dtype = np.dtype(
            {"names": names, "formats": formats, "offsets": offsets, "itemsize": width}
        )
        objects = [k for k, kind in enumerate(kinds) if kind is not None and kind[0] == _OBJECTS]
        # Each column in the view's order: its field's name, or the number of its object array.
        self.where: list[str | int] = []
        for k in range(len(kinds)):
            self.where.append(f"c{k}" if k in numeric else objects.index(k))

    def empty(self, size: int) -> tuple[NDArray[Any], list[NDArray[Any]]]:
        """Records and object arrays of ``size`` rows."""
        count = sum(1 for where in self.where if isinstance(where, int))
        records = np.empty(size if self.fields else 0, self.dtype)
        return records, [np.empty(size, _OBJECTS) for _ in range(count)]

    def put(
        self, records: NDArray[Any], objects: list[NDArray[Any]], at: int, columns: list[Any]
    ) -> None:
        """A row group's ``columns`` into the arrays, from row ``at``."""
        for where, values in zip(self.where, columns, strict=True):
            target = records[where] if isinstance(where, str) else objects[where]
            target[at : at + len(values)] = values

    def columns(
        self, records: NDArray[Any], objects: list[NDArray[Any]], index: NDArray[np.int64]
    ) -> list[ColumnValues]:
        """Rows ``index`` of the arrays, as each column's values (a batch's own copies)."""
        taken = records.take(index) if self.fields else records
        out: list[ColumnValues] = []
        for where in self.where:
            if isinstance(where, str):
                out.append(taken[where].copy())  # contiguous, in the column's dtype
            else:
                out.append(batch_values(objects[where].take(index)))
        return out


def _item(kind: tuple[np.dtype[Any], tuple[int, ...]] | None) -> np.dtype[Any]:
    assert kind is not None
    return kind[0]


def _not_open(views: Mapping[int, RowGroupView], which: NDArray[np.int64]) -> KeyError:
    """The error of a batch naming row groups not among ``views``."""
    return KeyError(f"shards {sorted(set(which.tolist()) - set(views))} are not open")


def _int64(values: Indices) -> NDArray[np.int64]:
    """``values`` as an int64 array (from a list, ``fromiter`` is the fastest way)."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False)
    return np.fromiter(values, np.int64, len(values))
