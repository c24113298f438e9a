"""Each row once per epoch: which rows of a rank's last device batch are padding.

:class:`~shardstream.StreamingDataset` gives every rank the same number of whole device batches
by topping the epoch's last global batch up with repeats of its first positions. Petastorm's
loaders yield each row exactly once instead, the last batch short. The last global step holds
positions ``(steps - 1) * G .. steps * G - 1``; a rank's device batch takes the offsets
:func:`~shardstream.sampling.partition.device_offsets` names, in batch order; the offsets that
land past the epoch are the padding. Cutting them leaves every row exactly once over all ranks.
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
        keep: One flag per row of its last device batch: ``False`` for padding.

    Example:
        >>> tail = EpochTail.of(epoch_size=10, batch_size=4, topology=Topology())
        >>> tail.steps, tail.keep.tolist()
        (3, [True, True, False, False])
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
        )
        last = (partition.num_steps - 1) * partition.global_batch_size
        positions = last + device_offsets(topology, batch_size)
        return cls(partition.num_steps, positions < epoch_size)

    @property
    def padded(self) -> bool:
        """Whether the last batch holds any padding."""
        return not bool(self.keep.all())
