"""The reader's bookkeeping over an epoch plan."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardstream.dataset.iteration import _decode_rows, _last_uses
from shardstream.errors import ShardFormatError


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(
        np.int64,
        st.tuples(st.integers(0, 12), st.integers(1, 6)),
        elements=st.integers(0, 9),
    )
)
def test_each_shard_is_done_after_the_last_row_that_uses_it(shards):
    done = _last_uses(shards)
    released = [shard for row in sorted(done) for shard in done[row]]
    assert sorted(released) == sorted(set(shards.reshape(-1).tolist()))  # each shard once
    for row, finished in done.items():
        for shard in finished:
            assert shard in shards[row]
            assert shard not in shards[row + 1 :]


class _View:
    """A shard view whose batch decoder fails on one sample index."""

    schema = SimpleNamespace(names=["x"])

    def __init__(self, shard: int, bad: int | None = None) -> None:
        self.shard, self.bad = shard, bad

    def get_many(self, indices: list[int]) -> list[list[int]]:
        if self.bad in indices:
            raise ShardFormatError(f"sample {self.bad} of shard {self.shard} is corrupt")
        return [[100 * self.shard + index for index in indices]]


def test_batches_decoded_together_come_out_in_order():
    views: dict[int, Any] = {0: _View(0), 1: _View(1)}
    rows = [([0, 1], [k, k], views) for k in range(3)]
    batches = list(_decode_rows(rows, raw_views=False))
    assert [batch.columns for batch in batches] == [[[0, 100]], [[1, 101]], [[2, 102]]]


def test_a_bad_sample_in_a_group_comes_after_the_batches_before_it():
    views: dict[int, Any] = {0: _View(0, bad=2), 1: _View(1)}
    rows = [([0, 1], [k, k], views) for k in range(4)]  # batch 2 holds the bad sample
    decoded = _decode_rows(rows, raw_views=False)
    assert next(decoded).columns == [[0, 100]]
    assert next(decoded).columns == [[1, 101]]
    with pytest.raises(ShardFormatError, match="sample 2 of shard 0"):
        next(decoded)
