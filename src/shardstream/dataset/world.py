"""Finding this process's place in the job: explicit arguments, torch.distributed, environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardstream._torch import distributed_rank_and_size
from shardstream.config import distributed_environment
from shardstream.errors import ConfigurationError
from shardstream.sampling.topology import Sourced, Topology, resolve_topology

__all__ = ["detect_topology", "explicit_topology", "shard_topology"]


def detect_topology(
    *,
    rank: int | None = None,
    world_size: int | None = None,
    ranks_per_node: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> Topology:
    """The rank-level topology of this process (one worker per rank; workers come later).

    Each value comes from the first source that has it: the explicit argument, then
    torch.distributed (when its default group is initialised), then the launcher's environment
    variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE). Sources that disagree are an
    error, so a launcher that sets the variables wrong is caught before any data is read.

    Raises:
        TopologyError: Values disagree or do not add up; the message names each value's source.

    Example:
        >>> detect_topology(rank=0, world_size=1).world_size
        1
    """
    env = distributed_environment(environ)
    torch_values = distributed_rank_and_size()

    def candidates(explicit: int | None, torch_index: int | None, variable: str) -> list[Sourced]:
        found = [] if explicit is None else [Sourced(explicit, "argument")]
        if torch_values is not None and torch_index is not None:
            found.append(Sourced(torch_values[torch_index], "torch.distributed"))
        if variable in env:
            found.append(env[variable])
        return found

    return resolve_topology(
        rank=candidates(rank, 0, "RANK"),
        world_size=candidates(world_size, 1, "WORLD_SIZE"),
        ranks_per_node=candidates(ranks_per_node, None, "LOCAL_WORLD_SIZE"),
        local_rank=candidates(None, None, "LOCAL_RANK"),
    )


def explicit_topology(
    topology: Topology | None, rank: int | None, world_size: int | None, ranks_per_node: int | None
) -> Topology | None:
    """``topology`` checked as a dataset's explicit one: a rank's place, given alone.

    Raises:
        ConfigurationError: ``rank``, ``world_size`` or ``ranks_per_node`` beside it, or a
            worker's topology.

    Example:
        >>> explicit_topology(Topology(ranks_per_node=2, rank=1), None, None, None).world_size
        2
    """
    if topology is None:
        return None
    if rank is not None or world_size is not None or ranks_per_node is not None:
        raise ConfigurationError(
            "give topology= or rank/world_size/ranks_per_node, not both: topology= says it all"
        )
    if topology.workers_per_rank != 1 or topology.worker != 0:
        raise ConfigurationError(
            f"topology= is a rank's place (workers_per_rank=1, worker=0); the DataLoader's "
            f"workers are counted at iteration. Got {topology}"
        )
    return topology


def shard_topology(
    cur_shard: Any, shard_count: Any, ranks_per_node: int | None = None
) -> Topology | None:
    """Petastorm's ``cur_shard`` of ``shard_count`` as a topology (one node unless told).

    Petastorm places a reader by these two alone; ``None`` when neither is given.

    Raises:
        ConfigurationError: Only one is given, a value is not an integer, or they name no
            shard of whole nodes.

    Example:
        >>> shard_topology(1, 4).rank, shard_topology(None, None)
        (1, None)
    """
    if cur_shard is None and shard_count is None:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (cur_shard, shard_count)):
        raise ConfigurationError(
            f"cur_shard and shard_count must be integers given together, got cur_shard="
            f"{cur_shard!r}, shard_count={shard_count!r}"
        )
    if not 0 <= cur_shard < shard_count:
        raise ConfigurationError(
            f"cur_shard={cur_shard} is not in 0 .. {shard_count - 1}, so cur_shard and "
            f"shard_count={shard_count} do not name a shard"
        )
    per_node = shard_count if ranks_per_node is None else ranks_per_node
    if per_node < 1 or shard_count % per_node:
        raise ConfigurationError(
            f"cur_shard={cur_shard} and shard_count={shard_count} (ranks_per_node={per_node}) "
            f"do not name a shard: 0 <= cur_shard < shard_count, in whole nodes"
        )
    return Topology(nodes=shard_count // per_node, ranks_per_node=per_node, rank=cur_shard)
