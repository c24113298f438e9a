"""Stream weights, epoch sizes and the epoch's units."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.errors import ConfigurationError
from shardstream.sampling import (
    EpochPlan,
    EpochUnits,
    ShuffleConfig,
    StreamWeight,
    Topology,
    parse_epoch_size,
    resample,
    stream_choices,
)


@pytest.mark.parametrize(
    ("text", "count"), [(None, None), (7, 7), ("100k", 100_000), ("1.5m", 1_500_000), ("2B", 2e9)]
)
def test_epoch_size_abbreviations(text, count):
    assert parse_epoch_size(text) == count


@pytest.mark.parametrize("text", ["-1", "10x", "", "k", 1.5, True])
def test_bad_epoch_sizes(text):
    with pytest.raises(ConfigurationError, match="epoch_size"):
        parse_epoch_size(text)


def test_proportions_split_the_epoch_exactly():
    weights = [StreamWeight(proportion=p) for p in (1, 1, 1)]
    choices = stream_choices([10, 10, 10], weights, epoch_size=100, seed=3)
    assert choices.sum() == 100
    assert sorted(choices.tolist()) == [33, 33, 34]
    assert (
        stream_choices([10, 10, 10], weights, epoch_size=100, seed=3).tolist() == choices.tolist()
    )


def test_absolute_weights():
    weights = [StreamWeight(repeat=2.5), StreamWeight(choose=3), StreamWeight()]
    assert stream_choices([4, 10, 6], weights, epoch_size=None, seed=0).tolist() == [10, 3, 6]


def test_no_weights_with_an_epoch_size_go_by_stream_size():
    assert stream_choices([30, 10], [StreamWeight()] * 2, epoch_size=8, seed=0).tolist() == [6, 2]


@pytest.mark.parametrize(
    ("weights", "epoch_size", "match"),
    [
        ([StreamWeight(proportion=1), StreamWeight(choose=1)], None, "mix proportion"),
        ([StreamWeight(choose=1), StreamWeight()], 10, "cannot be combined"),
        ([StreamWeight(proportion=0), StreamWeight(proportion=0)], None, "add up to zero"),
    ],
)
def test_inconsistent_weights(weights, epoch_size, match):
    with pytest.raises(ConfigurationError, match=match):
        stream_choices([5, 5], weights, epoch_size=epoch_size, seed=0)


def test_a_weight_takes_one_form():
    with pytest.raises(ConfigurationError, match="at most one of proportion, repeat and choose"):
        StreamWeight(proportion=1, repeat=1)
    with pytest.raises(ConfigurationError, match="repeat must be a number >= 0"):
        StreamWeight(repeat=-1)


streams = st.lists(
    st.lists(st.integers(0, 9), min_size=1, max_size=5).map(lambda s: np.array(s, np.int64)),
    min_size=1,
    max_size=3,
).filter(lambda streams: all(s.sum() > 0 for s in streams))


@settings(max_examples=100, deadline=None)
@given(streams=streams, data=st.data())
def test_resample_takes_whole_streams_then_a_fraction(streams, data):
    choices = np.array([data.draw(st.integers(0, 3 * int(s.sum()))) for s in streams], np.int64)
    granularity = data.draw(st.integers(1, 4))
    method = data.draw(st.sampled_from(["balanced", "fixed"]))
    units = resample(streams, choices, seed=5, epoch=data.draw(st.integers(0, 9)),
                     sampling_method=method, sampling_granularity=granularity)  # fmt: skip
    ids = units.sample_ids(np.arange(units.epoch_size, dtype=np.int64))
    assert units.epoch_size == int(choices.sum())
    counts = Counter(ids.tolist())
    first = 0
    for sizes, choice in zip(streams, choices.tolist(), strict=True):
        total = int(sizes.sum())
        whole, rest = divmod(choice, total)
        stream_ids = range(first, first + total)
        got = [counts[i] for i in stream_ids]
        assert all(whole <= n <= whole + 1 for n in got)
        assert sum(got) == choice
        assert sum(n == whole + 1 for n in got) == rest
        first += total


@settings(max_examples=50, deadline=None)
@given(streams=streams, data=st.data())
def test_fixed_draws_the_same_fraction_every_epoch(streams, data):
    choices = np.array([data.draw(st.integers(0, 2 * int(s.sum()))) for s in streams], np.int64)

    def ids(method: str, epoch: int) -> list[int]:
        units = resample(streams, choices, seed=1, epoch=epoch, sampling_method=method)
        return sorted(units.sample_ids(np.arange(units.epoch_size, dtype=np.int64)).tolist())

    assert ids("fixed", 0) == ids("fixed", 7)


def test_balanced_draws_again_each_epoch():
    streams = [np.full(50, 20, np.int64)]
    choices = np.array([500], np.int64)  # half the stream

    def ids(epoch: int) -> list[int]:
        units = resample(streams, choices, seed=1, epoch=epoch, sampling_method="balanced")
        return sorted(units.sample_ids(np.arange(units.epoch_size, dtype=np.int64)).tolist())

    assert ids(0) != ids(1)
    assert len(set(ids(0))) == 500


def test_granularity_takes_runs_of_a_shard():
    units = resample([np.full(10, 100, np.int64)], np.array([250]), seed=0, epoch=0,
                     sampling_granularity=25)  # fmt: skip
    assert units.epoch_size == 250
    assert all(size % 25 == 0 for size in units.sizes.tolist())


def test_bad_sampling_options():
    with pytest.raises(ConfigurationError, match="sampling_method='weird'"):
        resample([np.array([3])], np.array([3]), seed=0, epoch=0, sampling_method="weird")
    with pytest.raises(ConfigurationError, match="sampling_granularity"):
        resample([np.array([3])], np.array([3]), seed=0, epoch=0, sampling_granularity=0)
    with pytest.raises(ConfigurationError, match="stream 0 is empty"):
        resample([np.array([0])], np.array([3]), seed=0, epoch=0)


def test_whole_units_map_positions_to_themselves():
    units = EpochUnits.whole(np.array([3, 0, 2], np.int64))
    assert units.positions_are_ids
    assert units.sample_ids(np.arange(5, dtype=np.int64)).tolist() == [0, 1, 2, 3, 4]
    # A stream taken twice, or a subset of a shard: positions are no longer ids.
    twice = resample([np.array([3, 2])], np.array([10]), seed=0, epoch=0)
    assert not twice.positions_are_ids
    ids = twice.sample_ids(np.arange(10, dtype=np.int64))
    assert sorted(ids.tolist()) == sorted([*range(5)] * 2)
    part = resample([np.array([3, 2])], np.array([4]), seed=0, epoch=0)
    assert not part.positions_are_ids


@settings(max_examples=50, deadline=None)
@given(streams=streams, data=st.data())
def test_mixed_epochs_are_delivered_exactly_and_topology_free(streams, data):
    weights = [StreamWeight(proportion=data.draw(st.floats(0.1, 3))) for _ in streams]
    epoch_size = data.draw(st.integers(1, 60))
    choices = stream_choices([int(s.sum()) for s in streams], weights,
                             epoch_size=epoch_size, seed=2)  # fmt: skip
    units = resample(streams, choices, seed=2, epoch=1, sampling_granularity=2)
    config = ShuffleConfig(shuffle=True, algo=data.draw(st.sampled_from(["py1e", "py1s", "naive"])))
    expected = Counter(units.sample_ids(np.arange(epoch_size, dtype=np.int64)).tolist())
    steps: dict[tuple[int, int], list[Counter[int]]] = {}
    for nodes, per_node in ((1, 1), (2, 1), (2, 2)):
        delivered: dict[int, list[int]] = {}
        for rank in range(nodes * per_node):
            plan = EpochPlan.for_worker(units, topology=Topology(nodes=nodes,
                                        ranks_per_node=per_node, rank=rank), num_canonical_nodes=2,
                                        global_batch_size=4, epoch=1, shuffle=config)  # fmt: skip
            for step, batch in enumerate(plan.batches):
                delivered.setdefault(step, []).extend(batch.tolist())
        flat = Counter(i for batch in delivered.values() for i in batch)
        padding = -epoch_size % (nodes * per_node)
        assert sum(flat.values()) == epoch_size + padding
        if (nodes, per_node) == (1, 1):
            order = [i for k in sorted(delivered) for i in delivered[k]]  # one rank: no repeats
        # Every drawn sample, then the repeats: the epoch's first samples.
        first = [order[i % epoch_size] for i in range(padding)]
        assert flat == expected + Counter(first)
        steps[(nodes, per_node)] = [Counter(delivered[k]) for k in sorted(delivered)]
        steps[(nodes, per_node)][-1] -= Counter(first)  # the same steps, repeats aside
    assert steps[(1, 1)] == steps[(2, 1)] == steps[(2, 2)]
