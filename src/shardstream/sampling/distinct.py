"""Distinct values of integer arrays, sorted, without ``np.unique``.

``np.unique`` asks ``numpy.ma`` whether its input is masked, which imports ``numpy.ma`` on its
first call in a process: an epoch plan's first call paid it inside every start-up and resume.
These do what ``np.unique`` does for plain arrays (a stable sort, then the first of each run of
equal values) and nothing else.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["distinct", "distinct_inverse", "first_occurrences"]


def distinct(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """The distinct values, sorted: ``np.unique(values)``.

    Example:
        >>> distinct(np.array([3, 1, 3, 2])).tolist()
        [1, 2, 3]
    """
    flat = np.ravel(values)
    if flat.size:
        low, high = int(flat.min()), int(flat.max())
        if high - low <= 4 * flat.size:  # values close together (a batch's shards): a count
            return np.flatnonzero(np.bincount(flat - low)).astype(flat.dtype) + low
    ordered = np.sort(flat)
    return ordered[_run_starts(ordered)]


def first_occurrences(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The distinct values, sorted, and where each first occurs in the flattened ``values``.

    The same as ``np.unique(values, return_index=True)``.

    Example:
        >>> [a.tolist() for a in first_occurrences(np.array([3, 1, 3, 2]))]
        [[1, 2, 3], [1, 3, 0]]
    """
    flat = np.ravel(values)
    if flat.size > 1:
        # Compared, not subtracted: a difference of two int64s can overflow and change sign.
        if bool((flat[1:] >= flat[:-1]).all()):  # in order (an unshuffled plan): run starts
            at = np.flatnonzero(_run_starts(flat))
            return flat[at], at
        if bool((flat[1:] <= flat[:-1]).all()):  # in reverse order: each run's start, reversed
            at = np.flatnonzero(_run_starts(flat))[::-1]
            return flat[at], at
        low, high = int(flat.min()), int(flat.max())
        span = high - low + 1
        if _PREFIX * span < flat.size // 4:  # many values drawn from few: a head may hold each
            found = _in_head(flat, low, span)
            if found is not None:
                return found
        if high - low < flat.size:  # few distinct values (shards): no sort, one pass
            first = np.full(span, flat.size, dtype=np.int64)
            np.minimum.at(first, flat - low, np.arange(flat.size))
            present = np.flatnonzero(first < flat.size)
            return (present + low).astype(flat.dtype), first[present]
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    starts = _run_starts(ordered)
    return ordered[starts], order[starts]


#: A head of this many values a distinct value is searched for first (see ``_in_head``).
_PREFIX = 8


def _in_head(
    flat: NDArray[np.int64], low: int, span: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]] | None:
    """:func:`first_occurrences` of ``flat`` from its head alone, if the head holds every value.

    A shuffled plan's shards each come up within its first batches: every value's first
    occurrence is then in a short head, and whether the head holds every value is told by
    the range (values ``low .. low + span - 1``, all in the head) or by one count of them,
    where the search of each position's value costs a slower pass. ``None`` otherwise.
    """
    head = flat[: _PREFIX * span]
    values, first = first_occurrences(head)
    if len(values) == span:  # every value of the range: nothing else can occur
        return values, first
    if len(values) == np.count_nonzero(np.bincount(flat - low, minlength=span)):
        return values, first
    return None


def distinct_inverse(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The distinct values, sorted, and each value's index among them.

    The same as ``np.unique(values, return_inverse=True)`` for a 1-D ``values``.

    Example:
        >>> [a.tolist() for a in distinct_inverse(np.array([3, 1, 3, 2]))]
        [[1, 2, 3], [2, 0, 2, 1]]
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = _run_starts(ordered)
    inverse = np.empty(len(values), dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return ordered[starts], inverse


def _run_starts(ordered: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Where each run of equal values in the sorted ``ordered`` begins."""
    starts = np.empty(len(ordered), dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return starts
