"""Where each epoch position goes: global batches, devices, DataLoader workers, resumption.

The epoch order interleaves the canonical nodes: position ``g`` belongs to canonical node
``g % NCN`` (at its local position ``g // NCN``) while every node still has samples; the few
nodes one sample longer than the others finish the epoch. Global step ``k`` holds positions
``drop_first + k * G .. drop_first + (k + 1) * G - 1`` (``G`` the global batch size), so the
*set* of samples of each step depends on the data, the seed, the epoch, ``G`` and NCN only —
never on how many nodes, ranks or workers read it. Inside a step, physical node ``p`` takes the
offsets ``p, p + P, p + 2P ...``; its ranks take turns among those; a rank's device batches go
round-robin to its DataLoader workers, as torch's DataLoader fetches them.

The last step is topped up to a whole global batch by repeating the epoch's first positions, so
every rank gets the same number of samples; :attr:`EpochPartition.padding` says how many.
Resuming after ``drop_first`` samples is arithmetic: nothing is replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.topology import Topology

__all__ = ["EpochPartition", "device_offsets", "interleave", "worker_steps"]


@dataclass(frozen=True)
class EpochPartition:
    """The arithmetic of one epoch: its steps, its padding, and each worker's positions.

    Args:
        epoch_size: Samples in the epoch (``E``).
        num_canonical_nodes: Canonical nodes (NCN): the epoch order interleaves them.
        global_batch_size: Samples per optimiser step over all ranks (``G``).
        drop_first: Samples of the epoch already consumed (resumption), ``0 .. E``.

    Raises:
        ConfigurationError: A value is out of range.

    Example:
        >>> part = EpochPartition(epoch_size=10, num_canonical_nodes=2, global_batch_size=4)
        >>> part.num_steps, part.padding
        (3, 2)
    """

    epoch_size: int
    num_canonical_nodes: int
    global_batch_size: int
    drop_first: int = 0

    def __post_init__(self) -> None:
        for name, low in (("epoch_size", 0), ("num_canonical_nodes", 1), ("global_batch_size", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.drop_first, int) or not 0 <= self.drop_first <= self.epoch_size:
            raise ConfigurationError(
                f"drop_first={self.drop_first!r} must be in 0..{self.epoch_size} (the samples of "
                f"this epoch already consumed); the resume state belongs to another dataset?"
            )

    @property
    def remaining(self) -> int:
        """Samples of the epoch still to deliver."""
        return self.epoch_size - self.drop_first

    @property
    def padding(self) -> int:
        """Repeated samples that top the last step up to a whole global batch."""
        return -self.remaining % self.global_batch_size

    @property
    def num_steps(self) -> int:
        """Global steps left in the epoch."""
        return (self.remaining + self.padding) // self.global_batch_size

    def device_batch_size(self, topology: Topology) -> int:
        """Samples per device batch: the global batch split over every rank.

        Raises:
            ConfigurationError: The global batch does not split evenly over the ranks.
        """
        if self.global_batch_size % topology.world_size:
            raise ConfigurationError(
                f"global batch size {self.global_batch_size} does not split over "
                f"{topology.world_size} ranks ({topology.nodes} nodes x "
                f"{topology.ranks_per_node}); use a per-device batch_size so that batch_size x "
                f"ranks is the global batch"
            )
        return self.global_batch_size // topology.world_size

    def worker_positions(self, topology: Topology) -> NDArray[np.int64]:
        """The epoch positions one worker delivers, as ``[its device batches, batch size]``.

        Row ``i`` is the rank's device batch ``topology.worker + i * workers_per_rank``, that is
        global step ``topology.worker + i * workers_per_rank`` after ``drop_first``.
        """
        batch = self.device_batch_size(topology)
        steps = worker_steps(0, self.num_steps, topology)
        within = device_offsets(topology, batch)
        positions: NDArray[np.int64] = (
            self.drop_first + steps[:, None] * self.global_batch_size + within[None, :]
        )
        if self.padding:  # positions past the end wrap to the epoch's first ones
            past = positions >= self.epoch_size
            positions[past] = (positions[past] - self.epoch_size) % self.epoch_size
        return positions


def interleave(
    positions: NDArray[np.int64], epoch_size: int, num_canonical_nodes: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The canonical node and the local position within it of each epoch position.

    Node ``c`` owns ``E * (c + 1) // NCN - E * c // NCN`` samples: ``q = E // NCN`` or ``q + 1``.
    Positions below ``q * NCN`` cycle through the nodes; the rest go, in node order, to the
    nodes that own ``q + 1``.
    """
    ncn = num_canonical_nodes
    rows = epoch_size // ncn
    head = rows * ncn
    local, nodes = np.divmod(positions, ncn)
    if head < epoch_size:
        bounds = epoch_size * np.arange(ncn + 1, dtype=np.int64) // ncn
        longer = np.flatnonzero(np.diff(bounds) > rows)
        tail = positions >= head
        nodes = np.where(tail, longer[np.clip(positions - head, 0, len(longer) - 1)], nodes)
        local = np.where(tail, rows, local)
    return nodes.astype(np.int64, copy=False), local.astype(np.int64, copy=False)


def device_offsets(topology: Topology, batch_size: int) -> NDArray[np.int64]:
    """The offsets within each global batch that this worker's device takes, in batch order.

    Physical node ``p`` takes ``p, p + P, p + 2P ...``; its ranks take turns among those.
    """
    sequence = np.arange(batch_size, dtype=np.int64)
    return topology.node + topology.nodes * (
        topology.rank_of_node + topology.ranks_per_node * sequence
    )


def worker_steps(first: int, stop: int, topology: Topology) -> NDArray[np.int64]:
    """The global steps in ``first .. stop - 1`` whose device batch this DataLoader worker makes.

    A rank's device batches go round-robin to its workers, counted from the first step run.
    """
    return np.arange(first + topology.worker, stop, topology.workers_per_rank, dtype=np.int64)
