"""pyarrow's DNF filters: whole files skipped by partition values, rows decided one by one."""

from __future__ import annotations

import operator
import re
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardstream.errors import ConfigurationError
from shardstream.tables.filters import Filters


def test_a_flat_list_is_one_conjunction_and_nested_lists_an_or_of_ands():
    flat = Filters.parse([("y", ">=", 2021), ("k", "in", ["a", "b"])])
    assert len(flat.conjunctions) == 1
    nested = Filters.parse([[("y", "=", 2020)], [("k", "==", "c")]])
    assert len(nested.conjunctions) == 2
    assert nested.columns == {"y", "k"}


def test_may_match_treats_unknown_columns_as_true():
    keep = Filters.parse([[("y", "=", 2020), ("score", ">", 3)], [("k", "not in", {"x"})]])
    assert keep.may_match({"y": 2020, "k": "x"})  # score unknown: the file may hold a match
    assert not keep.may_match({"y": 2021, "k": "x"})
    assert keep.may_match({"y": 2021, "k": "a"})


def test_a_text_value_compares_with_an_integer_column_as_pyarrow_casts_it():
    assert Filters.parse([("y", "=", "2020")]).may_match({"y": 2020})
    assert not Filters.parse([("y", "<", "x")]).may_match({"y": 2020})


def test_row_mask_decides_each_row_and_nulls_never_pass():
    keep = Filters.parse([[("a", ">", 1), ("b", "!=", "z")], [("a", "=", 0)]])
    columns = {"a": [0, 1, 2, 3, None, np.int32(5)], "b": ["z", "y", "z", "y", "y", "q"]}
    assert keep.row_mask(columns, 6).tolist() == [True, False, False, True, False, True]


def test_row_mask_names_a_missing_column():
    with pytest.raises(ConfigurationError, match=r"'c'.*its columns are a"):
        Filters.parse([("c", "=", 1)]).row_mask({"a": [1]}, 1)


@pytest.mark.parametrize(
    "bad",
    ["y = 1", [], [("y", "~", 1)], [("y", "=")], [("y", "in", 3)], [("y", "in", "abc")]],
)
def test_malformed_filters_are_refused(bad: Any):
    with pytest.raises(ConfigurationError):
        Filters.parse(bad)


OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
       ">": operator.gt, ">=": operator.ge}  # fmt: skip
terms = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(sorted(OPS)), st.integers(0, 4))


@given(
    st.lists(st.lists(terms, min_size=1, max_size=3), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4) | st.none()), max_size=20),
)
def test_row_mask_is_the_or_of_ands_and_may_match_never_skips_a_passing_row(
    groups: list[list[tuple[str, str, int]]], rows: list[tuple[int, int | None]]
):
    keep = Filters.parse(groups)
    columns: dict[str, list[Any]] = {"a": [a for a, _ in rows], "b": [b for _, b in rows]}

    def passes(a: int, b: int | None) -> bool:
        values: dict[str, Any] = {"a": a, "b": b}
        return any(
            all(values[c] is not None and OPS[op](values[c], v) for c, op, v in group)
            for group in groups
        )

    mask = keep.row_mask(columns, len(rows))
    assert mask.tolist() == [passes(a, b) for a, b in rows]
    for (a, _), passed in zip(rows, mask, strict=True):
        if passed:  # "a" as a partition column: its file is never skipped
            assert keep.may_match({"a": a})


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        ("int64", "7", 7),
        ("int32", "-3", -3),
        ("double", "1.5", 1.5),
        ("bool", "TRUE", True),
        ("date32[day]", "2026-11-01", date(2026, 11, 1)),
        ("timestamp[us]", "2026-11-01T12:00:00", datetime(2026, 11, 1, 12)),
        ("timestamp[us, tz=UTC]", "2026-11-01T12:00:00Z",
         datetime(2026, 11, 1, 12, tzinfo=timezone.utc)),
        ("decimal128(5, 2)", "1.20", Decimal("1.20")),
        ("string", "2026-11-01", "2026-11-01"),
    ],
)  # fmt: skip
def test_text_on_a_typed_partition_column_reads_as_its_type(kind: str, text: str, value: Any):
    for op, matches in [("=", True), ("!=", False), ("in", True)]:
        wanted: Any = [text] if op == "in" else text
        keep = Filters.parse([("p", op, wanted)]).typed({"p": kind})
        assert keep.may_match({"p": value}) is matches, (kind, op)


def test_timestamps_of_either_zone_kind_compare_in_utc():
    zoned = Filters.parse([("t", ">=", datetime(2026, 1, 1, 12))]).typed(
        {"t": "timestamp[us, tz=UTC]"}
    )
    assert zoned.may_match({"t": datetime(2026, 1, 1, 12, tzinfo=timezone.utc)})
    local = Filters.parse([("t", "<", "2026-01-01T13:00:00+02:00")]).typed({"t": "timestamp[us]"})
    assert local.may_match({"t": datetime(2026, 1, 1, 10, 59)})
    assert not local.may_match({"t": datetime(2026, 1, 1, 11)})


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("int64", "x"),
        ("int64", "1.5"),
        ("date32[day]", "yesterday"),
        ("date32[day]", datetime(2026, 1, 1)),
        ("bool", "yes"),
        ("string", date(2026, 11, 1)),
        ("string", 2024),
        ("timestamp[us]", date(2026, 1, 1)),
    ],
)
def test_a_value_that_does_not_read_as_the_column_type_is_an_error_naming_it(kind: str, value: Any):
    with pytest.raises(
        ConfigurationError, match=rf"'p' is a partition column of type {re.escape(kind)}"
    ):
        Filters.parse([[("q", "=", 1)], [("p", "in", ["2026-01-01", value])]]).typed({"p": kind})


def test_terms_on_other_columns_are_left_as_given():
    keep = Filters.parse([("p", "=", "1"), ("q", "=", "x")]).typed({"p": "int64"})
    assert keep.conjunctions == ((("p", "=", 1), ("q", "=", "x")),)
