"""Stratified and per-stream batching: pure batches, topology-free steps, nothing lost unseen."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.errors import ConfigurationError
from shardstream.sampling import (
    EpochPlan,
    ShuffleConfig,
    StreamWeight,
    Topology,
    resample,
    stream_choices,
)
from shardstream.sampling.batching import stream_portions

SHAPES = [(1, 1, 1), (2, 1, 2), (2, 2, 1), (1, 4, 3)]


def steps_of(
    units: Any, shape: tuple[int, int, int], **kwargs: Any
) -> tuple[dict[int, list[int]], EpochPlan]:
    nodes, per_node, workers = shape
    steps: dict[int, list[int]] = {}
    plan = None
    for rank, worker in itertools.product(range(nodes * per_node), range(workers)):
        topology = Topology(nodes=nodes, ranks_per_node=per_node, workers_per_rank=workers,
                            rank=rank, worker=worker)  # fmt: skip
        plan = EpochPlan.for_worker(units, topology=topology, **kwargs)
        for row, batch in enumerate(plan.batches):
            steps.setdefault(worker + row * workers, []).extend(batch.tolist())
    assert plan is not None
    return steps, plan


@st.composite
def epochs(draw: st.DrawFn) -> tuple[Any, list[int]]:
    count = draw(st.integers(1, 3))
    streams = [np.array(draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)), np.int64)
               for _ in range(count)]  # fmt: skip
    sizes = [int(s.sum()) for s in streams]
    weights = [StreamWeight(proportion=draw(st.floats(0.2, 2))) for _ in streams]
    choices = stream_choices(sizes, weights, epoch_size=draw(st.integers(8, 80)), seed=4)
    units = resample(streams, choices, seed=4, epoch=2)
    firsts = np.cumsum([0, *sizes]).tolist()
    return units, firsts


def stream_sizes(units: Any) -> list[int]:
    """Each stream's samples in the epoch (streams up to the last one drawn)."""
    count = int(units.stream_of_unit.max()) + 1 if len(units.sizes) else 0
    return [units.of_stream(stream).epoch_size for stream in range(count)]


def refuses_a_small_stream(units: Any, unit: int, **kwargs: Any) -> bool:
    """Whether a stream is smaller than one ``unit``: then the plan is refused, naming it."""
    small = [i for i, size in enumerate(stream_sizes(units)) if size < unit]
    if not small:
        return False
    with pytest.raises(ConfigurationError, match=f"stream {small[0]} gives") as info:
        EpochPlan.for_worker(units, topology=Topology(), **kwargs)
    assert isinstance(info.value, ValueError)  # the reference raises ValueError
    return True


def stream_of(sample: int, firsts: list[int]) -> int:
    return int(np.searchsorted(firsts, sample, side="right")) - 1


@settings(max_examples=40, deadline=None)
@given(epoch=epochs(), shuffle=st.booleans(), gbs=st.sampled_from([4, 8, 12]))
def test_stratified_batches_hold_each_stream_in_proportion(epoch, shuffle, gbs):
    units, firsts = epoch
    kwargs = {"num_canonical_nodes": 2, "global_batch_size": gbs, "epoch": 2,
              "shuffle": ShuffleConfig(shuffle=shuffle, block_size=4),
              "batching_method": "stratified"}  # fmt: skip
    stream_sizes = np.bincount(units.stream_of_unit, weights=units.sizes).astype(np.int64)
    portions = stream_portions(stream_sizes, gbs).tolist()
    if any(p == 0 or size < p for p, size in zip(portions, stream_sizes.tolist(), strict=True)):
        # A stream no global batch would hold is refused, never silently left unread.
        with pytest.raises(ConfigurationError, match=r"stratified batching: stream \d"):
            steps_of(units, (1, 1, 1), **kwargs)
        return
    expected, plan = steps_of(units, (1, 1, 1), **kwargs)
    delivered = Counter(i for batch in expected.values() for i in batch)
    drawn = Counter(units.sample_ids(np.arange(units.epoch_size, dtype=np.int64)).tolist())
    assert not (delivered - drawn)  # nothing beyond the epoch's draw
    assert sum(delivered.values()) + plan.dropped == units.epoch_size
    for batch in expected.values():
        per_stream = Counter(stream_of(i, firsts) for i in batch)
        assert [per_stream[s] for s in range(len(portions))] == portions
    for shape in SHAPES[1:]:
        if gbs % (shape[0] * shape[1]) == 0:
            got, _ = steps_of(units, shape, **kwargs)
            assert {k: sorted(v) for k, v in got.items()} == {
                k: sorted(v) for k, v in expected.items()
            }


