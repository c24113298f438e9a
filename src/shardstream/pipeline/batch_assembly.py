"""Assembling device batches as columns from the open views of their shards.

Each shard's samples of a batch are decoded in one call (its batch decoder, or one built from
its per-sample getter), then the values are put back into batch order: a column of fixed-shape
arrays or numbers as one array, any other column as a list. Several batches of one schema can
be decoded together and split again (small samples from many shards cost less a sample that
way).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ShardstreamError
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.shard_view import ShardView
from shardstream.pipeline.column_batch import Column, ColumnBatch

__all__ = ["Gather", "Indices", "LocatedBatch", "decode_columns", "decode_rows"]

#: Gathers a batch across shards in one pass: ``gather(views, shards, local)`` is each
#: sample's column values in batch order, as a shard's ``read_columns`` gives them (a table's
#: row groups: ``RowGroupGather``). The read policy's route says whether the decode stage
#: uses one (``Route.gather``), for the whole epoch.
Gather = Callable[[Mapping[int, Any], "Indices", "Indices"], list[ColumnValues]]

#: A batch's shards or in-shard indices: a list, or an int64 array.
Indices = Sequence[int] | NDArray[np.int64]


class LocatedBatch:
    """A device batch located: each sample's shard and index in it, the shards open.

    The shards and indices are given as lists or as int64 arrays, and each form is made from
    the other on first use: a table's gatherer takes arrays (no list of a batch's ids made and
    read back), a shard's per-sample reads take lists. Unpacks as ``shards, local, views``.
    """

    __slots__ = ("_local", "_local_array", "_shard_array", "_shards", "views")

    def __init__(
        self,
        shards: list[int] | NDArray[np.int64],
        local: list[int] | NDArray[np.int64],
        views: dict[int, ShardView],
    ) -> None:
        self.views = views
        self._shards: list[int] | None = None
        self._local: list[int] | None = None
        self._shard_array: NDArray[np.int64] | None = None
        self._local_array: NDArray[np.int64] | None = None
        if isinstance(shards, np.ndarray):
            self._shard_array = shards
        else:
            self._shards = shards
        if isinstance(local, np.ndarray):
            self._local_array = local
        else:
            self._local = local

    @property
    def shards(self) -> list[int]:
        """Each sample's shard."""
        if self._shards is None:
            assert self._shard_array is not None
            self._shards = self._shard_array.tolist()
        return self._shards

    @property
    def local(self) -> list[int]:
        """Each sample's index in its shard."""
        if self._local is None:
            assert self._local_array is not None
            self._local = self._local_array.tolist()
        return self._local

    @property
    def shard_array(self) -> NDArray[np.int64]:
        """:attr:`shards` as an int64 array."""
        if self._shard_array is None:
            self._shard_array = np.asarray(self.shards, dtype=np.int64)
        return self._shard_array

    @property
    def local_array(self) -> NDArray[np.int64]:
        """:attr:`local` as an int64 array."""
        if self._local_array is None:
            self._local_array = np.asarray(self.local, dtype=np.int64)
        return self._local_array

    def __len__(self) -> int:
        return len(self._shards) if self._shards is not None else len(self.shard_array)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.shards, self.local, self.views))


def decode_rows(
    rows: list[LocatedBatch], raw_views: bool, gather: Gather | None = None
) -> Iterator[ColumnBatch]:
    """Decode device batches of one schema together; yield them one by one, in order.

    ``gather``: the route's gatherer of a batch across shards (:data:`Gather`), if any.
    """
    if not rows:
        return
    if len(rows) == 1:
        yield _decode_one(rows[0], raw_views, gather)
        return
    views: dict[int, ShardView] = {}
    for row in rows:
        views.update(row.views)
    shards = list(itertools.chain.from_iterable(row.shards for row in rows))
    local = list(itertools.chain.from_iterable(row.local for row in rows))
    try:
        batch = decode_columns(shards, local, views, raw_views, gather)
    except ShardstreamError:
        # A bad sample: decode batch by batch, so that the batches before its own are
        # delivered and the error comes where it belongs.
        for row in rows:
            yield _decode_one(row, raw_views, gather)
        return
    start = 0
    for row in rows:
        stop = start + len(row)
        # Slices: of a list a copy, of an array a view (its batches share it).
        columns: list[Column] = [cast(list[Any], column)[start:stop] for column in batch.columns]
        yield ColumnBatch(batch.names, columns)
        start = stop


