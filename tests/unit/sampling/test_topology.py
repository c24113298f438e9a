"""Topology: derived positions, validation, and resolution from sourced values."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.config import distributed_environment
from shardstream.errors import TopologyError
from shardstream.sampling import Sourced, Topology, resolve_topology


def test_positions_are_derived_node_by_node():
    topology = Topology(nodes=2, ranks_per_node=4, workers_per_rank=3, rank=5, worker=2)
    assert topology.world_size == 8
    assert topology.node == 1
    assert topology.rank_of_node == 1
    assert topology.workers_per_node == 12
    assert topology.num_workers == 24
    assert topology.worker_of_node == 1 * 3 + 2
    assert topology.global_worker == 5 * 3 + 2


@settings(max_examples=50, deadline=None)
@given(nodes=st.integers(1, 4), per_node=st.integers(1, 4), workers=st.integers(1, 4))
def test_every_worker_has_a_distinct_position(nodes, per_node, workers):
    seen, seen_on_node = set(), set()
    for rank, worker in itertools.product(range(nodes * per_node), range(workers)):
        t = Topology(nodes=nodes, ranks_per_node=per_node, workers_per_rank=workers,
                     rank=rank, worker=worker)  # fmt: skip
        seen.add(t.global_worker)
        seen_on_node.add((t.node, t.worker_of_node))
    assert seen == set(range(nodes * per_node * workers))
    assert seen_on_node == set(itertools.product(range(nodes), range(per_node * workers)))


def test_with_worker_keeps_the_rank():
    topology = Topology(nodes=1, ranks_per_node=2, rank=1).with_worker(4, 3)
    assert (topology.rank, topology.workers_per_rank, topology.worker) == (1, 4, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nodes": 0}, "nodes must be a positive integer"),
        ({"ranks_per_node": -1}, "ranks_per_node must be a positive integer"),
        ({"workers_per_rank": True}, "workers_per_rank must be a positive integer"),
        ({"rank": 2, "ranks_per_node": 2}, r"rank=2 is out of range: it must be in 0..1"),
        ({"worker": 1}, r"worker=1 is out of range"),
    ],
)
def test_invalid_topologies_are_refused(kwargs, match):
    with pytest.raises(TopologyError, match=match):
        Topology(**kwargs)


def env(**values: int) -> dict[str, Sourced]:
    return distributed_environment({k: str(v) for k, v in values.items()})


def resolve(environment: dict[str, Sourced], **explicit: int) -> Topology:
    def candidates(name: str, variable: str) -> list[Sourced]:
        found = [Sourced(explicit[name], "argument")] if name in explicit else []
        return found + ([environment[variable]] if variable in environment else [])

    return resolve_topology(
        rank=candidates("rank", "RANK"),
        world_size=candidates("world_size", "WORLD_SIZE"),
        ranks_per_node=candidates("ranks_per_node", "LOCAL_WORLD_SIZE"),
        local_rank=candidates("local_rank", "LOCAL_RANK"),
    )


def test_nothing_set_is_one_rank_on_one_node():
    assert resolve({}) == Topology()


def test_torchrun_environment():
    topology = resolve(env(RANK=5, WORLD_SIZE=8, LOCAL_RANK=1, LOCAL_WORLD_SIZE=4))
    assert (topology.nodes, topology.ranks_per_node, topology.rank) == (2, 4, 5)


def test_explicit_arguments_need_no_environment():
    topology = resolve({}, rank=3, world_size=4, ranks_per_node=2)
    assert (topology.nodes, topology.node, topology.rank_of_node) == (2, 1, 1)


def test_world_size_not_a_multiple_of_local_world_size():
    with pytest.raises(TopologyError) as caught:
        resolve(env(RANK=0, WORLD_SIZE=6, LOCAL_WORLD_SIZE=4))
    message = str(caught.value)
    assert "6 (environment WORLD_SIZE)" in message
    assert "4 (environment LOCAL_WORLD_SIZE)" in message


def test_rank_out_of_range_names_its_source():
    with pytest.raises(TopologyError, match=r"rank 8 \(environment RANK\) is out of range"):
        resolve(env(RANK=8, WORLD_SIZE=8, LOCAL_WORLD_SIZE=4))


def test_argument_and_environment_disagree():
    with pytest.raises(TopologyError, match=r"world size is 4 \(argument\) but 8 \(environment"):
        resolve(env(RANK=0, WORLD_SIZE=8, LOCAL_WORLD_SIZE=4), world_size=4)


def test_local_rank_must_match_node_by_node_numbering():
    with pytest.raises(TopologyError, match=r"local rank 0 .* does not match rank 5"):
        resolve(env(RANK=5, WORLD_SIZE=8, LOCAL_RANK=0, LOCAL_WORLD_SIZE=4))


def test_several_ranks_without_a_node_size_ask_for_one():
    with pytest.raises(TopologyError, match=r"set LOCAL_WORLD_SIZE .* or pass ranks_per_node"):
        resolve(env(RANK=1, WORLD_SIZE=4))


@pytest.mark.parametrize("text", ["-1", "two", "1.5"])
def test_malformed_environment_variables(text):
    with pytest.raises(TopologyError, match=f"RANK={text!r}"):
        distributed_environment({"RANK": text})


def test_unset_and_empty_variables_are_ignored():
    assert distributed_environment({"RANK": "", "OTHER": "3"}) == {}


def test_replicas_read_as_one_rank():
    job = [Topology(nodes=2, ranks_per_node=4, rank=rank) for rank in range(8)]
    pairs = [t.replicated(2) for t in job]
    assert [(t.nodes, t.ranks_per_node, t.rank) for t in pairs[:4]] == [
        (2, 2, 0), (2, 2, 0), (2, 2, 1), (2, 2, 1)
    ]  # fmt: skip
    spanning = [t.replicated(8) for t in job]
    assert {(t.nodes, t.ranks_per_node, t.rank) for t in spanning} == {(1, 1, 0)}


@pytest.mark.parametrize(
    ("replication", "match"),
    [(3, "does not divide the world size 8"), (0, "positive integer")],
)
def test_bad_replication(replication, match):
    with pytest.raises(TopologyError, match=match):
        Topology(nodes=2, ranks_per_node=4).replicated(replication)


def test_replica_groups_may_not_straddle_nodes():
    with pytest.raises(TopologyError, match="straddle nodes"):
        Topology(nodes=4, ranks_per_node=6).replicated(4)
