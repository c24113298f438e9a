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


def test_one_rank_gets_every_sample_once_and_a_short_last_batch():
    # 117 samples, batch 4, one device: 29 whole batches and one of 1, nothing repeated.
    part = EpochPartition(epoch_size=117, num_canonical_nodes=1, global_batch_size=4)
    assert (part.num_steps, part.last_batch_size, part.per_rank, part.padding) == (30, 1, 117, 0)
    positions = part.worker_positions(Topology())
    assert positions.tolist() == list(range(117))
    # Any canonical-node count: the epoch's size and the ranks decide, nothing else.
    many = EpochPartition(epoch_size=117, num_canonical_nodes=8, global_batch_size=4)
    assert many.worker_positions(Topology()).tolist() == positions.tolist()


@pytest.mark.parametrize(
    ("epoch_size", "batch", "ranks", "drop_first", "expected"),
    [
        # (num_steps, per_rank, last_batch_size, padding)
        (10, 4, 1, 0, (3, 10, 2, 0)),
        (12, 4, 1, 0, (3, 12, 4, 0)),
        (117, 4, 2, 0, (15, 59, 3, 1)),
        (117, 4, 4, 0, (8, 30, 2, 3)),
        (120, 4, 4, 0, (8, 30, 2, 0)),
        (10, 2, 4, 0, (2, 3, 1, 2)),
        (3, 4, 8, 0, (1, 1, 1, 5)),  # fewer samples than ranks: each rank still gets one
        (10, 4, 1, 8, (1, 2, 2, 0)),  # resumed: what is left, from the resume point
        (10, 1, 4, 8, (1, 1, 1, 2)),
        (10, 4, 2, 10, (0, 0, 0, 0)),  # resumed at the very end
        (0, 4, 2, 0, (0, 0, 0, 0)),
    ],
)
def test_steps_repeats_and_the_short_last_batch(epoch_size, batch, ranks, drop_first, expected):
    part = EpochPartition(epoch_size, 1, batch * ranks, drop_first=drop_first, ranks=ranks)
    assert (part.num_steps, part.per_rank, part.last_batch_size, part.padding) == expected
    assert part.remaining + part.padding == part.per_rank * ranks
    assert part.padding < ranks  # repeats only to make the ranks equal


def test_worker_positions_stripe_nodes_then_ranks():
    part = EpochPartition(epoch_size=16, num_canonical_nodes=2, global_batch_size=8, ranks=4)
    # 2 nodes x 2 ranks, device batch 2: node 1, rank 0 of the node (global rank 2).
    topology = Topology(nodes=2, ranks_per_node=2, rank=2)
    assert part.worker_positions(topology).tolist() == [1, 5, 9, 13]
    # The same rank's second DataLoader worker takes every second device batch.
    two_workers = topology.with_worker(2, 1)
    assert part.worker_positions(two_workers).tolist() == [9, 13]


def test_a_short_last_step_is_split_evenly_over_the_ranks():
    # 10 samples, 2 nodes x 2 ranks, device batch 2: step 0 holds 0..7; step 1 the last 2
    # samples and 2 repeats of the first, one for each rank.
    part = EpochPartition(epoch_size=10, num_canonical_nodes=1, global_batch_size=8, ranks=4)
    per_rank = [
        part.worker_positions(Topology(nodes=2, ranks_per_node=2, rank=rank)).tolist()
        for rank in range(4)
    ]
    assert per_rank == [[0, 4, 8], [2, 6, 0], [1, 5, 9], [3, 7, 1]]
    # The worker that makes step 1 ends on the short batch; the other has step 0 only.
    workers = [
        part.worker_positions(Topology(nodes=2, ranks_per_node=2, rank=2).with_worker(2, w))
        for w in range(2)
    ]
    assert [w.tolist() for w in workers] == [[1, 5], [9]]


def test_repeats_wrap_to_the_first_positions():
    part = EpochPartition(epoch_size=5, num_canonical_nodes=1, global_batch_size=4, ranks=4)
    ranks = [part.worker_positions(Topology(ranks_per_node=4, rank=r)).tolist() for r in range(4)]
    assert ranks == [[0, 4], [1, 0], [2, 1], [3, 2]]
    tiny = EpochPartition(epoch_size=2, num_canonical_nodes=1, global_batch_size=5, ranks=5)
    assert [
        tiny.worker_positions(Topology(ranks_per_node=5, rank=r)).tolist() for r in range(5)
    ] == [[0], [1], [0], [1], [0]]


def test_global_batch_must_split_over_the_ranks():
    with pytest.raises(ConfigurationError, match="does not split over 4 ranks"):
        EpochPartition(epoch_size=10, num_canonical_nodes=1, global_batch_size=6, ranks=4)


def test_worker_positions_refuse_a_topology_of_other_ranks():
    part = EpochPartition(epoch_size=10, num_canonical_nodes=1, global_batch_size=4, ranks=2)
    with pytest.raises(ConfigurationError, match="split over 2 ranks, but the topology has 4"):
        part.worker_positions(Topology(nodes=2, ranks_per_node=2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epoch_size": -1}, "epoch_size must be an integer >= 0"),
        ({"num_canonical_nodes": 0}, "num_canonical_nodes must be"),
        ({"global_batch_size": 0}, "global_batch_size must be"),
        ({"drop_first": 11}, r"drop_first=11 must be in 0..10"),
        ({"ranks": 0}, "ranks must be an integer >= 1"),
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
    assert [batch.tolist() for batch in plan.batches] == [[0, 3], [1, 4], [2, 5]]


def test_shuffled_plan_depends_on_the_epoch_and_seed():
    def ids(epoch: int, seed: int) -> list[int]:
        config = ShuffleConfig(shuffle=True, seed=seed, block_size=8)
        plan = EpochPlan.for_worker(np.full(10, 20), topology=Topology(), num_canonical_nodes=2,
                                    global_batch_size=4, epoch=epoch, shuffle=config)  # fmt: skip
        result: list[int] = plan.ids.tolist()
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
        assert plans[first].ids.tolist() == plans[first + 1].ids.tolist()
    delivered = np.concatenate([plans[r].ids for r in range(0, 8, 2)])
    # 60 samples over 4 data-parallel ranks: each exactly once, no repeats.
    assert np.bincount(delivered, minlength=60).tolist() == [1] * 60
    assert {plans[r].padding for r in range(8)} == {0}
