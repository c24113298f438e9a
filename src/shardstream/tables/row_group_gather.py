"""Device batches gathered across many row groups: one array index per column, not per group.

A shuffled batch draws its rows from every row group of the shuffle's window (tens of them).
Picking each group's rows of each column costs an array index, a Python call, per group and
column, more than the values themselves. So a decode stage of a table keeps one array per
column (:class:`RowGroupGather`), into which each row group's columns are copied once, the
first time a batch draws from it: a batch is then one index per column into those arrays,
however many row groups it spans.

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


class RowGroupGather:
    """Gathers batches across row groups through one array per column (see the module).

    Made per decode stage (an epoch's pipeline); called as
    :meth:`RowGroupView.gather_columns` is.

    Args:
        min_groups: Batches from fewer row groups are gathered group by group (the policy's
            ``gather_min_groups``).
    """

    def __init__(self, min_groups: int) -> None:
        self._min_groups = min_groups
        self._kinds: Kinds | None = None  # of the columns held; () once they cannot be held
        self._arrays: list[NDArray[Any]] = []
        self._used = 0  # rows of the arrays in use
        self._start: dict[RowGroupView, int] = {}  # each held row group's first row
        # The last batch's row groups, and by shard number their first row in the arrays
        # (-1: not among them) and their rows: a batch's index is one lookup per row.
        self._views: dict[int, RowGroupView] | None = None
        self._first_of = np.full(0, -1, np.int64)
        self._rows_of = np.zeros(0, np.int64)
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
            first_of = self._first_of
            if which.min() < 0 or which.max() >= len(first_of):
                raise _not_open(views, which)
            first = first_of[which]
            if first.min() < 0:
                raise _not_open(views, which)
            if rows.min() < 0 or (rows >= self._rows_of[which]).any():
                raise IndexError(f"rows {list(local)} run outside their row groups")
            index = first + rows
        else:
            index = which
        return [batch_values(array.take(index, axis=0)) for array in self._arrays]

    def _place(self, views: Mapping[int, RowGroupView]) -> None:
        """Make ``views`` (all held) the row groups the shard-number tables point into."""
        keys = np.fromiter(views.keys(), np.int64, len(views))
        top = int(keys.max()) + 1 if len(keys) else 0
        if top > len(self._first_of):
            size = max(top, 2 * len(self._first_of))
            self._first_of = np.full(size, -1, np.int64)
            self._rows_of = np.zeros(size, np.int64)
        else:
            self._first_of[self._placed] = -1
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
                self._kinds = kinds if kinds and all(kind is not None for kind in kinds) else ()
            if not self._kinds or kinds != self._kinds:
                return False
        if not new:
            return True
        needed = sum(len(view) for view in new)
        if not self._arrays or self._used + needed > len(self._arrays[0]):
            self._make_room(needed, keep=set(views))
            self._views = None  # the held row groups moved
        for view in new:
            rows = len(view)
            for array, values in zip(self._arrays, view.decoded(), strict=True):
                array[self._used : self._used + rows] = values
            self._start[view] = self._used
            self._used += rows
        return True

    def _make_room(self, needed: int, keep: set[RowGroupView]) -> None:
        """New arrays holding the row groups still open (and ``keep``), with room to spare."""
        assert self._kinds
        live = [view for view in self._start if view in keep or not view.released]
        held = sum(len(view) for view in live)
        size = max(2 * (held + needed), 1024)
        arrays = [np.empty((size, *kind[1]), kind[0]) for kind in self._kinds if kind is not None]
        start: dict[RowGroupView, int] = {}
        used = 0
        for view in live:
            first, rows = self._start[view], len(view)
            for new, old in zip(arrays, self._arrays, strict=True):
                new[used : used + rows] = old[first : first + rows]
            start[view] = used
            used += rows
        self._arrays, self._start, self._used = arrays, start, used


def _not_open(views: Mapping[int, RowGroupView], which: NDArray[np.int64]) -> KeyError:
    """The error of a batch naming row groups not among ``views``."""
    return KeyError(f"shards {sorted(set(which.tolist()) - set(views))} are not open")


def _int64(values: Indices) -> NDArray[np.int64]:
    """``values`` as an int64 array (from a list, ``fromiter`` is the fastest way)."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False)
    return np.fromiter(values, np.int64, len(values))
