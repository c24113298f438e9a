"""The epoch's order of samples over its units, and random access into it.

The epoch order interleaves the canonical nodes (see :mod:`shardstream.sampling.partition`);
within a canonical node the chosen shuffle decides the order. :func:`sequence_ids` looks up
any positions of that order, computing only the canonical nodes they fall in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.mixing import EpochUnits
from shardstream.sampling.partition import interleave
from shardstream.sampling.shuffle import (
    SHUFFLE_ALGORITHMS,
    default_block_size,
    get_shuffle,
    shuffle_canonical_node,
)
from shardstream.sampling.spans import canonical_node_bounds, canonical_node_spans, make_rng

__all__ = ["ShuffleConfig", "canonical_node_order", "sequence_ids"]

TAG_STREAM_SEED = 21  # [seed, stream, TAG]: the shuffle seed of one stream, batched per stream.


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


def sequence_ids(
    units: EpochUnits,
    positions: NDArray[np.int64],
    *,
    num_canonical_nodes: int,
    epoch: int,
    shuffle: ShuffleConfig,
) -> NDArray[np.int64]:
    """Dataset sample ids at ``positions`` (any shape) of the epoch order over ``units``."""
    sizes = units.sizes
    total = int(sizes.sum())
    nodes, local = interleave(positions, total, num_canonical_nodes)
    if shuffle.shuffle and shuffle.algo == "naive":  # one permutation serves every node
        bounds = canonical_node_bounds(total, num_canonical_nodes)
        order = get_shuffle("naive", sizes, num_canonical_nodes, shuffle.seed, epoch)
        return units.sample_ids(order[bounds[nodes] + local])
    big = np.empty_like(positions)
    for node in np.unique(nodes).tolist():  # only the canonical nodes asked about
        order = canonical_node_order(sizes, num_canonical_nodes, node, epoch, shuffle)
        mask = nodes == node
        big[mask] = order[local[mask]]
    return units.sample_ids(big)


def stream_shuffle(shuffle: ShuffleConfig, stream: int) -> ShuffleConfig:
    """The shuffle of one stream when streams are ordered separately: its own seed."""
    seed = int(make_rng(shuffle.seed, stream, TAG_STREAM_SEED).integers(0, 2**63))
    return replace(shuffle, seed=seed)
