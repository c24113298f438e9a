"""Every span-based shuffle's fast lookups equal the order written out from its definition.

The definitions here take the node's draws (span order, within-span shuffles, py1e's shifts,
the blocks' shuffles) as the library makes them, then build the whole order the plain way:
one stable sort of every key, a binary search for every slot's span, a span's samples cut out
one span at a time. The library's windows, packed sorts, bucketed searches and per-group ids
must give the very same ids, at every position and at any subset of them.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.sampling import canonical_node_spans
from shardstream.sampling import node_order as node_order_module
from shardstream.sampling.node_order import (
    FRACTION_BITS,
    _EpochSpans,
    _Shifted,
    _sorted_window,
    node_ids,
    random_blocks,
)
from shardstream.sampling.spans import (
    TAG_BLOCK_SHUFFLE,
    TAG_BLOCKS,
    SpanTable,
    Substreams,
    make_rng,
    node_span_table,
    run_layout,
)

SPAN_ALGOS = ["py1b", "py1br", "py1e", "py1s", "py2s"]


def span_ids(
    table: SpanTable, spans: _EpochSpans, index: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """Sample ``offsets[i]`` of epoch span ``index[i]``, cut out of its span one at a time."""
    out = np.empty(len(index), dtype=np.int64)
    for i, (r, offset) in enumerate(zip(index.tolist(), offsets.tolist(), strict=True)):
        out[i] = table.span(int(spans.order[r]))[offset]
    return out


def drawn(spans: _EpochSpans, shifts: bool):
    """Every group's draws, end to end: within-span shuffles, uniforms, each slot's span."""
    shuffles, uniforms = [], []
    groups = -(-len(spans.sizes) // spans.group)
    for group in range(groups):
        shuffle, keys = spans.draw(group, shifts)
        shuffles.append(shuffle)
        uniforms.append(keys)
    index = np.repeat(np.arange(len(spans.sizes)), spans.sizes)
    shuffle = np.concatenate(shuffles) if shuffles else np.empty(0, np.int64)
    keys = np.concatenate(uniforms) if uniforms else np.empty(0)
    return shuffle, keys, index


def definition(algo: str, table: SpanTable, seed: int, epoch: int, block: int) -> np.ndarray:
    """The node's whole order, from the definition of ``algo``."""
    spans = _EpochSpans(table, seed, epoch)
    n = spans.total
    if algo in ("py1s", "py2s"):
        shuffle, _, index = drawn(spans, shifts=False)
        return span_ids(table, spans, index, shuffle)
    if algo == "py1e":
        shifted = _Shifted(spans, block)
        shuffle, u, index = drawn(spans, shifts=True)
        scale = float(1 << FRACTION_BITS)
        low, high = shifted.low[index], shifted.high[index]
        slot = np.arange(n) - spans.starts[index]  # offset of each slot in its span
        key = u * ((high - low) * scale) + slot * scale + (spans.starts[index] + low) * scale
        order = np.argsort(key.astype(np.int64), kind="stable")
        return span_ids(table, spans, index, shuffle)[order]
    if algo == "py1br":
        widths = random_blocks(n, block, make_rng(*spans.words, TAG_BLOCKS))
    else:
        widths = np.diff(np.minimum(np.arange(0, n + block, block), n))
    ends = np.cumsum(widths)
    blocks = Substreams(*spans.words, TAG_BLOCK_SHUFFLE)
    slots = np.concatenate(
        [[0]] + [end - width + blocks[k].permutation(width) for k, (end, width)
                 in enumerate(zip(ends.tolist(), widths.tolist(), strict=True))]
    )[1:].astype(np.int64)  # fmt: skip
    index = np.searchsorted(spans.ends, slots, side="right")
    return span_ids(table, spans, index, slots - spans.starts[index])


def node_table(algo: str, sizes: np.ndarray, ncn: int, seed: int, node: int, given: bool):
    if given:  # the spans' samples handed in outright (shuffle_canonical_node)
        return SpanTable.of(canonical_node_spans(algo, sizes, ncn, seed, node))
    return node_span_table(run_layout(sizes, ncn, seed), node, seed, algo == "py2s")


@settings(max_examples=150, deadline=None)
@given(
    algo=st.sampled_from(SPAN_ALGOS),
    sizes=st.lists(st.integers(0, 400), min_size=1, max_size=30),
    ncn=st.integers(1, 4),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**64 - 1),
    block=st.integers(1, 3000),
    window=st.sampled_from([None, 1, 64, 1024]),
    group_samples=st.sampled_from([1, 50, 1 << 16]),
    given_spans=st.booleans(),
    data=st.data(),
)
def test_fast_lookups_equal_the_definition(
    algo, sizes, ncn, seed, epoch, block, window, group_samples, given_spans, data
):
    sizes_array = np.array(sizes, dtype=np.int64)
    total = int(sizes_array.sum())
    ncn = max(1, min(ncn, total))
    node = data.draw(st.integers(0, ncn - 1))
    table = node_table(algo, sizes_array, ncn, seed, node, given_spans and algo != "py2s")
    with mock.patch.object(node_order_module, "_GROUP_SAMPLES", group_samples):
        expected = definition(algo, table, seed, epoch, block)
        everything = np.arange(len(expected), dtype=np.int64)
        assert np.array_equal(node_ids(algo, table, seed, epoch, block, everything, window),
                              expected)  # fmt: skip
        if len(expected):
            some = np.array(data.draw(st.lists(st.integers(0, len(expected) - 1), max_size=40)))
            some = some.astype(np.int64)
            found = node_ids(algo, table, seed, epoch, block, some, window)
            assert np.array_equal(found, expected[some])


def test_a_node_of_more_than_a_million_samples_keeps_its_definition():
    # py1e's default window (2**22) over more than 2**20 samples: keys and indices need more
    # than 63 bits, so the packed sort drops key bits and orders the ties after.
    sizes = np.random.default_rng(3).integers(1, 8000, 300).astype(np.int64)
    table = node_table("py1e", sizes, 1, 11, 0, given=False)
    expected = definition("py1e", table, 11, 2, 4_000_000)
    everything = np.arange(len(expected), dtype=np.int64)
    assert len(expected) > 1 << 20
    assert np.array_equal(node_ids("py1e", table, 11, 2, 4_000_000, everything), expected)


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 3000),
    width_bits=st.integers(1, 62),
    claimed=st.integers(0, 62),
    distinct_keys=st.integers(1, 1 << 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_packed_window_sort_is_the_stable_argsort(count, width_bits, claimed, distinct_keys, seed):
    # ``claimed`` widens the keys' stated width past 63 bits with the indices: key bits are
    # dropped in the packed sort; ties (``distinct_keys`` few) must still come out in order.
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 1 << width_bits, min(distinct_keys, count))
    q = levels[rng.integers(0, len(levels), count)].astype(np.int64)
    expected = np.argsort(q, kind="stable")
    assert np.array_equal(_sorted_window(q.copy(), max(width_bits, claimed)), expected)
