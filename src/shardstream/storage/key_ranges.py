"""Key ranges of a listing: where a listing is cut, and how one range is walked page by page.

A store that starts a listing after a key, in key order (S3's ``StartAfter``, GCS's
``startOffset``, OCI's ``startAfter``), can list the key space as ranges at once. The ranges
are half-open intervals ``(after, upto]`` cut at some keys (:func:`split_ranges`): the first
has no lower bound and the last no upper one, so that together they hold every key, each once,
whatever the cut points are and whatever keys lie outside them. A range is walked page by page
(:func:`walk_range`) from just after its lower bound, and stops at the page that crosses its
upper one. Both are pure: the store's pages come from a function, so that the cover can be
checked for any keys, cut points and page size (``tests/unit/storage/test_key_ranges.py``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shardstream.errors import StorageError

__all__ = [
    "KeyRange",
    "PageFunction",
    "range_index",
    "split_ranges",
    "upper_bounds",
    "walk_range",
]

_V = TypeVar("_V")

#: One page: ``(start_after, token) -> (objects, next token)``; ``start_after`` is given on the
#: first page only, and the last page's token is ``None``.
PageFunction = Callable[[str | None, str | None], tuple[Mapping[str, _V], str | None]]


@dataclass(frozen=True)
class KeyRange:
    """The keys ``k`` with ``after < k <= upto`` (``None``: no bound on that side).

    Attributes:
        after: The range's keys come after this one (``None``: from the first key).
        upto: ... up to and with this one (``None``: to the last key).
    """

    after: str | None = None
    upto: str | None = None

    def holds(self, key: str) -> bool:
        """Whether ``key`` lies in the range."""
        return (self.after is None or key > self.after) and (self.upto is None or key <= self.upto)


def split_ranges(keys: Sequence[str], keys_per_range: int) -> list[KeyRange]:
    """The key space cut into ranges of about ``keys_per_range`` of ``keys`` each, in key order.

    One range (the whole key space) when ``keys`` hold less than two ranges' worth. Keys that
    repeat count once; any keys cut the space correctly, and only the ranges' balance depends
    on them.
    """
    cuts = list(dict.fromkeys(sorted(keys)))  # names of an index come sorted: a linear sort
    ranges = len(cuts) // max(1, keys_per_range) + 1
    if ranges < 2:
        return [KeyRange()]
    bounds = sorted({cuts[len(cuts) * i // ranges] for i in range(1, ranges)})
    return [
        KeyRange(after, upto) for after, upto in zip([None, *bounds], [*bounds, None], strict=True)
    ]


def upper_bounds(ranges: Sequence[KeyRange]) -> list[str]:
    """The upper bounds of ``ranges`` (made by :func:`split_ranges`) but the last, which has none.

    What :func:`range_index` searches: made once for many keys.
    """
    return [r.upto for r in ranges[:-1] if r.upto is not None]


def range_index(uppers: Sequence[str], key: str) -> int:
    """The position of the range holding ``key``, given the ranges' :func:`upper_bounds`."""
    return bisect.bisect_left(uppers, key)


def walk_range(
    page: PageFunction[_V], key_range: KeyRange, *, max_pages: int, what: str
) -> dict[str, _V]:
    """The objects of ``key_range``, listed page by page from just after its lower bound.

    Keys a server repeats from before the start (one that ignored it) or lists past the upper
    bound are left out, so that a range holds its own keys only; the walk stops at the page
    that reaches the upper bound, as the keys come in order.

    Args:
        page: Lists one page (see :data:`PageFunction`).
        key_range: The range.
        max_pages: The most pages a range may take (a bound no real listing reaches).
        what: The listed URL, for the message of a listing that never ends.

    Raises:
        StorageError: More than ``max_pages`` pages (a server that always says there is more).
    """
    after, upto = key_range.after, key_range.upto
    found: dict[str, _V] = {}
    token: str | None = None
    for _ in range(max_pages):
        listed, token = page(after if token is None else None, token)
        found.update(
            (key, value)
            for key, value in listed.items()
            if (after is None or key > after) and (upto is None or key <= upto)
        )
        if upto is not None and listed and max(listed) >= upto:
            return found  # listed in key order: the rest lies past the range
        if token is None:
            return found
    raise StorageError(
        f"listing {what} gave more than {max_pages} pages: stopped, as a server that always "
        "says there is more would never let a listing end"
    )
