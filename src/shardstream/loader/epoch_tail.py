"""Each row once per epoch: which rows of a rank's last device batch are repeats.

:class:`~shardstream.StreamingDataset` gives every rank the same number of samples: where the
epoch does not split evenly over the ranks, a few of its first positions are repeated in its
last global step. Petastorm's loaders yield each row exactly once instead. The last global step
holds positions ``(steps - 1) * G .. (steps - 1) * G + ranks * last - 1`` (``last`` the size
of every rank's last device batch); a rank's batch takes the offsets
:func:`~shardstream.sampling.partition.device_offsets` names, in batch order; the offsets that
land past the epoch are the repeats. Cutting them leaves every row exactly once over all ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.sampling import EpochPartition, Topology
from shardstream.sampling.partition import device_offsets

__all__ = ["EpochTail"]


@dataclass(frozen=True)
class EpochTail:
    """A rank's batches per epoch and which rows of its last batch are real.

    Attributes:
        steps: Device batches the rank yields per epoch.
        keep: One flag per row of its last device batch: ``False`` for a repeat.

    Example:
        >>> ranks = Topology(ranks_per_node=4, rank=3)  # 10 samples: 3 a rank, 2 of them repeats
        >>> tail = EpochTail.of(epoch_size=10, batch_size=4, topology=ranks)
        >>> tail.steps, tail.keep.tolist()
        (1, [True, True, False])
    """

    steps: int
    keep: NDArray[np.bool_]

    @classmethod
    def of(cls, *, epoch_size: int, batch_size: int, topology: Topology) -> EpochTail:
        """The tail of an epoch of ``epoch_size`` samples, per-device ``batch_size``."""
        partition = EpochPartition(
            epoch_size=epoch_size,
            num_canonical_nodes=1,  # steps and offsets do not depend on it
            global_batch_size=batch_size * topology.world_size,
            ranks=topology.world_size,
        )
        last = (partition.num_steps - 1) * partition.global_batch_size
        positions = last + device_offsets(topology, partition.last_batch_size)
        return cls(partition.num_steps, positions < epoch_size)

    @property
    def padded(self) -> bool:
        """Whether the last batch holds any repeat."""
        return not bool(self.keep.all())
