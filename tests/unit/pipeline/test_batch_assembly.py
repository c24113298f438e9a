"""Device batches assembled from their shards' batch decoders."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardstream.errors import ShardFormatError
from shardstream.pipeline.batch_assembly import LocatedBatch, decode_columns, decode_rows


class _View:
    """A shard view whose batch decoder fails on one sample index."""

    def __init__(self, shard: int, bad: int | None = None) -> None:
        self.shard, self.bad = shard, bad
        self.names = ["x"]

    def read_columns(self, indices: list[int], *, views: bool = False) -> list[list[int]]:
        if self.bad in indices:
            raise ShardFormatError(f"sample {self.bad} of shard {self.shard} is corrupt")
        return [[100 * self.shard + index for index in indices]]


def test_batches_decoded_together_come_out_in_order():
    views: dict[int, Any] = {0: _View(0), 1: _View(1)}
    rows = [LocatedBatch([0, 1], [k, k], views) for k in range(3)]
    batches = list(decode_rows(rows, raw_views=False))
    assert [batch.columns for batch in batches] == [[[0, 100]], [[1, 101]], [[2, 102]]]


def test_a_bad_sample_in_a_group_comes_after_the_batches_before_it():
    views: dict[int, Any] = {0: _View(0, bad=2), 1: _View(1)}
    rows = [LocatedBatch([0, 1], [k, k], views) for k in range(4)]  # batch 2: the bad sample
    decoded = decode_rows(rows, raw_views=False)
    assert next(decoded).columns == [[0, 100]]
    assert next(decoded).columns == [[1, 101]]
    with pytest.raises(ShardFormatError, match="sample 2 of shard 0"):
        next(decoded)


def test_arrays_of_several_shards_come_back_in_batch_order():
    class Arrays(_View):
        def read_columns(self, indices: list[int], *, views: bool = False) -> list[Any]:
            return [np.asarray([[100 * self.shard + i] * 2 for i in indices], np.int32)]

    views: dict[int, Any] = {0: Arrays(0), 1: Arrays(1)}
    batch = decode_columns([1, 0, 1, 0], [1, 2, 3, 4], views, raw_views=False)
    (column,) = batch.columns
    assert isinstance(column, np.ndarray)
    assert column.tolist() == [[101, 101], [2, 2], [103, 103], [4, 4]]


class _Numbers(_View):
    """A shard whose numbers come as one array, or as a list for a few samples."""

    def __init__(self, shard: int, dtype: Any, as_list: bool) -> None:
        super().__init__(shard)
        self.dtype, self.as_list = dtype, as_list

    def read_columns(self, indices: list[int], *, views: bool = False) -> list[Any]:
        values = np.asarray([100 * self.shard + i for i in indices], self.dtype)
        return [values.tolist() if self.as_list else values]


def test_numbers_of_several_shards_come_back_as_one_array_in_batch_order():
    views: dict[int, Any] = {0: _Numbers(0, np.int64, False), 1: _Numbers(1, np.int64, True)}
    batch = decode_columns([1, 0, 1, 0], [1, 2, 3, 4], views, raw_views=False)
    (column,) = batch.columns
    assert isinstance(column, np.ndarray)
    assert column.dtype == np.int64
    assert column.tolist() == [101, 2, 103, 4]


def test_numbers_of_another_dtype_are_not_converted_to_the_first_shards():
    # Streams of one column name but other encodings: floats must not become ints.
    views: dict[int, Any] = {0: _Numbers(0, np.int64, False), 1: _Numbers(1, np.float64, True)}
    batch = decode_columns([1, 0], [1, 2], views, raw_views=False)
    (column,) = batch.columns
    assert isinstance(column, list)
    assert column == [101.0, 2]
    assert [type(value) for value in column] == [float, np.int64]
