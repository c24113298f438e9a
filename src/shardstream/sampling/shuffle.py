"""Shuffle algorithms: which sample goes to which epoch position.

``get_shuffle(algo, shard_sizes, ...)`` returns a permutation ``perm`` of
``arange(sum(shard_sizes))``: ``perm[t]`` is the global sample id placed at epoch position ``t``.
The algorithms, named as in mosaicml-streaming:

* ``naive``: one global (keyed pseudo-random) permutation per epoch; every node touches every
  shard. See :mod:`shardstream.sampling.naive`.
* ``py1s``: per canonical node, the span order and the samples within each span are shuffled.
* ``py2s``: ``py1s``, with each shard's samples also shuffled once per run before it is split.
* ``py1b``: per canonical node, span order shuffled, then samples shuffled within consecutive
  blocks of ``block_size`` positions.
* ``py1br``: ``py1b`` with block sizes drawn from ``[0.75B, 1.25B)`` and the node's first
  block boundary staggered by ``[0, 0.75B)``.
* ``py1e`` (the default): ``py1s``, then each span's samples are spread over a window of about
  ``block_size`` positions by random shifts, clipped to the node.

Every algorithm but ``naive`` keeps each canonical node's samples inside that node's positions
(see :mod:`shardstream.sampling.spans`), and a node's slice of the permutation is a function of
that node's spans alone: :func:`shuffle_canonical_node` computes it without the other nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.naive import naive_ids
from shardstream.sampling.node_order import node_ids
from shardstream.sampling.spans import (
    SPAN_ALGORITHMS,
    WORD,
    NodeSpans,
    SpanTable,
    canonical_node_bounds,
    canonical_node_spans,
    check_int,
    check_shard_sizes,
    node_span_table,
    run_layout,
)

__all__ = [
    "DEFAULT_SHUFFLE_ALGORITHM",
    "SHUFFLE_ALGORITHMS",
    "NodeSpans",
    "ShuffleFunction",
    "canonical_node_bounds",
    "canonical_node_spans",
    "default_block_size",
    "get_shuffle",
    "shuffle_canonical_node",
]

DEFAULT_SHUFFLE_ALGORITHM = "py1e"

ShuffleFunction = Callable[[NDArray[np.int64], int, int, int, "int | None"], NDArray[np.int64]]
"""``(shard_sizes, num_canonical_nodes, seed, epoch, block_size) -> permutation``."""


def default_block_size(num_canonical_nodes: int) -> int:
    """The default shuffle block size: ``max(4_000_000 // NCN, 1 << 18)``."""
    ncn = check_int("num_canonical_nodes", num_canonical_nodes, 1)
    return max(4_000_000 // ncn, 1 << 18)


def shuffle_canonical_node(
    algo: str, spans: NodeSpans, seed: int, epoch: int, block_size: int
) -> NDArray[np.int64]:
    """One canonical node's slice of the epoch's permutation, from that node's spans alone.

    ``get_shuffle(algo, ...)[b[c]:b[c + 1]]`` equals
    ``shuffle_canonical_node(algo, canonical_node_spans(algo, ..., node=c), seed, epoch, B)``,
    with ``b = canonical_node_bounds(...)``, so a worker can compute only its own nodes.

    Args:
        algo: A span-based shuffle: ``py1b``, ``py1br``, ``py1e``, ``py1s`` or ``py2s``.
        spans: The node's spans, from :func:`canonical_node_spans` with the same ``algo``.
        seed: The run's shuffle seed, in ``0 .. 2**64 - 1``.
        epoch: The epoch, in ``0 .. 2**64 - 1``.
        block_size: Shuffle block size ``B`` in samples (ignored by ``py1s`` and ``py2s``).

    Returns:
        The global sample ids for the node's positions, in epoch order (int64).

    Raises:
        ConfigurationError: ``algo`` is not span-based, or an argument is out of range.
    """
    if algo not in SPAN_ALGORITHMS:
        raise ConfigurationError(
            f"shuffle algorithm {algo!r} does not shuffle per canonical node; "
            f"use one of {', '.join(SPAN_ALGORITHMS)}"
        )
    seed = check_int("seed", seed, 0, WORD)
    epoch = check_int("epoch", epoch, 0, WORD)
    block_size = check_int("block_size", block_size, 1)
    everything = np.arange(len(spans.samples), dtype=np.int64)
    return node_ids(algo, SpanTable.of(spans), seed, epoch, block_size, everything)


def _check_all(
    shard_sizes: NDArray[np.int64],
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int | None,
) -> tuple[NDArray[np.int64], int, int, int, int]:
    sizes = check_shard_sizes(shard_sizes)
    ncn = check_int("num_canonical_nodes", num_canonical_nodes, 1)
    seed = check_int("seed", seed, 0, WORD)
    epoch = check_int("epoch", epoch, 0, WORD)
    if block_size is None:
        block_size = default_block_size(ncn)
    return sizes, ncn, seed, epoch, check_int("block_size", block_size, 1)


def _shuffle_naive(
    shard_sizes: NDArray[np.int64],
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int | None = None,
) -> NDArray[np.int64]:
    """``naive``: one global permutation per epoch (NCN and block size play no part)."""
    sizes, _, seed, epoch, _ = _check_all(shard_sizes, num_canonical_nodes, seed, epoch, block_size)
    total = int(sizes.sum())
    return naive_ids(seed, epoch, total, np.arange(total, dtype=np.int64))


def _span_shuffle(algo: str) -> ShuffleFunction:
    """The whole-epoch function for a span-based algorithm: its nodes' slices, end to end."""

    def shuffle(
        shard_sizes: NDArray[np.int64],
        num_canonical_nodes: int,
        seed: int,
        epoch: int,
        block_size: int | None = None,
    ) -> NDArray[np.int64]:
        sizes, ncn, seed, epoch, block = _check_all(
            shard_sizes, num_canonical_nodes, seed, epoch, block_size
        )
        layout = run_layout(sizes, ncn, seed)
        perm = np.empty(int(layout.bounds[-1]), dtype=np.int64)
        for node in range(ncn):
            table = node_span_table(layout, node, seed, split_shuffled=algo == "py2s")
            low, high = layout.bounds[node], layout.bounds[node + 1]
            perm[low:high] = node_ids(algo, table, seed, epoch, block, np.arange(high - low))
        return perm

    shuffle.__name__ = shuffle.__qualname__ = f"shuffle_{algo}"
    shuffle.__doc__ = f"``{algo}``: see :mod:`shardstream.sampling.shuffle`."
    return shuffle


SHUFFLE_ALGORITHMS: MappingProxyType[str, ShuffleFunction] = MappingProxyType(
    {"naive": _shuffle_naive} | {algo: _span_shuffle(algo) for algo in SPAN_ALGORITHMS}
)
"""Every shuffle algorithm by name, sorted; read-only."""


def get_shuffle(
    algo: str,
    shard_sizes: NDArray[np.int64],
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int | None = None,
) -> NDArray[np.int64]:
    """The epoch's order of samples under shuffle ``algo``.

    Args:
        algo: One of :data:`SHUFFLE_ALGORITHMS` (``naive``, ``py1b``, ``py1br``, ``py1e``,
            ``py1s``, ``py2s``).
        shard_sizes: Samples per shard, in dataset order (non-negative integers).
        num_canonical_nodes: Canonical nodes (NCN), at least 1.
        seed: The run's shuffle seed, in ``0 .. 2**64 - 1``; fixes the shard order for the run.
        epoch: The epoch, in ``0 .. 2**64 - 1``.
        block_size: Shuffle block size in samples, at least 1; ``None`` means
            :func:`default_block_size` of NCN.

    Returns:
        An int64 permutation of ``arange(sum(shard_sizes))``: element ``t`` is the global sample
        id (in dataset order) placed at epoch position ``t``.

    Raises:
        ConfigurationError: ``algo`` is unknown, or an argument is out of range.

    Example:
        >>> perm = get_shuffle("py1s", np.array([3, 3]), 1, seed=0, epoch=0)
        >>> sorted(perm.tolist())
        [0, 1, 2, 3, 4, 5]
    """
    function = SHUFFLE_ALGORITHMS.get(algo) if isinstance(algo, str) else None
    if function is None:
        raise ConfigurationError(
            f"unknown shuffle algorithm {algo!r}; valid names are: {', '.join(SHUFFLE_ALGORITHMS)}"
        )
    return function(shard_sizes, num_canonical_nodes, seed, epoch, block_size)
