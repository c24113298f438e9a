"""The epoch's order of samples over its units, and random access into it.

The epoch order interleaves the canonical nodes (see :mod:`shardstream.sampling.partition`);
within a canonical node the chosen shuffle decides the order. :func:`sequence_ids` looks up
any positions of that order, computing only the canonical nodes they fall in, and within each
only what those positions need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.mixing import EpochUnits
from shardstream.sampling.naive import naive_ids
from shardstream.sampling.node_order import node_ids
from shardstream.sampling.partition import interleave
from shardstream.sampling.shuffle import SHUFFLE_ALGORITHMS, default_block_size
from shardstream.sampling.spans import (
    WORD,
    RunLayout,
    canonical_node_bounds,
    check_int,
    check_shard_sizes,
    make_rng,
    node_span_table,
    run_layout,
)

__all__ = [
    "ORDER_VERSION",
    "NodeOrderMemo",
    "ShuffleConfig",
    "canonical_node_order",
    "node_order_at",
    "sequence_ids",
]

TAG_STREAM_SEED = 21  # [seed, stream, TAG]: the shuffle seed of one stream, batched per stream.

#: The version of every shuffle's output. Orders kept between runs (a
#: :class:`NodeOrderMemo`) are keyed by it: bump it whenever any algorithm's order changes
#: (``tests/unit/sampling/test_sequence.py`` pins them and says so).
ORDER_VERSION = 1

#: py1e orders a canonical node as a whole: a worker asking for ``1 / MEMO_SHARE`` of a node's
#: positions or more (a resumed run, few workers) asks a memo for the node's whole order.
MEMO_SHARE = 4
#: Nodes larger than this are never memoised: their whole order would cost a worker more
#: memory than its positions do.
MEMO_MAX_SAMPLES = 1 << 24


class NodeOrderMemo(Protocol):
    """Where whole canonical-node orders are kept between runs (the cache folder's).

    Called with a node, its size and a function computing its whole order; returns that
    order, kept from an earlier call (of this run or another) or computed now and kept.
    """

    def __call__(
        self, node: int, size: int, compute: Callable[[], NDArray[np.int64]]
    ) -> NDArray[np.int64]:
        """The node's whole order: ``size`` ids as ``compute()`` returns them (any int dtype)."""
        ...


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
    bounds = canonical_node_bounds(int(sizes.sum()), num_canonical_nodes)
    local = np.arange(bounds[node + 1] - bounds[node], dtype=np.int64)
    return node_order_at(sizes, num_canonical_nodes, node, epoch, config, local)


def node_order_at(
    shard_sizes: NDArray[np.int64],
    num_canonical_nodes: int,
    node: int,
    epoch: int,
    config: ShuffleConfig,
    local: NDArray[np.int64],
    layout: RunLayout | None = None,
) -> NDArray[np.int64]:
    """Global sample ids at positions ``local`` (any shape) of canonical node ``node``'s slice.

    Memory and, for ``naive``, ``py1s``, ``py2s``, ``py1b`` and ``py1br``, time follow the
    positions asked for, not the node's size (see :mod:`shardstream.sampling.node_order` and
    :mod:`shardstream.sampling.naive`).
    """
    sizes = np.asarray(shard_sizes, np.int64)
    bounds = canonical_node_bounds(int(sizes.sum()), num_canonical_nodes)
    if not config.shuffle:
        unshuffled: NDArray[np.int64] = bounds[node] + np.asarray(local, np.int64)
        return unshuffled
    seed = check_int("seed", config.seed, 0, WORD)
    epoch = check_int("epoch", epoch, 0, WORD)
    if config.algo == "naive":  # one global permutation, evaluated where asked
        return naive_ids(seed, epoch, int(bounds[-1]), bounds[node] + np.asarray(local, np.int64))
    block = check_int("block_size", config.block_size or default_block_size(num_canonical_nodes), 1)
    if layout is None:
        layout = run_layout(check_shard_sizes(sizes), num_canonical_nodes, seed)
    table = node_span_table(layout, node, seed, split_shuffled=config.algo == "py2s")
    return node_ids(config.algo, table, seed, epoch, block, local)


def sequence_ids(
    units: EpochUnits,
    positions: NDArray[np.int64],
    *,
    num_canonical_nodes: int,
    epoch: int,
    shuffle: ShuffleConfig,
    memo: NodeOrderMemo | None = None,
) -> NDArray[np.int64]:
    """Dataset sample ids at ``positions`` (any shape) of the epoch order over ``units``.

    Only the canonical nodes the positions fall in are computed, and within each only what
    those positions need: memory follows ``positions``, not the epoch. With ``memo``, a py1e
    node asked for a quarter of its positions or more is looked up there whole (computed and
    kept on a miss): a resumed run need not shuffle the node again.
    """
    sizes = units.sizes
    total = int(sizes.sum())
    if shuffle.shuffle and shuffle.algo == "naive":  # one permutation serves every node
        nodes, local = interleave(positions, total, num_canonical_nodes)
        bounds = canonical_node_bounds(total, num_canonical_nodes)
        seed = check_int("seed", shuffle.seed, 0, WORD)
        epoch = check_int("epoch", epoch, 0, WORD)
        return _to_ids(units, naive_ids(seed, epoch, total, bounds[nodes] + local))
    layout = None
    if shuffle.shuffle:
        seed = check_int("seed", shuffle.seed, 0, WORD)
        layout = run_layout(check_shard_sizes(sizes), num_canonical_nodes, seed)
    bounds = canonical_node_bounds(total, num_canonical_nodes)

    def look_up(node: int, at: NDArray[np.int64]) -> NDArray[np.int64]:
        size = int(bounds[node + 1] - bounds[node])
        if (
            memo is None
            or not shuffle.shuffle
            or shuffle.algo != "py1e"
            or size > MEMO_MAX_SAMPLES
            or MEMO_SHARE * len(at) < size
        ):
            return node_order_at(sizes, num_canonical_nodes, node, epoch, shuffle, at, layout)
        whole = np.arange(size, dtype=np.int64)
        order = memo(node, size, lambda: node_order_at(sizes, num_canonical_nodes, node, epoch,
                                                       shuffle, whole, layout))  # fmt: skip
        found: NDArray[np.int64] = order[at].astype(np.int64, copy=False)
        return found

    if num_canonical_nodes == 1 and positions.size:  # one node, every position where it is
        return _to_ids(
            units, look_up(0, np.array(positions, np.int64).ravel()).reshape(positions.shape)
        )
    nodes, local = interleave(positions, total, num_canonical_nodes)
    flat_nodes, flat_local = nodes.ravel(), local.ravel()
    big = np.empty(len(flat_nodes), dtype=np.int64)
    # Group the positions by node (a stable radix sort when NCN fits 16 bits), then look each
    # node's up at once: only the canonical nodes asked about are computed.
    counts = np.bincount(flat_nodes, minlength=num_canonical_nodes)
    asked = np.flatnonzero(counts).tolist()
    if len(asked) == 1:
        big = look_up(asked[0], flat_local)
        return _to_ids(units, big.reshape(positions.shape))
    key = flat_nodes.astype(np.uint16) if num_canonical_nodes <= 1 << 16 else flat_nodes
    by_node = np.argsort(key, kind="stable")
    del nodes, flat_nodes, key  # a worker's memory is a few arrays of its positions: keep few
    stop = 0
    for node in asked:
        start, stop = stop, stop + int(counts[node])
        where = by_node[start:stop]
        big[where] = look_up(node, flat_local[where])
    return _to_ids(units, big.reshape(positions.shape))


def _to_ids(units: EpochUnits, big: NDArray[np.int64]) -> NDArray[np.int64]:
    """Sample ids of the (freshly computed) positions ``big``, reusing it when they are equal."""
    return big if units.positions_are_ids else units.sample_ids(big)


def stream_shuffle(shuffle: ShuffleConfig, stream: int) -> ShuffleConfig:
    """The shuffle of one stream when streams are ordered separately: its own seed."""
    seed = int(make_rng(shuffle.seed, stream, TAG_STREAM_SEED).integers(0, 2**63))
    return replace(shuffle, seed=seed)
