"""Per-node lookups: addressable draws, span tables, and memory that follows the positions."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from shardstream.sampling import ShuffleConfig, canonical_node_order, canonical_node_spans
from shardstream.sampling import node_order as node_order_module
from shardstream.sampling.node_order import node_ids
from shardstream.sampling.sequence import node_order_at
from shardstream.sampling.spans import SpanTable, Substreams, node_span_table, run_layout

SPAN_ALGOS = ["py1b", "py1br", "py1e", "py1s", "py2s"]
SIZES = np.array([7, 0, 12, 3, 9, 15, 1, 0, 8, 11], dtype=np.int64)


def test_substream_items_are_drawn_alone_in_any_order():
    streams = Substreams(1, 2, 3, 8)
    forward = [streams[i].random(5).tolist() for i in range(4)]
    backward = [streams[i].random(5).tolist() for i in reversed(range(4))][::-1]
    assert forward == backward
    # Item i is the seeded stream advanced by i * STRIDE outputs.
    bits = np.random.PCG64(np.random.SeedSequence(np.array([1, 2, 3, 8], dtype=np.uint64)))
    bits.advance(2 * Substreams.STRIDE)
    assert np.random.Generator(bits).random(5).tolist() == forward[2]
    assert len({tuple(item) for item in forward}) == 4
    assert Substreams(1, 2, 3, 9)[0].random(5).tolist() != forward[0]


@pytest.mark.parametrize("algo", ["py1s", "py2s"])
def test_span_tables_cut_the_same_spans_as_node_spans(algo):
    layout = run_layout(SIZES, 3, 5)
    for node in range(3):
        table = node_span_table(layout, node, 5, split_shuffled=algo == "py2s")
        spans = canonical_node_spans(algo, SIZES, 3, 5, node)
        assert np.array_equal(table.samples(), spans.samples)
        assert np.array_equal(table.sizes, spans.sizes)
        starts = np.cumsum(spans.sizes) - spans.sizes
        index = np.repeat(np.arange(len(spans.sizes)), spans.sizes)
        offsets = np.arange(len(spans.samples)) - starts[index]
        assert np.array_equal(table.at(index, offsets), spans.samples)
        given = SpanTable.of(spans)
        assert np.array_equal(given.at(index[::-1], offsets[::-1]), spans.samples[::-1])
        for i in range(len(spans.sizes)):
            assert np.array_equal(
                table.span(i), spans.samples[starts[i] : starts[i] + spans.sizes[i]]
            )


@pytest.mark.parametrize("algo", SPAN_ALGOS)
def test_positions_in_any_shape_order_and_with_repeats(algo):
    sizes = np.full(30, 40, dtype=np.int64)
    config = ShuffleConfig(shuffle=True, algo=algo, seed=3, block_size=50)
    whole = canonical_node_order(sizes, 2, 1, 4, config)
    local = np.array([[599, 0, 17], [17, 300, 1]], dtype=np.int64)
    assert np.array_equal(node_order_at(sizes, 2, 1, 4, config, local), whole[local])
    assert node_order_at(sizes, 2, 1, 4, config, np.empty(0, np.int64)).shape == (0,)


@pytest.mark.parametrize("window", [1, 8, 64, 1 << 10])
def test_py1e_windows_never_change_the_order(window):
    sizes = np.full(50, 30, dtype=np.int64)
    layout = run_layout(sizes, 1, 2)
    table = node_span_table(layout, 0, 2, split_shuffled=False)
    everything = np.arange(1500, dtype=np.int64)
    whole = node_ids("py1e", table, 2, 0, 200, everything)
    assert np.array_equal(node_ids("py1e", table, 2, 0, 200, everything, window), whole)
    few = np.array([3, 700, 701, 1499], dtype=np.int64)  # most windows are skipped
    assert np.array_equal(node_ids("py1e", table, 2, 0, 200, few, window), whole[few])


@pytest.mark.parametrize("algo", [*SPAN_ALGOS, "naive"])
def test_a_workers_share_of_a_node_takes_memory_for_its_share_only(algo):
    # One node of 8M samples: its order alone is 64 MB. A worker reading 1 position in 64
    # (125,000 of them, 1 MB) must stay far below: py1e holds a few windows of 2^16 positions
    # and a group of spans drawn together (2^16 samples), whatever the node's size.
    sizes = np.full(8000, 1000, dtype=np.int64)
    config = ShuffleConfig(shuffle=True, algo=algo, seed=1, block_size=1 << 13)
    local = np.arange(5, 8_000_000, 64, dtype=np.int64)
    tracemalloc.start()
    try:
        ids = node_order_at(sizes, 1, 0, 0, config, local)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64_000_000 // 4, peak
    assert np.array_equal(np.sort(ids), np.unique(ids))  # distinct samples
    assert len(ids) == len(local)


@pytest.mark.parametrize(
    "positions",
    [
        [*range(0, 40, 2), 3, 0, 3, 7],  # a worker's padding: a short tail wrapping to the start
        [4, 6, 8, 10, 12, 14, 16, 18, 1, 1],  # tail values the head lacks, repeated
        [5, 1, 4, 1, 3],  # no long increasing head
        [2, 2],
        [7],
    ],
)
def test_distinct_positions_and_where_each_given_one_is(positions):
    given = np.array(positions, dtype=np.int64)
    wanted, inverse = node_order_module._distinct(given)
    assert wanted.tolist() == sorted(set(positions))
    assert (given if inverse is None else wanted[inverse]).tolist() == positions


@pytest.mark.parametrize("group_samples", [1, 50, 1 << 12])
@pytest.mark.parametrize("algo", ["py1e", "py1s", "py2s"])
def test_spans_drawn_alone_or_in_groups_give_consistent_lookups(monkeypatch, algo, group_samples):
    # Spans are drawn in groups of about _GROUP_SAMPLES samples (1: every span alone).
    monkeypatch.setattr(node_order_module, "_GROUP_SAMPLES", group_samples)
    sizes = np.array([30, 7, 1, 45, 12, 30, 2, 60, 9, 30] * 4, dtype=np.int64)
    layout = run_layout(sizes, 2, 8)
    table = node_span_table(layout, 1, 8, split_shuffled=algo == "py2s")
    everything = np.arange(table.total, dtype=np.int64)
    whole = node_ids(algo, table, 8, 1, 64, everything)
    assert np.array_equal(np.sort(whole), np.sort(table.samples()))
    few = np.array([0, 99, 100, 101, table.total - 1], dtype=np.int64)
    for window in (None, 1, 4, 32):
        assert np.array_equal(node_ids(algo, table, 8, 1, 64, everything, window), whole)
        assert np.array_equal(node_ids(algo, table, 8, 1, 64, few, window), whole[few])
    if algo == "py1s":  # each span's samples stay together, in some order
        shard = np.repeat(np.arange(len(sizes)), sizes)[whole]
        assert int(np.count_nonzero(np.diff(shard))) + 1 == len(table.sizes)
