"""Elastic determinism of epoch plans: exactly once, equal ranks, topology-free global steps."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.sampling import EpochPlan, ShuffleConfig, Topology

SHUFFLES = [ShuffleConfig()] + [
    ShuffleConfig(shuffle=True, algo=algo, seed=7, block_size=5)
    for algo in ("naive", "py1b", "py1br", "py1e", "py1s", "py2s")
]


def steps_of(sizes: Any, shape: tuple[int, int, int], **kwargs: Any) -> dict[int, list[int]]:
    """Every global step's samples, gathered from every worker of a (nodes, ranks, workers) job."""
    nodes, per_node, workers = shape
    steps: dict[int, list[int]] = {}
    for rank, worker in itertools.product(range(nodes * per_node), range(workers)):
        topology = Topology(nodes=nodes, ranks_per_node=per_node, workers_per_rank=workers,
                            rank=rank, worker=worker)  # fmt: skip
        plan = EpochPlan.for_worker(sizes, topology=topology, **kwargs)
        for row, batch in enumerate(plan.batches.tolist()):
            steps.setdefault(worker + row * workers, []).extend(batch)
    return steps


def sequence(sizes: Any, **kwargs: Any) -> list[int]:
    """The epoch's samples in order, from a one-worker job with device batch 1."""
    plan = EpochPlan.for_worker(sizes, topology=Topology(), **kwargs)
    result: list[int] = plan.batches.ravel().tolist()
    return result


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


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_every_sample_once_then_reported_padding(case: dict[str, Any]) -> None:
    sizes, total = case["sizes"], int(case["sizes"].sum())
    kwargs = {"num_canonical_nodes": case["ncn"], "global_batch_size": case["gbs"],
              "epoch": case["epoch"], "shuffle": case["shuffle"]}  # fmt: skip
    for shape in shapes_for(case["gbs"]):
        steps = steps_of(sizes, shape, **kwargs)
        delivered = [sample for k in sorted(steps) for sample in steps[k]]
        padding = -total % case["gbs"]
        # Each sample once, plus the reported padding: repeats of the epoch's first samples.
        assert len(delivered) == total + padding
        assert Counter(delivered) == Counter(range(total)) + Counter(
            sequence(sizes, **kwargs)[:padding]
        )


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_global_steps_do_not_depend_on_the_topology(case: dict[str, Any]) -> None:
    kwargs = {"num_canonical_nodes": case["ncn"], "global_batch_size": case["gbs"],
              "epoch": case["epoch"], "shuffle": case["shuffle"]}  # fmt: skip
    expected = steps_of(case["sizes"], (1, 1, 1), **kwargs)
    for shape in shapes_for(case["gbs"]):
        got = steps_of(case["sizes"], shape, **kwargs)
        assert {k: sorted(v) for k, v in got.items()} == {
            k: sorted(v) for k, v in expected.items()
        }, shape


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_every_rank_gets_the_same_count(case: dict[str, Any]) -> None:
    for nodes, per_node, workers in shapes_for(case["gbs"]):
        counts: Counter[int] = Counter()
        for rank, worker in itertools.product(range(nodes * per_node), range(workers)):
            topology = Topology(nodes=nodes, ranks_per_node=per_node, workers_per_rank=workers,
                                rank=rank, worker=worker)  # fmt: skip
            plan = EpochPlan.for_worker(
                case["sizes"], topology=topology, num_canonical_nodes=case["ncn"],
                global_batch_size=case["gbs"], epoch=case["epoch"], shuffle=case["shuffle"],
            )  # fmt: skip
            counts[rank] += plan.batches.size
        assert len(set(counts.values())) == 1


@settings(max_examples=60, deadline=None)
@given(case=cases(), data=st.data())
def test_resuming_anywhere_continues_exactly(case: dict[str, Any], data: st.DataObject) -> None:
    sizes, total, gbs = case["sizes"], int(case["sizes"].sum()), case["gbs"]
    kwargs = {"num_canonical_nodes": case["ncn"], "global_batch_size": gbs,
              "epoch": case["epoch"], "shuffle": case["shuffle"]}  # fmt: skip
    full = sequence(sizes, **kwargs)
    drop = data.draw(st.integers(0, total))
    # Any sample: the rest of the epoch, in the same order (then the resumed run's padding).
    assert sequence(sizes, drop_first=drop, **kwargs)[: total - drop] == full[drop:total]
    # A step boundary, on any topology (a changed node count included): the remaining steps.
    step = data.draw(st.integers(0, len(full) // gbs))
    shape = data.draw(st.sampled_from(shapes_for(gbs)))
    resumed = steps_of(sizes, shape, drop_first=min(step * gbs, total), **kwargs)
    expected = steps_of(sizes, (1, 1, 1), **kwargs)
    assert {k: sorted(v) for k, v in resumed.items()} == {
        k - step: sorted(v) for k, v in expected.items() if k >= step
    }
