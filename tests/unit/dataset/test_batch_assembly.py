"""Device batches assembled from their shards' batch decoders."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardstream.dataset.batch_assembly import LocatedBatch, decode_columns, decode_rows
from shardstream.errors import ShardFormatError


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
