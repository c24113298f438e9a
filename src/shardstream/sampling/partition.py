"""Where each epoch position goes: global batches, devices, DataLoader workers, resumption.

The epoch order interleaves the canonical nodes: position ``g`` belongs to canonical node
``g % NCN`` (at its local position ``g // NCN``) while every node still has samples; the few
nodes one sample longer than the others finish the epoch. Global step ``k`` holds positions
``drop_first + k * G .. drop_first + (k + 1) * G - 1`` (``G`` the global batch size), so the
*set* of samples of each step depends on the data, the seed, the epoch, ``G`` and NCN only —
never on how many nodes, ranks or workers read it. Inside a step, physical node ``p`` takes the
offsets ``p, p + P, p + 2P ...``; its ranks take turns among those; a rank's device batches go
round-robin to its DataLoader workers, as torch's DataLoader fetches them.

The last step may be short: it holds what is left of the epoch, split evenly over the ranks,
so every rank gets the same number of samples and of batches, its last batch short when the
epoch ends mid-step. Where the rest does not split evenly, as few of the epoch's first positions
as make it split are repeated (fewer than the ranks; none on one rank):
:attr:`EpochPartition.padding` says how many. Resuming after ``drop_first`` samples is
arithmetic: nothing is replayed.
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
    """The arithmetic of one epoch: its steps, its repeats, and each worker's positions.

    Args:
        epoch_size: Samples in the epoch (``E``).
        num_canonical_nodes: Canonical nodes (NCN): the epoch order interleaves them.
        global_batch_size: Samples per optimiser step over all ranks (``G``).
        drop_first: Samples of the epoch already consumed (resumption), ``0 .. E``.
        ranks: Data-parallel ranks the epoch is split over; ``G`` must be a multiple.

    Raises:
        ConfigurationError: A value is out of range, or ``G`` does not split over the ranks.

    Example:
        >>> part = EpochPartition(epoch_size=10, num_canonical_nodes=2, global_batch_size=8,
        ...                       ranks=4)
        >>> part.num_steps, part.per_rank, part.last_batch_size, part.padding
        (2, 3, 1, 2)
    """

    epoch_size: int
    num_canonical_nodes: int
    global_batch_size: int
    drop_first: int = 0
    ranks: int = 1

    def __post_init__(self) -> None:
        for name, low in (
            ("epoch_size", 0), ("num_canonical_nodes", 1), ("global_batch_size", 1), ("ranks", 1)
        ):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.drop_first, int) or not 0 <= self.drop_first <= self.epoch_size:
            raise ConfigurationError(
                f"drop_first={self.drop_first!r} must be in 0..{self.epoch_size} (the samples of "
                f"this epoch already consumed); the resume state belongs to another dataset?"
            )
        if self.global_batch_size % self.ranks:
            raise ConfigurationError(
                f"global batch size {self.global_batch_size} does not split over {self.ranks} "
                f"ranks; use a per-device batch_size so that batch_size x ranks is the global "
                f"batch"
            )

    @property
    def remaining(self) -> int:
        """Samples of the epoch still to deliver."""
        return self.epoch_size - self.drop_first

    @property
    def padding(self) -> int:
        """Repeated samples that give every rank as many as the others (``0 .. ranks - 1``)."""
        return -self.remaining % self.ranks

    @property
    def per_rank(self) -> int:
        """Samples each rank delivers: the rest of the epoch and the repeats, split evenly."""
        return (self.remaining + self.padding) // self.ranks

    @property
    def device_batch_size(self) -> int:
        """Samples per whole device batch: the global batch split over the ranks."""
        return self.global_batch_size // self.ranks

    @property
    def num_steps(self) -> int:
        """Global steps left in the epoch (each rank's device batches), the last maybe short."""
        return -(-self.per_rank // self.device_batch_size)

    @property
    def last_batch_size(self) -> int:
        """Samples in each rank's last device batch (``0`` when no step is left)."""
        if not self.num_steps:
            return 0
        return self.per_rank - (self.num_steps - 1) * self.device_batch_size

    def worker_positions(self, topology: Topology) -> NDArray[np.int64]:
        """The epoch positions one worker delivers, in order.

        They come in device batches of :attr:`device_batch_size`, the last one maybe of
        :attr:`last_batch_size`: batch ``i`` is the rank's device batch ``topology.worker + i *
        workers_per_rank``, that is global step ``topology.worker + i * workers_per_rank``
        after ``drop_first``. A short last step holds ``ranks * last_batch_size`` positions.

        Raises:
            ConfigurationError: ``topology`` has another number of ranks.
        """
        if topology.world_size != self.ranks:
            raise ConfigurationError(
                f"this epoch is split over {self.ranks} ranks, but the topology has "
                f"{topology.world_size} ({topology.nodes} nodes x {topology.ranks_per_node})"
            )
        batch, last = self.device_batch_size, self.last_batch_size
        steps = worker_steps(0, self.num_steps, topology)
        short = last < batch and len(steps) > 0 and steps[-1] == self.num_steps - 1
        whole = steps[:-1] if short else steps
        rows = whole[:, None] * self.global_batch_size + device_offsets(topology, batch)[None, :]
        positions: NDArray[np.int64] = self.drop_first + rows.reshape(-1)
        if short:
            tail = (self.num_steps - 1) * self.global_batch_size + device_offsets(topology, last)
            positions = np.concatenate([positions, self.drop_first + tail])
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
    if ncn == 1:  # one node holds every position where it is
        return np.zeros(np.shape(positions), dtype=np.int64), np.array(positions, np.int64)
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
