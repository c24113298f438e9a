"""Who reads: nodes, ranks per node, DataLoader workers per rank, and which worker this is.

Pure: values come in as arguments, each with the name of where it came from, so an error can
say ``WORLD_SIZE=6 (environment) is not a multiple of LOCAL_WORLD_SIZE=4 (environment)``.
Reading the environment is :mod:`shardstream.config`'s job; asking torch.distributed is the
dataset layer's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardstream.errors import TopologyError

__all__ = ["Sourced", "Topology", "resolve_topology"]


@dataclass(frozen=True)
class Topology:
    """The shape of a job and the position of one worker in it.

    Ranks are numbered node by node (ranks ``0 .. ranks_per_node - 1`` on node 0, and so on), as
    torchrun numbers them; workers are the DataLoader worker processes of one rank.

    Args:
        nodes: Physical nodes in the job.
        ranks_per_node: Ranks (training processes) on each node.
        workers_per_rank: DataLoader workers of each rank (1 when the rank reads itself).
        rank: This worker's global rank.
        worker: This worker's index among its rank's workers.

    Raises:
        TopologyError: A count is below 1 or a position is out of range.

    Example:
        >>> t = Topology(nodes=2, ranks_per_node=4, rank=5)
        >>> t.node, t.rank_of_node, t.world_size
        (1, 1, 8)
    """

    nodes: int = 1
    ranks_per_node: int = 1
    workers_per_rank: int = 1
    rank: int = 0
    worker: int = 0

    def __post_init__(self) -> None:
        for name in ("nodes", "ranks_per_node", "workers_per_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TopologyError(f"{name} must be a positive integer, got {value!r}")
        for name, bound in (("rank", self.world_size), ("worker", self.workers_per_rank)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < bound:
                raise TopologyError(
                    f"{name}={value!r} is out of range: it must be in 0..{bound - 1}"
                )

    @property
    def world_size(self) -> int:
        """Ranks in the job."""
        return self.nodes * self.ranks_per_node

    @property
    def node(self) -> int:
        """This worker's node."""
        return self.rank // self.ranks_per_node

    @property
    def rank_of_node(self) -> int:
        """This worker's rank among its node's ranks (torch's LOCAL_RANK)."""
        return self.rank % self.ranks_per_node

    @property
    def workers_per_node(self) -> int:
        """DataLoader workers on each node."""
        return self.ranks_per_node * self.workers_per_rank

    @property
    def num_workers(self) -> int:
        """DataLoader workers in the job."""
        return self.world_size * self.workers_per_rank

    @property
    def worker_of_node(self) -> int:
        """This worker's index among its node's workers."""
        return self.rank_of_node * self.workers_per_rank + self.worker

    @property
    def global_worker(self) -> int:
        """This worker's index among all the job's workers."""
        return self.rank * self.workers_per_rank + self.worker

    def replicated(self, replication: int) -> Topology:
        """The data-parallel view when ``replication`` consecutive ranks share every sample.

        With tensor or sequence parallelism, groups of ranks must read the same samples. Each
        group counts as one rank: rank ``r`` reads as rank ``r // replication``. Groups within a
        node keep the node; groups spanning whole nodes merge those nodes.

        Raises:
            TopologyError: The world size is not a multiple of ``replication``, or groups would
                straddle node boundaries unevenly.
        """
        if not isinstance(replication, int) or isinstance(replication, bool) or replication < 1:
            raise TopologyError(f"replication must be a positive integer, got {replication!r}")
        if self.world_size % replication:
            raise TopologyError(
                f"replication {replication} does not divide the world size {self.world_size}"
            )
        if self.ranks_per_node % replication == 0:
            nodes, per_node = self.nodes, self.ranks_per_node // replication
        elif replication % self.ranks_per_node == 0:
            nodes, per_node = self.world_size // replication, 1
        else:
            raise TopologyError(
                f"replication {replication} neither divides nor is a multiple of the "
                f"{self.ranks_per_node} ranks per node: replica groups would straddle nodes"
            )
        return replace(self, nodes=nodes, ranks_per_node=per_node, rank=self.rank // replication)

    def with_worker(self, workers_per_rank: int, worker: int) -> Topology:
        """The same job seen from one DataLoader worker (known only once workers start)."""
        return replace(self, workers_per_rank=workers_per_rank, worker=worker)


@dataclass(frozen=True)
class Sourced:
    """A value and where it came from (an argument, torch.distributed, the environment)."""

    value: int
    source: str

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


def resolve_topology(
    *,
    rank: list[Sourced],
    world_size: list[Sourced],
    ranks_per_node: list[Sourced],
    local_rank: list[Sourced],
) -> Topology:
    """Build the rank-level topology (one worker per rank) from candidate values.

    Each argument lists the candidates for one quantity, most trusted first (an explicit
    argument, then torch.distributed, then the environment); the first one wins and the others
    must agree with it. With nothing given the job is one rank on one node.

    Raises:
        TopologyError: The values disagree or do not add up; the message names each value and
            its source, and says what to set.
    """
    chosen_rank = _first(rank, Sourced(0, "default"))
    chosen_world = _first(world_size, Sourced(1, "default"))
    for name, candidates in (("rank", rank), ("world size", world_size)):
        winner = candidates[0] if candidates else None
        for other in candidates[1:]:
            if winner is not None and other.value != winner.value:
                raise TopologyError(
                    f"the {name} is {winner} but {other}; make them agree, or pass the "
                    f"{name} explicitly"
                )
    if chosen_world.value < 1:
        raise TopologyError(f"the world size must be at least 1, got {chosen_world}")
    if not 0 <= chosen_rank.value < chosen_world.value:
        raise TopologyError(
            f"rank {chosen_rank} is out of range for world size {chosen_world}: it must be in "
            f"0..{chosen_world.value - 1}"
        )
    if ranks_per_node:
        per_node = ranks_per_node[0]
    elif chosen_world.value == 1:
        per_node = Sourced(1, "default")
    else:
        raise TopologyError(
            f"world size is {chosen_world} but nothing says how many ranks share a node: set "
            f"LOCAL_WORLD_SIZE (torchrun does) or pass ranks_per_node explicitly"
        )
    if per_node.value < 1 or chosen_world.value % per_node.value:
        raise TopologyError(
            f"world size {chosen_world} is not a multiple of ranks per node {per_node}; every "
            f"node must run the same number of ranks"
        )
    for other in local_rank:
        if other.value != chosen_rank.value % per_node.value:
            raise TopologyError(
                f"local rank {other} does not match rank {chosen_rank} with {per_node} ranks per "
                f"node (expected {chosen_rank.value % per_node.value}); ranks must be numbered "
                f"node by node"
            )
    return Topology(
        nodes=chosen_world.value // per_node.value,
        ranks_per_node=per_node.value,
        rank=chosen_rank.value,
    )


def _first(candidates: list[Sourced], default: Sourced) -> Sourced:
    return candidates[0] if candidates else default
