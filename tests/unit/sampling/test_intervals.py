"""The bucketed interval search: always what ``np.searchsorted(..., side="right")`` says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.sampling import intervals
from shardstream.sampling.intervals import count_at_most


def searched(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.searchsorted(edges, values, side="right")


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=60),
    low=st.sampled_from([0, 0, 3, -7]),
    count=st.sampled_from([1, 100, 3000, 20_000]),
    seed=st.integers(0, 2**32 - 1),
    spread=st.sampled_from(["inside", "around"]),
)
def test_equal_to_the_binary_search(sizes, low, count, seed, spread):
    # Edges as shard starts and the total: repeats where shards are empty, gaps of any size.
    edges = np.concatenate([[low], low + np.cumsum(sizes)]).astype(np.int64)
    rng = np.random.default_rng(seed)
    top = int(edges[-1])
    if spread == "inside" and top > low:
        values = rng.integers(low, top, count)
    else:  # below and past the edges too: the search's answers there
        values = rng.integers(low - 10, top + 10, count)
    found = count_at_most(edges, values, low=low)
    assert found.dtype == np.int64
    assert np.array_equal(found, searched(edges, values))


@settings(max_examples=100, deadline=None)
@given(
    edges=st.lists(st.integers(-50, 10_000), min_size=1, max_size=30).map(sorted),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_sorted_edges_and_shapes(edges, seed):
    edges_array = np.array(edges, dtype=np.int64)
    values = np.random.default_rng(seed).integers(0, max(1, edges[-1]), (60, 50))
    found = count_at_most(edges_array, values)
    assert found.shape == values.shape
    assert np.array_equal(found, searched(edges_array, values))


def test_the_table_is_used_where_it_pays():
    # A million ids over 17 shard starts: a table of 31 buckets, not a search.
    starts = np.arange(0, 1_000_001, 62_500, dtype=np.int64)
    ids = np.random.default_rng(0).permutation(1_000_000)
    assert intervals._table(starts, ids, 0) is not None
    assert np.array_equal(count_at_most(starts, ids), searched(starts, ids))


@pytest.mark.parametrize(
    ("edges", "values"),
    [
        (np.array([0, 1, 2, 1_000_000]), np.arange(5000)),  # edges too close: a huge table
        (np.array([0, 500, 1000]), np.arange(10)),  # few values
        (np.array([0, 500, 1000]), np.arange(-1, 3000)),  # values outside the edges
        (np.array([5, 5, 5]), np.arange(3000)),  # one edge value
    ],
)
def test_falls_back_to_the_search_and_agrees(edges, values):
    assert np.array_equal(count_at_most(edges, values), searched(edges, values))


def test_unsigned_values():
    starts = np.arange(0, 100_001, 1000, dtype=np.int64)
    ids = np.random.default_rng(1).integers(0, 100_000, 10_000).astype(np.uint64)
    assert np.array_equal(count_at_most(starts, ids), searched(starts, ids.astype(np.int64)))
