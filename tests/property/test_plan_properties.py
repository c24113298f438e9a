"""Elastic determinism of epoch plans: exactly once, equal ranks, topology-free global steps."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.cache import EpochStart
from shardstream.dataset.resume_point import ResumePoint
from shardstream.errors import ConfigurationError
from shardstream.pipeline.plan import Plan
from shardstream.sampling import BATCHING_METHODS, EpochPlan, ShuffleConfig, Topology

SHUFFLES = [ShuffleConfig()] + [
    ShuffleConfig(shuffle=True, algo=algo, seed=7, block_size=5)
    for algo in ("naive", "py1b", "py1br", "py1e", "py1s", "py2s")
]


def topologies(shape: tuple[int, int, int]) -> list[Topology]:
    nodes, per_node, workers = shape
    pairs = itertools.product(range(nodes * per_node), range(workers))
    return [Topology(nodes, per_node, workers, rank, worker) for rank, worker in pairs]


def steps_of(sizes: Any, shape: tuple[int, int, int], **kwargs: Any) -> dict[int, list[int]]:
    """Every global step's samples, gathered from every worker of a (nodes, ranks, workers) job."""
    steps: dict[int, list[int]] = {}
    for topology in topologies(shape):
        plan = EpochPlan.for_worker(sizes, topology=topology, **kwargs)
        for row, batch in enumerate(plan.batches):
            steps.setdefault(topology.worker + row * shape[2], []).extend(batch.tolist())
    return steps


def sequence(sizes: Any, **kwargs: Any) -> list[int]:
    """The epoch's samples in order, from a one-worker job (one rank: nothing repeated)."""
    plan = EpochPlan.for_worker(sizes, topology=Topology(), **kwargs)
    result: list[int] = plan.ids.tolist()
    return result


def repeats(order: list[int], count: int) -> Counter[int]:
    """The samples ``count`` repeats add: the epoch's first ones (again, if fewer)."""
    return Counter(order[i % len(order)] for i in range(count)) if count else Counter()


def real_steps(steps: dict[int, list[int]], extra: Counter[int]) -> dict[int, Counter[int]]:
    """Each step's samples, the repeats (all in the last step) taken out."""
    out = {k: Counter(v) for k, v in steps.items()}
    if out:
        last = max(out)
        assert not extra - out[last]  # the repeats are in the last step
        out[last] -= extra
    return out


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    sizes = np.array(draw(st.lists(st.integers(0, 15), min_size=1, max_size=8)), np.int64)
    return {
        "sizes": sizes,
        "ncn": draw(st.integers(1, 6)),
        "gbs": draw(st.sampled_from([1, 2, 4, 6, 8, 12])),
        "epoch": draw(st.integers(0, 3)),
        "shuffle": draw(st.sampled_from(SHUFFLES)),
    }


def shapes_for(gbs: int) -> list[tuple[int, int, int]]:
    return [
        (nodes, per_node, workers)
        for nodes, per_node, workers in itertools.product((1, 2, 3), (1, 2, 4), (1, 2, 3))
        if gbs % (nodes * per_node) == 0
    ]


