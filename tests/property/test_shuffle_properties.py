"""Hypothesis properties of the shuffle algorithms: permutation, determinism, locality, spread."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.sampling import (
    SHUFFLE_ALGORITHMS,
    canonical_node_bounds,
    canonical_node_spans,
    get_shuffle,
    shuffle_canonical_node,
)
from shardstream.sampling.node_order import node_ids
from shardstream.sampling.spans import node_span_table, run_layout

SETTINGS = settings(max_examples=100, deadline=None)
ALGOS = st.sampled_from(sorted(SHUFFLE_ALGORITHMS))
SPAN_ALGOS = st.sampled_from(sorted(set(SHUFFLE_ALGORITHMS) - {"naive"}))
SIZES = st.lists(st.integers(0, 60), max_size=40).map(lambda s: np.array(s, dtype=np.int64))
NCN = st.integers(1, 8)
SEEDS = st.integers(0, 2**64 - 1)
EPOCHS = st.integers(0, 10_000)
BLOCKS = st.integers(1, 200)


@SETTINGS
@given(algo=ALGOS, sizes=SIZES, ncn=NCN, seed=SEEDS, epoch=EPOCHS, block=BLOCKS)
def test_every_algorithm_returns_a_permutation(algo, sizes, ncn, seed, epoch, block):
    perm = get_shuffle(algo, sizes, ncn, seed, epoch, block)
    assert perm.dtype == np.int64
    assert np.array_equal(np.sort(perm), np.arange(sizes.sum()))
    assert np.array_equal(perm, get_shuffle(algo, sizes, ncn, seed, epoch, block))


@SETTINGS
@given(
    algo=ALGOS,
    sizes=st.lists(st.integers(20, 60), min_size=1, max_size=20),
    ncn=NCN,
    seed=st.integers(0, 2**63),
    epoch=EPOCHS,
    block=st.integers(20, 200),
)
def test_epoch_and_seed_change_the_order(algo, sizes, ncn, seed, epoch, block):
    # Every node holds >= 25 samples, so some span (and some block) has >= 12 of them: the
    # chance that a fresh generator leaves the order unchanged is below 1 / 12!.
    sizes = np.array(sizes, dtype=np.int64)
    ncn = max(1, min(ncn, int(sizes.sum()) // 25))
    perm = get_shuffle(algo, sizes, ncn, seed, epoch, block)
    assert not np.array_equal(perm, get_shuffle(algo, sizes, ncn, seed, epoch + 1, block))
    assert not np.array_equal(perm, get_shuffle(algo, sizes, ncn, seed + 1, epoch, block))


@SETTINGS
@given(algo=SPAN_ALGOS, sizes=SIZES, ncn=NCN, seed=SEEDS, epoch=EPOCHS, block=BLOCKS)
def test_nodes_keep_their_spans_and_compute_alone(algo, sizes, ncn, seed, epoch, block):
    perm = get_shuffle(algo, sizes, ncn, seed, epoch, block)
    bounds = canonical_node_bounds(int(sizes.sum()), ncn)
    for node in range(ncn):
        spans = canonical_node_spans(algo, sizes, ncn, seed, node)
        mine = perm[bounds[node] : bounds[node + 1]]
        # Locality: the node's positions hold exactly its spans' samples, every epoch.
        assert np.array_equal(np.sort(mine), np.sort(spans.samples))
        # Independence: the node's slice needs nothing but the node's spans.
        alone = shuffle_canonical_node(algo, spans, seed, epoch, block)
        assert np.array_equal(mine, alone)


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=40),
    ncn=NCN,
    seed=SEEDS,
    epoch=EPOCHS,
    block=BLOCKS,
)
def test_py1e_spans_stay_within_a_window(sizes, ncn, seed, epoch, block):
    # A span of s samples at node position o has shifts within ±c, c <= (1.25B - s) / 2 or 0;
    # other spans' samples move by at most c_max <= 0.625B. So a sample's final rank is within
    # c + c_max of its pre-shift position, and a span's samples span at most
    # max(s, 1.25B) + 1.25B positions, below s + 2.5B.
    sizes_array = np.array(sizes, dtype=np.int64)
    perm = get_shuffle("py1e", sizes_array, ncn, seed, epoch, block)
    bounds = canonical_node_bounds(int(sizes_array.sum()), ncn)
    position = np.empty_like(perm)
    position[perm] = np.arange(len(perm))
    for node in range(ncn):
        spans = canonical_node_spans("py1e", sizes_array, ncn, seed, node)
        start = 0
        for size in spans.sizes.tolist():
            where = position[spans.samples[start : start + size]]
            start += size
            assert where.max() - where.min() < size + 5 * block // 2 + 1
            assert bounds[node] <= where.min()
            assert where.max() < bounds[node + 1]


@SETTINGS
@given(
    algo=SPAN_ALGOS,
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=40),
    ncn=NCN,
    seed=SEEDS,
    epoch=EPOCHS,
    block=BLOCKS,
    window=st.sampled_from([None, 1, 2, 16, 128]),
    data=st.data(),
)
def test_any_positions_of_a_node_alone_match_its_whole_order(
    algo, sizes, ncn, seed, epoch, block, window, data
):
    # A worker asks for a few positions of a node; it must get exactly what the whole node's
    # order holds there, however few, in whatever order, and whatever py1e's window size.
    sizes_array = np.array(sizes, dtype=np.int64)
    ncn = min(ncn, int(sizes_array.sum()))
    node = data.draw(st.integers(0, ncn - 1))
    spans = canonical_node_spans(algo, sizes_array, ncn, seed, node)
    whole = shuffle_canonical_node(algo, spans, seed, epoch, block)
    table = node_span_table(run_layout(sizes_array, ncn, seed), node, seed, algo == "py2s")
    picks = data.draw(st.lists(st.integers(0, len(whole) - 1), max_size=30))
    local = np.array(picks, dtype=np.int64)
    assert np.array_equal(node_ids(algo, table, seed, epoch, block, local, window), whole[local])
    everything = np.arange(len(whole), dtype=np.int64)
    assert np.array_equal(node_ids(algo, table, seed, epoch, block, everything, window), whole)
