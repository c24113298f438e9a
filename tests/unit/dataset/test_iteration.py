"""The reader's bookkeeping over an epoch plan."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.cache.shard_cache import ShardCache
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


def _epoch_touches(dataset: StreamingDataset, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The shards the reader marks as used (``ShardCache.touch``) over one epoch."""
    touched: list[int] = []
    original = ShardCache.touch

    def touch(cache: ShardCache, shard: int) -> None:
        touched.append(shard)
        original(cache, shard)

    monkeypatch.setattr(ShardCache, "touch", touch)
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(200))
    monkeypatch.undo()
    return touched


def test_shards_are_marked_used_unless_just_fetched(tmp_path, monkeypatch):
    remote = write_dataset(tmp_path / "remote", 200, size_limit=1024)
    local = tmp_path / "cache"
    dataset = StreamingDataset(remote=str(remote), local=str(local), shuffle=True, batch_size=8)
    assert not list(local.glob("**/shard.*.mds"))  # nothing fetched by constructing
    assert _epoch_touches(dataset, monkeypatch) == []  # every file's time is its fetch's
    files = sorted(local.glob("**/shard.*.mds"))
    assert len(files) > 5
    for path in files:  # an old copy: the next epoch must mark each shard as used, once
        os.utime(path, (1_000_000, 1_000_000))
    touched = _epoch_touches(dataset, monkeypatch)
    assert sorted(touched) == list(range(len(files)))
    assert all(path.stat().st_mtime > 1_000_000 for path in files)