def plan_kwargs(case: dict[str, Any]) -> dict[str, Any]:
    return {"num_canonical_nodes": case["ncn"], "global_batch_size": case["gbs"],
            "epoch": case["epoch"], "shuffle": case["shuffle"]}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_every_sample_once_then_the_fewest_repeats(case: dict[str, Any]) -> None:
    sizes, total = case["sizes"], int(case["sizes"].sum())
    kwargs = plan_kwargs(case)
    order = sequence(sizes, **kwargs)
    assert sorted(order) == list(range(total))  # one rank: each sample once, nothing repeated
    for shape in shapes_for(case["gbs"]):
        ranks = shape[0] * shape[1]
        plans = [EpochPlan.for_worker(sizes, topology=t, **kwargs) for t in topologies(shape)]
        delivered = Counter(i for plan in plans for i in plan.ids.tolist())
        # The fewest repeats that give every rank as many samples: fewer than the ranks, and
        # no more than the reference's, which also gives every rank as many.
        padding = -total % ranks
        assert {plan.padding for plan in plans} == {padding}
        assert delivered == Counter(range(total)) + repeats(order, padding)


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_global_steps_do_not_depend_on_the_topology(case: dict[str, Any]) -> None:
    sizes, total = case["sizes"], int(case["sizes"].sum())
    kwargs = plan_kwargs(case)
    order = sequence(sizes, **kwargs)
    expected = real_steps(steps_of(sizes, (1, 1, 1), **kwargs), Counter())
    for shape in shapes_for(case["gbs"]):
        extra = repeats(order, -total % (shape[0] * shape[1]))
        assert real_steps(steps_of(sizes, shape, **kwargs), extra) == expected, shape


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_every_rank_gets_the_same_batches_only_the_last_one_short(case: dict[str, Any]) -> None:
    kwargs, gbs = plan_kwargs(case), case["gbs"]
    for shape in shapes_for(gbs):
        ranks = shape[0] * shape[1]
        sizes: dict[int, list[int]] = {}  # rank -> its device batches' sizes, in step order
        for topology in topologies(shape):
            plan = EpochPlan.for_worker(case["sizes"], topology=topology, **kwargs)
            rank = sizes.setdefault(topology.rank, [])
            for row, batch in enumerate(plan.batches):
                step = topology.worker + row * shape[2]
                rank.extend([0] * (step + 1 - len(rank)))
                rank[step] = len(batch)
        assert len({tuple(batch_sizes) for batch_sizes in sizes.values()}) == 1, shape
        batch_sizes = sizes[0]
        assert all(size == gbs // ranks for size in batch_sizes[:-1])
        assert all(0 < size <= gbs // ranks for size in batch_sizes[-1:])


@settings(max_examples=60, deadline=None)
@given(case=cases(), data=st.data())
def test_resuming_anywhere_continues_exactly(case: dict[str, Any], data: st.DataObject) -> None:
    sizes, total, gbs = case["sizes"], int(case["sizes"].sum()), case["gbs"]
    kwargs = plan_kwargs(case)
    full = sequence(sizes, **kwargs)
    drop = data.draw(st.integers(0, total))
    # Any sample, on one rank: the rest of the epoch, in the same order, nothing more.
    assert sequence(sizes, drop_first=drop, **kwargs) == full[drop:]
    # A step boundary, on any topology (a changed node count included): the remaining steps.
    step = data.draw(st.integers(0, -(-total // gbs)))
    shape = data.draw(st.sampled_from(shapes_for(gbs)))
    resumed = steps_of(sizes, shape, drop_first=min(step * gbs, total), **kwargs)
    extra = repeats(full, -(total - min(step * gbs, total)) % (shape[0] * shape[1]))
    expected = real_steps(steps_of(sizes, (1, 1, 1), **kwargs), Counter())
    assert real_steps(resumed, extra) == {k - step: v for k, v in expected.items() if k >= step}


@settings(max_examples=80, deadline=None)
@given(case=cases(), data=st.data())
def test_a_resumed_plan_is_a_fresh_plan_reset_to_the_resume_point(
    case: dict[str, Any], data: st.DataObject
) -> None:
    # What a resumed epoch computes (the plan from the place) is what the fresh epoch's plan,
    # reset to the place's stage state, hands on: for every worker of every job's shape.
    sizes, total, gbs = case["sizes"], int(case["sizes"].sum()), case["gbs"]
    method = data.draw(st.sampled_from(BATCHING_METHODS))
    kwargs = {**plan_kwargs(case), "batching_method": method}
    drop = data.draw(st.integers(0, max(0, total - 1)))
    shape = data.draw(st.sampled_from(shapes_for(gbs)))
    point = ResumePoint.of(EpochStart(case["epoch"], drop), gbs, method)
    for topology in topologies(shape):
        source, state = point.for_worker(topology.worker, topology.workers_per_rank)
        fresh_of = functools.partial(
            EpochPlan.for_worker, sizes, topology=topology.with_worker(shape[2], source),
            drop_first=point.offset, **kwargs,
        )  # fmt: skip
        try:
            resumed = EpochPlan.for_worker(sizes, topology=topology, drop_first=drop, **kwargs)
        except ConfigurationError:  # a stream too small for the method: so is it fresh
            with pytest.raises(ConfigurationError):
                fresh_of()
            return
        fresh = fresh_of()
        plan = Plan(fresh.ids, fresh.batch_size)
        plan.reset(state)
        assert plan.rest().tolist() == resumed.ids.tolist()
        assert (fresh.padding, fresh.dropped) == (resumed.padding, resumed.dropped)
