"""The shuffle-quality simulation on a tiny epoch: its plumbing, and the trade-offs it shows."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import shuffle_quality as sq
from shardstream.sampling import ShuffleConfig, canonical_node_bounds, get_shuffle, interleave

# 200 shards x 100 samples; 4 nodes x 2 ranks x 2 workers, device batch 8 (G = 64). A canonical
# node holds 5,000 samples (50 shards); a block of 2^11 samples spans about 20 shards.
SETUP = sq.Setup(
    shard_sizes=(100,) * 200,
    num_canonical_nodes=4,
    nodes=4,
    ranks_per_node=2,
    workers_per_rank=2,
    device_batch=8,
    seed=7,
)
BLOCK = 1 << 11
SMALL, BLOCK_CACHE = 4, 24  # shards: well under a block; about one block


@pytest.fixture(scope="module")
def results() -> dict[str, sq.Result]:
    return {
        case.label.split()[0]: sq.measure(SETUP, case, (SMALL, BLOCK_CACHE))
        for case in sq.cases((BLOCK,), SETUP.seed)
    }


def test_cases_cover_every_algorithm_and_shuffle_off():
    labels = [case.label for case in sq.cases((1 << 14, 1 << 16))]
    assert labels[:4] == ["off", "naive", "py1s", "py2s"]
    assert "py1e B=2^14" in labels
    assert "py1br B=2^16" in labels
    assert len(labels) == 10


@pytest.mark.parametrize("algo", ["naive", "py1e"])
def test_epoch_order_rebuilt_from_worker_plans_is_the_interleaved_shuffle(algo):
    config = ShuffleConfig(True, algo, SETUP.seed, BLOCK)
    batches = sq.step_batches(SETUP, config)
    order = sq.epoch_order(SETUP, batches)
    size = SETUP.epoch_size
    sizes = np.asarray(SETUP.shard_sizes)
    perm = get_shuffle(algo, sizes, SETUP.num_canonical_nodes, SETUP.seed, 0, BLOCK)
    nodes, local = interleave(np.arange(size), size, SETUP.num_canonical_nodes)
    bounds = canonical_node_bounds(size, SETUP.num_canonical_nodes)
    assert order[:size].tolist() == perm[bounds[nodes] + local].tolist()
    # The last step is topped up with the epoch's first positions.
    assert order[size:].tolist() == order[: len(order) - size].tolist()


def test_node_sequence_walks_steps_then_ranks():
    batches = np.arange(3 * 8 * 2).reshape(3, 8, 2)  # 3 steps, 8 ranks, batch 2
    setup = sq.Setup(nodes=4, ranks_per_node=2, device_batch=2)
    assert sq.node_sequence(setup, batches, 1).tolist() == [4, 5, 6, 7, 20, 21, 22, 23, 36, 37,
                                                            38, 39]  # fmt: skip


def test_lru_misses():
    seq = np.array([0, 0, 1, 0, 2, 2, 0, 1])
    assert sq.lru_misses(seq, 1) == 6  # every change of shard
    assert sq.lru_misses(seq, 2) == 4  # 0 stays (recently used), 2 evicts 1 (FIFO would miss 5)
    assert sq.lru_misses(seq, 3) == 3  # the cold misses only
    assert sq.lru_misses(np.array([], dtype=np.int64), 4) == 0


def test_measures_on_known_orders():
    assert sq.shards_per_batch(np.array([[0, 0, 1], [2, 2, 2]])) == 1.5
    order = np.arange(10)
    assert sq.displacement(sq.positions_of(order), sq.positions_of(order)) == 0
    assert sq.displacement(sq.positions_of(order[::-1]), sq.positions_of(order)) == 0.5


def test_downloads_never_below_the_distinct_shards(results):
    for r in results.values():
        for capacity in (SMALL, BLOCK_CACHE):
            assert r.downloads[capacity] >= r.min_downloads
            assert r.ratio[capacity] >= 1


def test_naive_downloads_most_and_shuffle_off_least(results):
    for capacity in (SMALL, BLOCK_CACHE):
        downloads = {label: r.downloads[capacity] for label, r in results.items()}
        assert max(downloads, key=downloads.__getitem__) == "naive"
        assert downloads["off"] == min(downloads.values())
        # Reading span after span costs what reading in storage order costs.
        assert downloads["py1s"] == downloads["py2s"] == downloads["off"]
    # Every node of a naive epoch reads every shard; a span-based one only its canonical node's.
    assert results["naive"].min_downloads == len(SETUP.shard_sizes)
    assert results["py1e"].min_downloads < len(SETUP.shard_sizes) / 3


def test_every_shuffle_moves_samples_far_from_storage_order(results):
    assert results["off"].displacement == 0
    for label, r in results.items():
        if label != "off":
            assert 0.25 < r.displacement < 0.45, label  # a uniform permutation gives 1/3


def test_block_shuffles_mix_batches_that_span_shuffles_do_not(results):
    off = results["off"].shards_per_batch
    assert results["py1s"].shards_per_batch < 2 * off
    for label in ("py1b", "py1br", "py1e"):
        assert results[label].shards_per_batch > 3 * off, label
    assert results["naive"].shards_per_batch > max(
        results[label].shards_per_batch for label in ("py1b", "py1br", "py1e")
    )


def test_py1e_downloads_far_less_than_naive_and_fits_a_block_sized_cache(results):
    py1e, naive = results["py1e"], results["naive"]
    assert py1e.downloads[BLOCK_CACHE] < naive.downloads[BLOCK_CACHE] / 10
    assert py1e.ratio[BLOCK_CACHE] < 2
    # With a cache well under a block, every block shuffle re-downloads shards many times.
    for label in ("py1b", "py1br", "py1e"):
        assert results[label].ratio[SMALL] > 3, label
    # py1e spreads each span over a sliding window instead of whole blocks: fewer downloads.
    assert py1e.downloads[BLOCK_CACHE] <= results["py1br"].downloads[BLOCK_CACHE]
