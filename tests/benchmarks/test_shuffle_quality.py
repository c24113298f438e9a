"""The shuffle-quality simulation on a tiny epoch: its plumbing, and the trade-offs it shows."""

from __future__ import annotations

import pytest

from benchmarks import shuffle_quality as sq

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
