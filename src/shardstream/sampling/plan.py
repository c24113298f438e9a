"""One worker's samples for one epoch: the shuffle and the partition put together.

A worker computes only the canonical nodes its positions fall in (with ``NCN`` a multiple of
the node count, one node's worth per physical node), never the whole epoch, and shares nothing
with other processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.mixing import EpochUnits
from shardstream.sampling.partition import EpochPartition, interleave
from shardstream.sampling.shuffle import (
    SHUFFLE_ALGORITHMS,
    default_block_size,
    get_shuffle,
    shuffle_canonical_node,
)
from shardstream.sampling.spans import canonical_node_bounds, canonical_node_spans
from shardstream.sampling.topology import Topology

__all__ = ["EpochPlan", "ShuffleConfig", "canonical_node_order"]


@dataclass(frozen=True)
class ShuffleConfig:
    """How an epoch is shuffled.

    Args:
        shuffle: Shuffle at all; without it each canonical node reads its range in order.
        algo: One of ``naive``, ``py1b``, ``py1br``, ``py1e`` (default), ``py1s``, ``py2s``.
        seed: The run's seed (the reference's default is 9176).
        block_size: Shuffle block size in samples; ``None`` picks a default from NCN.
    """

    shuffle: bool = False
    algo: str = "py1e"
    seed: int = 9176
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.algo not in SHUFFLE_ALGORITHMS:
            raise ConfigurationError(
                f"unknown shuffle_algo {self.algo!r}; use one of {', '.join(SHUFFLE_ALGORITHMS)}"
            )


def canonical_node_order(
    shard_sizes: NDArray[np.int64],
    num_canonical_nodes: int,
    node: int,
    epoch: int,
    config: ShuffleConfig,
) -> NDArray[np.int64]:
    """Canonical node ``node``'s slice of the epoch order: global sample ids, in order."""
    sizes = np.asarray(shard_sizes, np.int64)
    if not config.shuffle:
        bounds = canonical_node_bounds(int(sizes.sum()), num_canonical_nodes)
        return np.arange(bounds[node], bounds[node + 1], dtype=np.int64)
    if config.algo == "naive":  # one global permutation: there is no smaller piece to compute
        bounds = canonical_node_bounds(int(sizes.sum()), num_canonical_nodes)
        order = get_shuffle("naive", sizes, num_canonical_nodes, config.seed, epoch)
        return order[bounds[node] : bounds[node + 1]]
    spans = canonical_node_spans(config.algo, sizes, num_canonical_nodes, config.seed, node)
    block = config.block_size or default_block_size(num_canonical_nodes)
    return shuffle_canonical_node(config.algo, spans, config.seed, epoch, block)


@dataclass(frozen=True)
class EpochPlan:
    """The samples one worker delivers in one epoch.

    Attributes:
        batches: ``[device batches, batch size]`` global sample ids; row ``i`` is the rank's
            device batch ``worker + i * workers_per_rank``.
        partition: The epoch's arithmetic (steps, padding).
    """

    batches: NDArray[np.int64]
    partition: EpochPartition

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
    ) -> EpochPlan:
        """Compute the plan of the worker ``topology`` points at.

        ``source`` is the epoch's units (from :func:`~shardstream.sampling.mixing.resample`),
        or just the shard sizes of one unweighted stream.

        Example:
            >>> plan = EpochPlan.for_worker(np.array([5, 5]), topology=Topology(),
            ...     num_canonical_nodes=1, global_batch_size=4, epoch=0, shuffle=ShuffleConfig())
            >>> plan.batches.tolist()
            [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
        """
        units = source if isinstance(source, EpochUnits) else EpochUnits.whole(source)
        sizes = units.sizes
        partition = EpochPartition(
            epoch_size=int(sizes.sum()),
            num_canonical_nodes=num_canonical_nodes,
            global_batch_size=global_batch_size,
            drop_first=drop_first,
        )
        positions = partition.worker_positions(topology)
        nodes, local = interleave(positions, partition.epoch_size, num_canonical_nodes)
        if shuffle.shuffle and shuffle.algo == "naive":  # one permutation serves every node
            bounds = canonical_node_bounds(partition.epoch_size, num_canonical_nodes)
            order = get_shuffle("naive", sizes, num_canonical_nodes, shuffle.seed, epoch)
            return cls(units.sample_ids(order[bounds[nodes] + local]), partition)
        batches = np.empty_like(positions)
        for node in np.unique(nodes).tolist():  # only the canonical nodes this worker reads
            order = canonical_node_order(sizes, num_canonical_nodes, node, epoch, shuffle)
            mask = nodes == node
            batches[mask] = order[local[mask]]
        return cls(units.sample_ids(batches), partition)
