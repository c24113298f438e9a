"""Which interval each value falls in: ``np.searchsorted(edges, values, side="right")``, faster.

A binary search over a few edges costs a mispredicted branch per level per value; for a
shuffled epoch's million ids over a few shards (or a node's slots over its spans) that search
was a visible part of an epoch's CPU time. When the distinct edges are at least ``2**s``
apart, cutting the range into buckets of ``2**s`` puts at most one distinct edge value inside
each bucket, so a value's answer is one of two numbers kept per bucket, picked by one
comparison: a few branch-free array passes instead of a search. Tables stay small (at most
about one entry per value looked up); anything else (few values, edges too close together, a
value outside the table) falls back to the search itself, so the answer never differs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["count_at_most"]

#: Below this many values the search itself is cheaper than building a table.
_FEW_VALUES = 2048


def count_at_most(
    edges: NDArray[np.int64], values: NDArray[np.integer[Any]], low: int = 0
) -> NDArray[np.int64]:
    """How many of ``edges`` are at most each value: ``np.searchsorted(edges, values, "right")``.

    Args:
        edges: Non-decreasing integers.
        values: Integers, any shape; the fast path takes those in ``[low, edges[-1])``.
        low: Where the table starts (values below it are searched for instead).

    Returns:
        An int64 array shaped like ``values``.

    Example:
        >>> count_at_most(np.array([0, 3, 3, 7]), np.array([0, 2, 3, 6])).tolist()
        [1, 1, 3, 3]
    """
    edges = np.asarray(edges, dtype=np.int64)
    values = np.asarray(values)
    table = _table(edges, values, low)
    if table is None:
        searched: NDArray[np.int64] = np.searchsorted(edges, values, side="right").astype(
            np.int64, copy=False
        )
        return searched
    shift, nexts, answers = table
    bucket = values >> shift if low == 0 else (values - low) >> shift
    # At most one distinct edge lies inside a bucket: the answer below it, or at and past it.
    past = values >= nexts[bucket]
    bucket <<= 1
    bucket += past
    result: NDArray[np.int64] = answers[bucket]
    return result


def _table(
    edges: NDArray[np.int64], values: NDArray[np.integer[Any]], low: int
) -> tuple[int, NDArray[np.int64], NDArray[np.int64]] | None:
    """``(shift, nexts, answers)``, or ``None`` where a search is the better way.

    ``nexts[b]``: the first edge above bucket ``b``'s first value; ``answers[2b]``: the edges at
    most that first value; ``answers[2b + 1]``: the edges at most the first value of the next
    bucket (those and the one distinct edge inside the bucket, if any).
    """
    if values.size < _FEW_VALUES or len(edges) < 2 or values.dtype.kind not in "iu":
        return None
    top = int(edges[-1])
    if top <= low or int(values.min()) < low or int(values.max()) >= top:
        return None
    distinct = edges[np.flatnonzero(np.diff(edges)) + 1]  # each value after the first
    distinct = np.concatenate([edges[:1], distinct]).astype(np.int64, copy=False)
    gap = int(np.diff(distinct).min()) if len(distinct) > 1 else top - low
    shift = max(0, gap.bit_length() - 1)  # 2**shift <= gap
    buckets = ((top - 1 - low) >> shift) + 1
    if buckets > values.size:  # the table would cost more than the search
        return None
    firsts = low + (np.arange(buckets + 1, dtype=np.int64) << shift)
    counts = np.searchsorted(edges, firsts, side="right").astype(np.int64)
    nexts = edges[counts[:-1]]  # a bucket begins below the top edge: one lies above it
    answers = np.stack([counts[:-1], counts[1:]], axis=1).reshape(-1)
    return shift, nexts, answers
