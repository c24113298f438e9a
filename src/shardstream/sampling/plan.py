"""One worker's samples for one epoch: the shuffle, the batching method and the partition.

A worker computes only the canonical nodes its positions fall in (with ``NCN`` a multiple of
the node count, one node's worth per physical node), never the whole epoch, and shares nothing
with other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.batching import (
    StepBatches,
    device_per_stream_batches,
    per_stream_batches,
    stratified_batches,
)
from shardstream.sampling.mixing import EpochUnits
from shardstream.sampling.partition import EpochPartition
from shardstream.sampling.sequence import NodeOrderMemo, ShuffleConfig, sequence_ids
from shardstream.sampling.topology import Topology

__all__ = ["BATCHING_METHODS", "EpochPlan"]

#: The ways global batches draw on the streams.
BATCHING_METHODS = ("device_per_stream", "per_stream", "random", "stratified")


@dataclass(frozen=True)
class EpochPlan:
    """The samples one worker delivers in one epoch, in device batches.

    Attributes:
        ids: Dataset sample ids, in the order the worker delivers them: device batch ``i``
            (the rank's device batch ``worker + i * workers_per_rank`` of this, possibly
            resumed, run) is ``ids[i * batch_size : (i + 1) * batch_size]``. Only the
            epoch's last batch may be short.
        batch_size: Samples per device batch.
        num_steps: Global steps this run delivers.
        padding: Samples repeated so that every rank gets as many as the others (``random``
            batching; fewer than the ranks, none on one rank).
        dropped: Samples of the epoch no global batch holds (the stream-aware batching methods
            keep whole, pure batches only); reported, never silent.
    """

    ids: NDArray[np.int64]
    batch_size: int
    num_steps: int
    padding: int = 0
    dropped: int = 0

    @property
    def batches(self) -> list[NDArray[np.int64]]:
        """The device batches, in order: views of :attr:`ids`, the last one maybe short."""
        size = self.batch_size
        return [self.ids[at : at + size] for at in range(0, len(self.ids), size)]

    @classmethod
    def for_worker(
        cls,
        source: NDArray[np.int64] | EpochUnits,
        *,
        topology: Topology,
        num_canonical_nodes: int,
        global_batch_size: int,
        epoch: int,
        shuffle: ShuffleConfig,
        drop_first: int = 0,
        batching_method: str = "random",
        memo: NodeOrderMemo | None = None,
        stream_names: Sequence[str] = (),
    ) -> EpochPlan:
        """Compute the plan of the worker ``topology`` points at.

        Args:
            source: The epoch's units (from :func:`~shardstream.sampling.mixing.resample`), or
                just the shard sizes of one unweighted stream.
            topology: Which worker, in which job.
            num_canonical_nodes: Canonical nodes (NCN) of the epoch order.
            global_batch_size: Samples per optimiser step over all ranks.
            epoch: The epoch.
            shuffle: The shuffle.
            drop_first: Samples of the epoch already consumed. ``random`` batching resumes
                at that very sample; the others at the global batch it falls in.
            batching_method: ``random`` (streams mixed at random), ``stratified`` (every
                global batch holds each stream in proportion), ``per_stream`` (each global
                batch comes from one stream) or ``device_per_stream`` (each device batch comes
                from one stream).
            memo: Where whole canonical-node orders are kept between runs (``random``
                batching; see :func:`~shardstream.sampling.sequence.sequence_ids`).
            stream_names: Each stream's URL or path, for errors (default: their numbers).

        Raises:
            ConfigurationError: An unknown batching method, a global batch that does not
                split over the ranks, or (``stratified``) a stream too small for one batch.

        Example:
            >>> plan = EpochPlan.for_worker(np.array([5, 5]), topology=Topology(),
            ...     num_canonical_nodes=1, global_batch_size=4, epoch=0, shuffle=ShuffleConfig())
            >>> [batch.tolist() for batch in plan.batches], plan.padding
            ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], 0)
            >>> ranks = Topology(ranks_per_node=4, rank=3)  # 10 samples over 4 ranks: 2 repeats
            >>> plan = EpochPlan.for_worker(np.array([5, 5]), topology=ranks,
            ...     num_canonical_nodes=1, global_batch_size=4, epoch=0, shuffle=ShuffleConfig())
            >>> [batch.tolist() for batch in plan.batches], plan.padding
            ([[3], [7], [1]], 2)
        """
        units = source if isinstance(source, EpochUnits) else EpochUnits.whole(source)
        partition = EpochPartition(
            epoch_size=units.epoch_size,
            num_canonical_nodes=num_canonical_nodes,
            global_batch_size=global_batch_size,
            drop_first=drop_first,
            ranks=topology.world_size,
        )
        batch_size = partition.device_batch_size
        if batching_method == "random":
            positions = partition.worker_positions(topology)
            ids = sequence_ids(units, positions, num_canonical_nodes=num_canonical_nodes,
                               epoch=epoch, shuffle=shuffle, memo=memo)  # fmt: skip
            return cls(ids, batch_size, partition.num_steps, partition.padding)
        builders: dict[str, Callable[..., StepBatches]] = {
            "device_per_stream": device_per_stream_batches,
            "per_stream": per_stream_batches,
            "stratified": stratified_batches,
        }
        build = builders.get(batching_method)
        if build is not None:
            batches = build(units, topology, global_batch_size, batch_size, drop_first,
                            num_canonical_nodes=num_canonical_nodes, epoch=epoch,
                            shuffle=shuffle, stream_names=stream_names)  # fmt: skip
        else:
            raise ConfigurationError(
                f"unknown batching_method {batching_method!r}; use one of "
                f"{', '.join(BATCHING_METHODS)}"
            )
        return cls(batches.ids.reshape(-1), batch_size, batches.num_steps, 0, batches.dropped)