@settings(max_examples=40, deadline=None)
@given(epoch=epochs(), shuffle=st.booleans(), gbs=st.sampled_from([2, 4, 8]), data=st.data())
def test_per_stream_batches_come_from_one_stream(epoch, shuffle, gbs, data):
    units, firsts = epoch
    kwargs = {"num_canonical_nodes": 2, "global_batch_size": gbs, "epoch": 2,
              "shuffle": ShuffleConfig(shuffle=shuffle, block_size=4),
              "batching_method": "per_stream"}  # fmt: skip
    if refuses_a_small_stream(units, gbs, **kwargs):
        return
    expected, plan = steps_of(units, (1, 1, 1), **kwargs)
    drawn = Counter(units.sample_ids(np.arange(units.epoch_size, dtype=np.int64)).tolist())
    delivered = Counter(i for batch in expected.values() for i in batch)
    assert not (delivered - drawn)
    assert sum(delivered.values()) + plan.dropped == units.epoch_size
    for batch in expected.values():
        assert len({stream_of(i, firsts) for i in batch}) == 1
    for shape in SHAPES[1:]:
        if gbs % (shape[0] * shape[1]) == 0:
            got, _ = steps_of(units, shape, **kwargs)
            assert {k: sorted(v) for k, v in got.items()} == {
                k: sorted(v) for k, v in expected.items()
            }
    # Resuming at a global batch gives the remaining global batches.
    step = data.draw(st.integers(0, len(expected)))
    resumed, _ = steps_of(units, (1, 1, 1), drop_first=min(step * gbs, units.epoch_size), **kwargs)
    assert resumed == {k - step: v for k, v in expected.items() if k >= step}


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4), gbs=st.integers(1, 16))
def test_stratified_refuses_exactly_the_streams_no_batch_holds(sizes, gbs):
    # One shard per stream, taken whole: stream i gives sizes[i] samples to the epoch.
    units = resample([np.array([n], np.int64) for n in sizes], np.array(sizes, np.int64),
                     seed=1, epoch=0)  # fmt: skip
    names = [f"s3://bucket/stream-{i}" for i in range(len(sizes))]
    portions = stream_portions(np.array(sizes, np.int64), gbs).tolist()
    starved = [i for i, (n, p) in enumerate(zip(sizes, portions, strict=True)) if p == 0 or n < p]
    run = functools.partial(
        EpochPlan.for_worker, units, topology=Topology(), num_canonical_nodes=1,
        global_batch_size=gbs, epoch=0, shuffle=ShuffleConfig(), batching_method="stratified",
        stream_names=names,
    )  # fmt: skip
    if not starved:
        plan = run()
        assert plan.num_steps >= 1  # every stream is read
        assert plan.num_steps * gbs + plan.dropped == sum(sizes)
        return
    with pytest.raises(ConfigurationError) as info:
        run()
    first = starved[0]
    message = str(info.value)
    assert f"stream {first} ({names[first]})" in message  # names the stream ...
    assert f"gives {sizes[first]} " in message  # ... its samples in the epoch ...
    assert f"global batch of {gbs}" in message  # ... and the batch it does not fit
    assert isinstance(info.value, ValueError)


def test_stratified_refuses_a_stream_with_no_samples_this_epoch():
    # The last stream draws nothing (choose=0), so no unit names it.
    units = resample([np.array([8], np.int64), np.array([5], np.int64)], np.array([8, 0]),
                     seed=1, epoch=0)  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"stream 1 \(b\) gives 0 of the epoch's 8"):
        EpochPlan.for_worker(units, topology=Topology(), num_canonical_nodes=1,
                             global_batch_size=4, epoch=0, shuffle=ShuffleConfig(),
                             batching_method="stratified", stream_names=["a", "b"])  # fmt: skip


def test_unknown_batching_method():
    with pytest.raises(ConfigurationError, match="unknown batching_method 'mixed'"):
        EpochPlan.for_worker(np.array([4]), topology=Topology(), num_canonical_nodes=1,
                             global_batch_size=2, epoch=0, shuffle=ShuffleConfig(),
                             batching_method="mixed")  # fmt: skip


def test_portions_round_by_largest_remainder():
    assert stream_portions(np.array([1, 1, 1]), 8).tolist() == [3, 3, 2]
    assert stream_portions(np.array([90, 10]), 4).tolist() == [4, 0]
    assert stream_portions(np.array([0, 0]), 4).tolist() == [0, 0]


@settings(max_examples=40, deadline=None)
@given(epoch=epochs(), shuffle=st.booleans(), data=st.data())
def test_device_per_stream_batches_come_from_one_stream(epoch, shuffle, data):
    units, firsts = epoch
    shape = data.draw(st.sampled_from(SHAPES))
    world = shape[0] * shape[1]
    kwargs = {"num_canonical_nodes": 2, "global_batch_size": 2 * world, "epoch": 2,
              "shuffle": ShuffleConfig(shuffle=shuffle, block_size=4),
              "batching_method": "device_per_stream"}  # fmt: skip
    if refuses_a_small_stream(units, 2, **{**kwargs, "global_batch_size": 2}):
        return
    nodes, per_node, workers = shape
    drawn = Counter(units.sample_ids(np.arange(units.epoch_size, dtype=np.int64)).tolist())
    delivered: Counter[int] = Counter()
    counts = set()
    plan = None
    for rank in range(world):
        rank_batches = 0
        for worker in range(workers):
            topology = Topology(nodes=nodes, ranks_per_node=per_node, workers_per_rank=workers,
                                rank=rank, worker=worker)  # fmt: skip
            plan = EpochPlan.for_worker(units, topology=topology, **kwargs)
            for batch in (batch.tolist() for batch in plan.batches):
                assert len({stream_of(i, firsts) for i in batch}) == 1  # one stream per device
                delivered.update(batch)
            rank_batches += len(plan.batches)
        counts.add(rank_batches)
    assert plan is not None
    assert len(counts) == 1  # every rank the same number of device batches
    assert not (delivered - drawn)
    assert sum(delivered.values()) + plan.dropped == units.epoch_size
