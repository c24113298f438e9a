"""Shuffle algorithms: registry, spans, per-algorithm structure, errors and RNG hygiene."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream.errors import ConfigurationError
from shardstream.sampling import (
    DEFAULT_SHUFFLE_ALGORITHM,
    SHUFFLE_ALGORITHMS,
    canonical_node_bounds,
    canonical_node_spans,
    default_block_size,
    get_shuffle,
    shuffle_canonical_node,
)
from shardstream.sampling import naive as naive_module
from shardstream.sampling import node_order as node_order_module
from shardstream.sampling import shuffle as shuffle_module
from shardstream.sampling import spans as spans_module

ALGOS = ["naive", "py1b", "py1br", "py1e", "py1s", "py2s"]
SPAN_ALGOS = ALGOS[1:]
SIZES = np.array([7, 0, 12, 3, 9, 15, 1, 0, 8, 11], dtype=np.int64)


def shard_of(sizes: np.ndarray) -> np.ndarray:
    """The shard of each global sample id."""
    return np.repeat(np.arange(len(sizes)), sizes)


def runs(values: np.ndarray) -> int:
    """How many runs of equal consecutive values."""
    return int(np.count_nonzero(np.diff(values))) + 1 if len(values) else 0


# --- registry -----------------------------------------------------------------------------


def test_registry_is_sorted_and_read_only():
    assert list(SHUFFLE_ALGORITHMS) == ALGOS
    assert DEFAULT_SHUFFLE_ALGORITHM == "py1e"
    with pytest.raises(TypeError):
        SHUFFLE_ALGORITHMS["mine"] = SHUFFLE_ALGORITHMS["naive"]  # type: ignore[index]


@pytest.mark.parametrize("algo", ALGOS)
def test_registry_function_is_what_get_shuffle_calls(algo):
    direct = SHUFFLE_ALGORITHMS[algo](SIZES, 3, 5, 2, 16)
    assert np.array_equal(direct, get_shuffle(algo, SIZES, 3, 5, 2, 16))
    assert direct.dtype == np.int64


def test_default_block_size():
    assert default_block_size(1) == 4_000_000
    assert default_block_size(8) == 500_000
    assert default_block_size(64) == 1 << 18


@pytest.mark.parametrize("algo", ALGOS)
def test_block_size_none_means_the_default(algo):
    sizes = np.full(40, 50_000, dtype=np.int64)  # 2M samples: blocks of 1M at NCN=2
    assert np.array_equal(
        get_shuffle(algo, sizes, 2, 1, 0), get_shuffle(algo, sizes, 2, 1, 0, default_block_size(2))
    )


# --- canonical nodes and spans --------------------------------------------------------------


def test_canonical_node_bounds():
    assert canonical_node_bounds(10, 3).tolist() == [0, 3, 6, 10]
    assert canonical_node_bounds(2, 4).tolist() == [0, 0, 1, 1, 2]
    assert canonical_node_bounds(0, 2).tolist() == [0, 0, 0]
    assert canonical_node_bounds(10, 3).dtype == np.int64


@pytest.mark.parametrize("algo", SPAN_ALGOS)
@pytest.mark.parametrize("ncn", [1, 2, 3, 7])
def test_spans_partition_the_dataset_at_node_bounds(algo, ncn):
    bounds = canonical_node_bounds(int(SIZES.sum()), ncn)
    shard = shard_of(SIZES)
    seen = []
    for node in range(ncn):
        spans = canonical_node_spans(algo, SIZES, ncn, 4, node)
        assert spans.node == node
        assert len(spans.samples) == bounds[node + 1] - bounds[node] == spans.sizes.sum()
        assert (spans.sizes > 0).all()
        # Each span holds samples of the one shard it names.
        span_of = np.repeat(np.arange(len(spans.sizes)), spans.sizes)
        assert np.array_equal(shard[spans.samples], spans.shards[span_of])
        # Only the first and last span of a node may be part of a shard.
        whole = spans.sizes == SIZES[spans.shards]
        assert whole[1:-1].all()
        seen.append(spans.samples)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(SIZES.sum()))


def test_a_shard_straddling_a_boundary_is_split_in_two():
    # One shard, two nodes: the shard is cut at position 5.
    first = canonical_node_spans("py1s", np.array([10]), 2, 0, 0)
    second = canonical_node_spans("py1s", np.array([10]), 2, 0, 1)
    assert first.samples.tolist() == [0, 1, 2, 3, 4]
    assert second.samples.tolist() == [5, 6, 7, 8, 9]
    assert first.shards.tolist() == second.shards.tolist() == [0]


def test_py2s_spans_shuffle_each_shard_once_per_run():
    py1s = canonical_node_spans("py1s", np.array([100]), 2, 0, 0)
    py2s = canonical_node_spans("py2s", np.array([100]), 2, 0, 0)
    assert py1s.samples.tolist() == list(range(50))
    assert sorted(py2s.samples.tolist()) != list(range(50))  # a random half of the shard
    other = canonical_node_spans("py2s", np.array([100]), 2, 0, 1)
    assert np.array_equal(np.sort(np.concatenate([py2s.samples, other.samples])), np.arange(100))


def test_shard_order_is_per_run():
    a = canonical_node_spans("py1s", SIZES, 3, 11, 1)
    b = canonical_node_spans("py1s", SIZES, 3, 11, 1)
    assert np.array_equal(a.samples, b.samples)
    c = canonical_node_spans("py1s", np.ones(50, dtype=np.int64), 2, 12, 0)
    d = canonical_node_spans("py1s", np.ones(50, dtype=np.int64), 2, 13, 0)
    assert not np.array_equal(c.samples, d.samples)


# --- per-algorithm structure ----------------------------------------------------------------


@pytest.mark.parametrize("algo", ALGOS)
def test_empty_and_tiny_datasets(algo):
    assert get_shuffle(algo, np.array([], dtype=np.int64), 3, 0, 0).tolist() == []
    assert get_shuffle(algo, np.zeros(4, dtype=np.int64), 3, 0, 0).tolist() == []
    assert sorted(get_shuffle(algo, np.array([0, 2, 0]), 8, 0, 0).tolist()) == [0, 1]


def test_naive_ignores_nodes_and_block_size():
    assert np.array_equal(
        get_shuffle("naive", SIZES, 1, 3, 0, 1), get_shuffle("naive", SIZES, 8, 3, 0)
    )


@pytest.mark.parametrize("algo", ["py1s", "py2s", "py1e"])
def test_one_node_keeps_each_shard_contiguous_when_blocks_are_tiny(algo):
    # py1e with block size 1 draws no shift (w = 0 < span size), so it is py1s.
    perm = get_shuffle(algo, SIZES, 1, 9, 2, 1)
    assert runs(shard_of(SIZES)[perm]) == np.count_nonzero(SIZES)


@pytest.mark.parametrize("algo", ["py1b", "py1br"])
def test_blocks_of_one_keep_spans_in_order(algo):
    perm = get_shuffle(algo, SIZES, 1, 9, 2, 1)
    shard = shard_of(SIZES)[perm]
    assert runs(shard) == np.count_nonzero(SIZES)
    # No block shuffle: every shard reads in order.
    for s in np.flatnonzero(SIZES):
        assert (np.diff(perm[shard == s]) == 1).all()


def test_py1e_with_block_size_1_is_py1s():
    for ncn in (1, 3):
        assert np.array_equal(
            get_shuffle("py1e", SIZES, ncn, 2, 7, 1), get_shuffle("py1s", SIZES, ncn, 2, 7, 1)
        )


def test_py1b_shuffles_within_fixed_blocks():
    sizes = np.full(20, 10, dtype=np.int64)
    perm = get_shuffle("py1b", sizes, 1, 3, 0, 25)
    unblocked = get_shuffle("py1b", sizes, 1, 3, 0, 1)  # same span order, no block shuffle
    for start in range(0, 200, 25):
        assert set(perm[start : start + 25]) == set(unblocked[start : start + 25])
    assert not np.array_equal(perm, unblocked)


def test_py1br_blocks_have_random_sizes():
    sizes = np.full(100, 10, dtype=np.int64)
    perm = get_shuffle("py1br", sizes, 1, 3, 0, 40)
    unblocked = get_shuffle("py1br", sizes, 1, 3, 0, 1)
    # Block boundaries are where the prefix sets agree.
    cuts = [t for t in range(1, 1000) if set(perm[:t]) == set(unblocked[:t])]
    blocks = np.diff([0, *cuts])
    assert blocks[0] <= 50  # the first block is staggered
    assert all(b < 50 for b in blocks[1:-1])  # [0.75B, 1.25B), possibly cut finer by chance


def test_py1e_spreads_each_span_over_about_a_block():
    sizes = np.full(2000, 50, dtype=np.int64)
    block = 2000
    perm = get_shuffle("py1e", sizes, 1, 0, 0, block)
    position = np.empty_like(perm)
    position[perm] = np.arange(len(perm))
    shard = shard_of(sizes)
    low = np.full(len(sizes), len(perm))
    high = np.zeros(len(sizes), dtype=np.int64)
    np.minimum.at(low, shard, position)
    np.maximum.at(high, shard, position)
    spread = high - low
    assert (spread <= 50 + 5 * block // 2).all()  # the bound that always holds
    assert 0.5 * block < np.median(spread) < 1.25 * block + 50  # what is typical


# --- errors -------------------------------------------------------------------------------


def test_unknown_algorithm_names_the_valid_ones():
    with pytest.raises(ConfigurationError, match="unknown shuffle algorithm 'py3x'") as info:
        get_shuffle("py3x", SIZES, 1, 0, 0)
    for name in ALGOS:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shard_sizes": np.array([3, -1])}, "non-negative, got -1 for shard 1"),
        ({"shard_sizes": np.ones((2, 2), dtype=np.int64)}, "1-D array of integers"),
        ({"shard_sizes": np.array([1.5])}, "1-D array of integers"),
        ({"num_canonical_nodes": 0}, "num_canonical_nodes must be an integer >= 1, got 0"),
        ({"num_canonical_nodes": True}, "num_canonical_nodes must be an integer"),
        ({"seed": -1}, r"seed must be an integer in 0\.\.18446744073709551615, got -1"),
        ({"seed": 1.0}, "seed must be an integer"),
        ({"epoch": -2}, "epoch must be an integer in"),
        ({"block_size": 0}, "block_size must be an integer >= 1, got 0"),
    ],
)
@pytest.mark.parametrize("algo", ALGOS)
def test_bad_arguments(algo, kwargs, match):
    args: dict[str, Any] = {"shard_sizes": SIZES, "num_canonical_nodes": 2, "seed": 0, "epoch": 0}
    args |= kwargs
    with pytest.raises(ConfigurationError, match=match):
        get_shuffle(algo, **args)


def test_largest_seed_and_epoch_are_fine():
    perm = get_shuffle("py1e", SIZES, 2, 2**64 - 1, 2**64 - 1, 4)
    assert np.array_equal(np.sort(perm), np.arange(SIZES.sum()))


def test_span_functions_reject_naive_and_bad_nodes():
    with pytest.raises(ConfigurationError, match="'naive' has no canonical-node spans"):
        canonical_node_spans("naive", SIZES, 2, 0, 0)
    with pytest.raises(ConfigurationError, match=r"node must be an integer in 0\.\.1, got 2"):
        canonical_node_spans("py1s", SIZES, 2, 0, 2)
    spans = canonical_node_spans("py1s", SIZES, 2, 0, 0)
    with pytest.raises(ConfigurationError, match="'naive' does not shuffle per canonical node"):
        shuffle_canonical_node("naive", spans, 0, 0, 4)
    with pytest.raises(ConfigurationError, match="block_size must be an integer >= 1"):
        shuffle_canonical_node("py1e", spans, 0, 0, 0)
    with pytest.raises(ConfigurationError, match="total must be an integer >= 0"):
        canonical_node_bounds(-1, 2)


# --- RNG hygiene --------------------------------------------------------------------------


@pytest.mark.parametrize("module", [shuffle_module, spans_module, node_order_module, naive_module])
def test_no_global_rng(module):
    source = Path(module.__file__ or "").read_text()
    calls = set(re.findall(r"np\.random\.(\w+)", source))
    # PCG64: the seeded bit generator behind Substreams, never the global state.
    assert calls <= {"default_rng", "SeedSequence", "Generator", "PCG64"}
    assert "import random" not in source
    assert not re.search(r"seed\s*\+\s*epoch", source)
