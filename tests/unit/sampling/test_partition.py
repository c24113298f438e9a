"""EpochPartition arithmetic, interleave, and the one-worker plan."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream.errors import ConfigurationError
from shardstream.sampling import (
    EpochPartition,
    EpochPlan,
    ShuffleConfig,
    Topology,
    canonical_node_bounds,
    interleave,
)


@pytest.mark.parametrize(("total", "ncn"), [(0, 1), (7, 1), (10, 3), (11, 4), (3, 5), (100, 7)])
def test_interleave_visits_each_node_position_once_in_round_robin(total, ncn):
    nodes, local = interleave(np.arange(total, dtype=np.int64), total, ncn)
    bounds = canonical_node_bounds(total, ncn)
    # Brute force: walk the nodes' positions row by row, skipping nodes that ran out.
    expected = [
        (c, j)
        for j in range(max(np.diff(bounds), default=0))
        for c in range(ncn)
        if j < bounds[c + 1] - bounds[c]
    ]
    assert list(zip(nodes.tolist(), local.tolist(), strict=True)) == expected


def test_steps_and_padding():
    part = EpochPartition(epoch_size=10, num_canonical_nodes=2, global_batch_size=4)
    assert (part.remaining, part.num_steps, part.padding) == (10, 3, 2)
    resumed = EpochPartition(
        epoch_size=10, num_canonical_nodes=2, global_batch_size=4, drop_first=8
    )
    assert (resumed.remaining, resumed.num_steps, resumed.padding) == (2, 1, 2)
    done = EpochPartition(epoch_size=10, num_canonical_nodes=2, global_batch_size=4, drop_first=10)
    assert (done.num_steps, done.padding) == (0, 0)


def test_worker_positions_stripe_nodes_then_ranks():
    part = EpochPartition(epoch_size=16, num_canonical_nodes=2, global_batch_size=8)
    # 2 nodes x 2 ranks, device batch 2: node 1, rank 0 of the node (global rank 2).
    topology = Topology(nodes=2, ranks_per_node=2, rank=2)
    assert part.worker_positions(topology).tolist() == [[1, 5], [9, 13]]
    # The same rank's second DataLoader worker takes every second device batch.
    two_workers = topology.with_worker(2, 1)
    assert part.worker_positions(two_workers).tolist() == [[9, 13]]


def test_padding_wraps_to_the_first_positions():
    part = EpochPartition(epoch_size=5, num_canonical_nodes=1, global_batch_size=4)
    assert part.worker_positions(Topology()).tolist() == [[0, 1, 2, 3], [4, 0, 1, 2]]
    tiny = EpochPartition(epoch_size=2, num_canonical_nodes=1, global_batch_size=5)
    assert tiny.worker_positions(Topology()).tolist() == [[0, 1, 0, 1, 0]]


def test_global_batch_must_split_over_the_ranks():
    part = EpochPartition(epoch_size=10, num_canonical_nodes=1, global_batch_size=6)
    with pytest.raises(ConfigurationError, match="does not split over 4 ranks"):
        part.worker_positions(Topology(nodes=2, ranks_per_node=2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epoch_size": -1}, "epoch_size must be an integer >= 0"),
        ({"num_canonical_nodes": 0}, "num_canonical_nodes must be"),
        ({"global_batch_size": 0}, "global_batch_size must be"),
        ({"drop_first": 11}, r"drop_first=11 must be in 0..10"),
    ],
)
def test_bad_partitions(kwargs, match):
    arguments = {"epoch_size": 10, "num_canonical_nodes": 1, "global_batch_size": 2, **kwargs}
    with pytest.raises(ConfigurationError, match=match):
        EpochPartition(**arguments)


def test_unshuffled_plan_reads_each_canonical_node_in_order():
    plan = EpochPlan.for_worker(np.array([3, 3]), topology=Topology(), num_canonical_nodes=2,
                                global_batch_size=2, epoch=0, shuffle=ShuffleConfig())  # fmt: skip
    # Node 0 owns samples 0..2, node 1 owns 3..5; the order interleaves them.
    assert plan.batches.tolist() == [[0, 3], [1, 4], [2, 5]]


def test_shuffled_plan_depends_on_the_epoch_and_seed():
    def ids(epoch: int, seed: int) -> list[int]:
        config = ShuffleConfig(shuffle=True, seed=seed, block_size=8)
        plan = EpochPlan.for_worker(np.full(10, 20), topology=Topology(), num_canonical_nodes=2,
                                    global_batch_size=4, epoch=epoch, shuffle=config)  # fmt: skip
        result: list[int] = plan.batches.ravel().tolist()
        return result

    assert sorted(ids(0, 1)) == list(range(200))
    assert ids(0, 1) == ids(0, 1)
    assert ids(0, 1) != ids(1, 1)
    assert ids(0, 1) != ids(0, 2)


def test_unknown_shuffle_algorithm():
    with pytest.raises(ConfigurationError, match="unknown shuffle_algo 'py3x'; use one of naive"):
        ShuffleConfig(algo="py3x")


def test_replica_groups_get_identical_batches_and_cover_the_epoch_once():
    sizes = np.full(6, 10, np.int64)
    config = ShuffleConfig(shuffle=True, block_size=16)
    plans = []
    for rank in range(8):
        data_view = Topology(nodes=2, ranks_per_node=4, rank=rank).replicated(2)
        plan = EpochPlan.for_worker(sizes, topology=data_view, num_canonical_nodes=2,
                                    global_batch_size=8, epoch=0, shuffle=config)  # fmt: skip
        plans.append(plan)
    for first in range(0, 8, 2):
        assert plans[first].batches.tolist() == plans[first + 1].batches.tolist()
    delivered = np.concatenate([plans[r].batches.ravel() for r in range(0, 8, 2)])
    counts = np.bincount(delivered, minlength=60)
    assert counts.min() == 1  # every sample delivered ...
    assert counts.sum() == 64  # ... plus 4 repeats of padding, to whole global batches
