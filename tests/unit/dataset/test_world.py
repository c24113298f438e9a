"""detect_topology: arguments, then torch.distributed, then the launcher's environment."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import spawn

from shardstream.dataset import detect_topology
from shardstream.errors import TopologyError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_environment_only():
    environ = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    topology = detect_topology(environ=environ)
    assert (topology.nodes, topology.ranks_per_node, topology.rank) == (2, 2, 3)


def test_arguments_alone():
    topology = detect_topology(rank=1, world_size=2, ranks_per_node=2, environ={})
    assert (topology.nodes, topology.rank_of_node) == (1, 1)


@pytest.fixture
def one_process_group():
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


@pytest.mark.usefixtures("one_process_group")
def test_torch_distributed_is_consulted():
    assert detect_topology(environ={}).world_size == 1
    with pytest.raises(TopologyError, match=r"1 \(torch.distributed\) but 2 \(environment"):
        detect_topology(environ={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})


def _rank_process(rank: int, port: int, results: Any) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # No RANK or WORLD_SIZE in the environment: the group says who is who.
        topology = detect_topology(ranks_per_node=2, environ={})
        results.put((rank, topology.rank, topology.world_size, topology.rank_of_node))
    finally:
        dist.destroy_process_group()


def test_two_real_ranks_read_their_place_from_the_process_group():
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    spawn(_rank_process, args=(_free_port(), results), nprocs=2)  # type: ignore[no-untyped-call]
    found = sorted(results.get() for _ in range(2))
    assert found == [(0, 0, 2, 0), (1, 1, 2, 1)]


def test_an_explicit_topology_is_used_as_given(monkeypatch: pytest.MonkeyPatch):
    from shardstream import StreamingDataset
    from shardstream.errors import ConfigurationError
    from shardstream.sampling import Topology

    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    given = Topology(nodes=3, ranks_per_node=1, rank=2)
    dataset = StreamingDataset(local="/nowhere", batch_size=4, topology=given)
    assert dataset.topology == given  # the launcher's variables are not read
    with pytest.raises(TopologyError):  # without it they are, and disagree with rank=0
        _ = StreamingDataset(local="/nowhere", batch_size=4, rank=0, world_size=1).topology
    with pytest.raises(ConfigurationError, match="not both"):
        StreamingDataset(local="/nowhere", batch_size=4, topology=given, rank=0)
    with pytest.raises(ConfigurationError, match="a rank's place"):
        StreamingDataset(local="/nowhere", batch_size=4,
                         topology=Topology(workers_per_rank=2, worker=1))  # fmt: skip
