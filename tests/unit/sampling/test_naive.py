"""naive's keyed permutation: a permutation of the epoch, evaluated at any positions alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.sampling import (
    EpochPartition,
    EpochPlan,
    ShuffleConfig,
    Topology,
    canonical_node_bounds,
    get_shuffle,
    interleave,
)
from shardstream.sampling.naive import naive_ids


@pytest.mark.parametrize("total", [0, 1, 2, 3, 4, 5, 7, 8, 9, 1000, 1 << 12, (1 << 12) + 1])
def test_every_epoch_size_gives_a_permutation(total):
    ids = naive_ids(5, 2, total, np.arange(total, dtype=np.int64))
    assert ids.dtype == np.int64
    assert np.array_equal(np.sort(ids), np.arange(total))


@settings(max_examples=100, deadline=None)
@given(
    total=st.integers(1, 5000),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**64 - 1),
    data=st.data(),
)
def test_any_positions_alone_match_the_whole_permutation(total, seed, epoch, data):
    whole = naive_ids(seed, epoch, total, np.arange(total, dtype=np.int64))
    picks = data.draw(st.lists(st.integers(0, total - 1), max_size=20))
    local = np.array(picks, dtype=np.int64).reshape(-1, 1)
    assert np.array_equal(naive_ids(seed, epoch, total, local), whole[local])


def test_seed_and_epoch_each_change_it_and_it_mixes_globally():
    total = 100_000
    everything = np.arange(total, dtype=np.int64)
    perm = naive_ids(1, 0, total, everything)
    assert not np.array_equal(perm, naive_ids(1, 1, total, everything))
    assert not np.array_equal(perm, naive_ids(2, 0, total, everything))
    # A uniform permutation moves a sample by E/3 on average; so must this one.
    assert abs(np.abs(perm - everything).mean() / total - 1 / 3) < 0.01
    # Consecutive positions land far apart: no visible stride or block structure.
    gaps = np.abs(np.diff(perm))
    assert abs(gaps.mean() / total - 1 / 3) < 0.01


def test_a_worker_evaluates_only_its_own_positions():
    # 8 x 8 x 8 workers over 10M samples: each reads 1/512 of the epoch; its plan is what
    # get_shuffle's whole permutation holds at its positions.
    sizes = np.full(100, 100_000, dtype=np.int64)
    config = ShuffleConfig(shuffle=True, algo="naive", seed=4, block_size=None)
    topology = Topology(nodes=8, ranks_per_node=8, workers_per_rank=8, rank=9, worker=3)
    plan = EpochPlan.for_worker(sizes, topology=topology, num_canonical_nodes=8,
                                global_batch_size=2048, epoch=1, shuffle=config)  # fmt: skip
    perm = get_shuffle("naive", sizes, 8, 4, 1)
    partition = EpochPartition(epoch_size=10_000_000, num_canonical_nodes=8,
                               global_batch_size=2048, ranks=64)  # fmt: skip
    nodes, local = interleave(partition.worker_positions(topology), 10_000_000, 8)
    assert plan.ids.shape == (610 * 32,)  # steps 3, 11, ... of 4,883
    assert np.array_equal(plan.ids, perm[canonical_node_bounds(10_000_000, 8)[nodes] + local])