def _decode_one(row: LocatedBatch, raw_views: bool, gather: Gather | None) -> ColumnBatch:
    """One located batch as columns; a gatherer (a table's row groups) takes its arrays."""
    if gather is not None:
        return decode_columns(row.shard_array, row.local_array, row.views, raw_views, gather)
    return decode_columns(row.shards, row.local, row.views, raw_views)


def decode_columns(
    shards: Indices,
    local: Indices,
    views: dict[int, ShardView],
    raw_views: bool,
    gather: Gather | None = None,
) -> ColumnBatch:
    """One device batch as columns, in batch order, decoding each shard's samples at once.

    ``gather``: the route's gatherer of a batch across shards, if any (:data:`Gather`).
    """
    view = next(iter(views.values()))
    if len(views) == 1:
        # An array only where a gatherer was given: a table's row groups, which take arrays.
        picked = cast(Sequence[int], local)
        return ColumnBatch(view.names, list(view.read_columns(picked, views=raw_views)))
    if gather is not None:
        return ColumnBatch(view.names, list[Column](gather(views, shards, local)))
    # Group the batch's positions by shard (numpy, no Python step per sample), decode each
    # shard's samples in one call, then put the values back into batch order.
    by_shard = np.asarray(shards, dtype=np.int64)
    order = np.argsort(by_shard, kind="stable")
    grouped = by_shard[order]
    indices = np.asarray(local, dtype=np.int64)[order]
    cuts = [0, *(np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist(), len(shards)]
    parts = [
        views[int(grouped[begin])].read_columns(indices[begin:end].tolist(), views=raw_views)
        for begin, end in itertools.pairwise(cuts)
    ]
    back = np.empty(len(shards), np.int64)  # batch slot -> position among the decoded values
    back[order] = np.arange(len(shards))
    pick = operator.itemgetter(*back.tolist())
    names = next(iter(views.values())).names
    columns: list[Column] = []
    for column in range(len(names)):
        arrays = _in_batch_order([part[column] for part in parts], order, cuts)
        if arrays is not None:
            columns.append(arrays)
            continue
        decoded = list(itertools.chain.from_iterable(part[column] for part in parts))
        columns.append(list(pick(decoded)))  # two or more shards: two or more values
    return ColumnBatch(names, columns)


def _in_batch_order(
    parts: list[ColumnValues], order: NDArray[np.int64], cuts: list[int]
) -> NDArray[Any] | None:
    """One column's arrays of every shard as one array in batch order; ``None`` if not arrays.

    Part ``k`` holds the values of batch slots ``order[cuts[k]:cuts[k + 1]]``: an array whose
    rows (or elements: numbers) are the values, or a list of them (a shard asked for a few
    samples decodes them one by one). Only when every value has the same shape and dtype
    (shards of one encoding).
    """
    first_array = next((part for part in parts if isinstance(part, np.ndarray)), None)
    if first_array is None:
        return None
    numbers = first_array.ndim == 1
    arrays = []
    for part in parts:
        if isinstance(part, list) and numbers:
            part = np.array(part)  # numbers of another dtype fail the check below
        elif isinstance(part, list):
            if not all(isinstance(value, np.ndarray) for value in part):
                return None
            try:
                part = np.stack(part)
            except ValueError:  # values of other shapes
                return None
        arrays.append(part)
    first = arrays[0]
    if not all(part.dtype == first.dtype and part.shape[1:] == first.shape[1:] for part in arrays):
        return None
    out = np.empty((len(order), *first.shape[1:]), first.dtype)
    for (begin, end), part in zip(itertools.pairwise(cuts), arrays, strict=True):
        out[order[begin:end]] = part
    return out
