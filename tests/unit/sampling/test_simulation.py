"""The epoch simulation: its plumbing on tiny jobs and known orders."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream.sampling import ShuffleConfig, canonical_node_bounds, get_shuffle, interleave
from shardstream.sampling.simulation import (
    JobShape,
    displacement,
    epoch_order,
    lru_bytes,
    lru_misses,
    node_cost,
    node_sequence,
    positions_of,
    shard_of,
    shards_per_batch,
    smallest_cache,
    step_batches,
)

SHAPE = JobShape(
    shard_sizes=(100,) * 200,
    num_canonical_nodes=4,
    nodes=4,
    ranks_per_node=2,
    workers_per_rank=2,
    device_batch=8,
    seed=7,
)
BLOCK = 1 << 11


@pytest.mark.parametrize("algo", ["naive", "py1e"])
def test_epoch_order_rebuilt_from_worker_plans_is_the_interleaved_shuffle(algo):
    config = ShuffleConfig(True, algo, SHAPE.seed, BLOCK)
    batches = step_batches(SHAPE, config)
    order = epoch_order(SHAPE, batches)
    size = SHAPE.epoch_size
    sizes = np.asarray(SHAPE.shard_sizes)
    perm = get_shuffle(algo, sizes, SHAPE.num_canonical_nodes, SHAPE.seed, 0, BLOCK)
    nodes, local = interleave(np.arange(size), size, SHAPE.num_canonical_nodes)
    bounds = canonical_node_bounds(size, SHAPE.num_canonical_nodes)
    assert order[:size].tolist() == perm[bounds[nodes] + local].tolist()
    # 20,000 samples split evenly over the 8 ranks: the last step is short, nothing repeated.
    assert (order[size:] == -1).all()
    assert len(order) - size == SHAPE.global_batch // 2


def test_a_short_last_step_with_repeats():
    # 10 samples, 2 nodes x 2 ranks x 2 workers, device batch 2: step 1 holds the last 2
    # samples and 2 repeats of the first, one place per rank; the other places stay empty.
    shape = JobShape(shard_sizes=(5, 5), num_canonical_nodes=2, nodes=2, ranks_per_node=2,
                     workers_per_rank=2, device_batch=2)  # fmt: skip
    batches = step_batches(shape, ShuffleConfig())
    assert batches.shape == (2, 4, 2)
    # Node 0's ranks take positions 8 and 10 (the first repeated), node 1's 9 and 11.
    assert batches[1].tolist() == [[4, -1], [0, -1], [9, -1], [5, -1]]
    order = epoch_order(shape, batches)
    assert order.tolist() == [0, 5, 1, 6, 2, 7, 3, 8, 4, 9, 0, 5, -1, -1, -1, -1]
    shards = shard_of(shape.shard_sizes, batches)
    assert shards[1].tolist() == [[0, -1], [0, -1], [1, -1], [1, -1]]
    assert node_sequence(shape, shards, 1).tolist() == [1, 1, 1, 1, 1, 1]
    assert shards_per_batch(shards.reshape(2, -1)) == 2.0


def test_node_sequence_walks_steps_then_ranks():
    batches = np.arange(3 * 8 * 2).reshape(3, 8, 2)  # 3 steps, 8 ranks, batch 2
    setup = JobShape(shard_sizes=(), nodes=4, ranks_per_node=2, device_batch=2)
    assert node_sequence(setup, batches, 1).tolist() == [4, 5, 6, 7, 20, 21, 22, 23, 36, 37,
                                                            38, 39]  # fmt: skip


def test_lru_misses():
    seq = np.array([0, 0, 1, 0, 2, 2, 0, 1])
    assert lru_misses(seq, 1) == 6  # every change of shard
    assert lru_misses(seq, 2) == 4  # 0 stays (recently used), 2 evicts 1 (FIFO would miss 5)
    assert lru_misses(seq, 3) == 3  # the cold misses only
    assert lru_misses(np.array([], dtype=np.int64), 4) == 0


def test_measures_on_known_orders():
    assert shards_per_batch(np.array([[0, 0, 1], [2, 2, 2]])) == 1.5
    order = np.arange(10)
    assert displacement(positions_of(order), positions_of(order)) == 0
    assert displacement(positions_of(order[::-1]), positions_of(order)) == 0.5


def test_lru_bytes_counts_bytes_and_keeps_the_shard_in_use():
    sizes = np.array([10, 20, 30])
    seq = np.array([0, 1, 0, 2, 0, 1])
    assert lru_bytes(seq, sizes, 60) == (60, 3)  # everything fits: each shard once
    # 30 bytes hold {0, 1} (30) but 2 (30) pushes both out; then 0 and 1 come back.
    assert lru_bytes(seq, sizes, 30) == (10 + 20 + 30 + 10 + 20, 5)
    assert lru_bytes(seq, sizes, 5) == (10 + 20 + 10 + 30 + 10 + 20, 6)  # larger than the cache


def test_smallest_cache_is_the_least_capacity_without_a_second_download():
    sizes = np.array([10, 20, 30, 40])
    seq = np.array([0, 1, 2, 0, 3, 1])
    need = smallest_cache(seq, sizes)
    assert lru_bytes(seq, sizes, need)[1] == 4
    assert lru_bytes(seq, sizes, need - 1)[1] > 4
    assert smallest_cache(np.array([2, 2, 2]), sizes) == 30


def test_node_cost_of_a_small_job():
    config = ShuffleConfig(True, "py1e", SHAPE.seed, BLOCK)
    shards = shard_of(SHAPE.shard_sizes, step_batches(SHAPE, config))
    shard_bytes = np.full(len(SHAPE.shard_sizes), 1000, dtype=np.int64)
    costs = [node_cost(SHAPE, shards, shard_bytes, node, 10**9) for node in range(SHAPE.nodes)]
    for cost in costs:
        assert cost.downloads == cost.distinct_shards  # an unbounded cache downloads each once
        assert cost.downloaded_bytes == cost.min_bytes == 1000 * cost.distinct_shards
        assert 1000 <= cost.cache_needed <= cost.min_bytes
        assert 0 < cost.first_step_bytes <= cost.min_bytes
    # Together the nodes read every shard at least once.
    assert sum(c.distinct_shards for c in costs) >= len(SHAPE.shard_sizes)
    tight = node_cost(SHAPE, shards, shard_bytes, 0, 2000)
    assert tight.downloads >= costs[0].downloads
