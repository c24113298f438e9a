"""Key ranges of a listing: for any keys, cut points and page size, every key once."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardstream.errors import StorageError
from shardstream.storage.key_ranges import (
    KeyRange,
    range_index,
    split_ranges,
    upper_bounds,
    walk_range,
)

NAMES = st.text(alphabet="ab/.0é~", max_size=5)


class Server:
    """A listing server over sorted keys, with pages of ``size`` keys.

    ``start``: how it takes a start key: ``"after"`` (S3's ``StartAfter``), ``"from"`` (GCS's
    ``startOffset``, inclusive) or ``"ignored"`` (a server that lists from the first key).
    """

    def __init__(self, keys: list[str], size: int, start: str) -> None:
        self.keys = sorted(keys)
        self.size = size
        self.start = start
        self.pages = 0

    def page(
        self, start_after: str | None, token: str | None
    ) -> tuple[Mapping[str, int], str | None]:
        self.pages += 1
        if token is not None:
            first = int(token)
        elif start_after is None or self.start == "ignored":
            first = 0
        elif self.start == "from":
            first = bisect.bisect_left(self.keys, start_after)
        else:
            first = bisect.bisect_right(self.keys, start_after)
        chunk = self.keys[first : first + self.size]
        following = first + self.size
        token = str(following) if following < len(self.keys) else None
        return {key: self.keys.index(key) for key in chunk}, token


@settings(max_examples=400, deadline=None)
@example(keys=[], cuts=[], per_range=1, size=1, start="after")
@example(keys=["a", "b"], cuts=["a", "a", "b"], per_range=1, size=1, start="after")
@example(keys=["b"], cuts=["a", "c", "~"], per_range=1, size=2, start="from")  # empty ranges
@given(
    keys=st.lists(NAMES, unique=True, max_size=30),
    cuts=st.lists(NAMES, max_size=12),
    per_range=st.integers(1, 4),
    size=st.integers(1, 7),
    start=st.sampled_from(["after", "from", "ignored"]),
)
def test_the_ranges_are_a_disjoint_cover_of_the_sorted_keys(
    keys: list[str], cuts: list[str], per_range: int, size: int, start: str
):
    """Keys before the first cut, past the last, between cuts, and empty ranges: each once."""
    ranges = split_ranges(cuts, per_range)
    assert ranges[0].after is None
    assert ranges[-1].upto is None
    for left, right in itertools.pairwise(ranges):  # contiguous, in key order
        assert left.upto is not None
        assert left.upto == right.after
        assert left.after is None or left.after < left.upto
    server = Server(keys, size, start)
    parts = [walk_range(server.page, r, max_pages=1000, what="mem://") for r in ranges]
    seen: list[str] = []
    for number, (key_range, part) in enumerate(zip(ranges, parts, strict=True)):
        for key, value in part.items():
            assert key_range.holds(key)
            assert range_index(upper_bounds(ranges), key) == number
            assert value == server.keys.index(key)
        seen.extend(sorted(part))
    assert seen == sorted(keys)  # disjoint (no key twice) and a cover (none missing), in order
    for key in keys:
        assert sum(r.holds(key) for r in ranges) == 1


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(NAMES, unique=True, min_size=1, max_size=40),
    per_range=st.integers(1, 5),
    size=st.integers(1, 6),
)
def test_a_range_stops_at_the_page_that_crosses_its_end(keys: list[str], per_range: int, size: int):
    """Cut at the keys themselves, a range asks only the pages its own keys need, and one more."""
    ranges = split_ranges(keys, per_range)
    for key_range in ranges:
        server = Server(keys, size, "after")
        part = walk_range(server.page, key_range, max_pages=1000, what="mem://")
        assert server.pages <= len(part) // size + 1


def test_too_few_cut_points_make_one_range_and_repeats_count_once():
    assert split_ranges(["a"] * 50, 10) == [KeyRange()]
    assert split_ranges([], 1) == [KeyRange()]
    assert split_ranges(["b", "a", "c", "b"], 1) == [
        KeyRange(None, "a"),
        KeyRange("a", "b"),
        KeyRange("b", "c"),
        KeyRange("c", None),
    ]
    assert range_index(upper_bounds([KeyRange()]), "anything") == 0


def test_a_listing_that_never_ends_is_stopped():
    def endless(start_after: str | None, token: str | None) -> tuple[dict[str, int], str]:
        return {}, "again"

    with pytest.raises(StorageError, match="more than 5 pages"):
        walk_range(endless, KeyRange("a", "b"), max_pages=5, what="mem://r/")
