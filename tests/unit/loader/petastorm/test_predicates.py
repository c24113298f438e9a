"""Petastorm's predicates answer a row (a dict) and a batch (a DataFrame) alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm.predicates import (
    PredicateBase,
    in_intersection,
    in_lambda,
    in_negate,
    in_pseudorandom_split,
    in_reduce,
    in_set,
    predicate_mask,
)

rows = st.lists(
    st.fixed_dictionaries(
        {
            "a": st.integers(0, 5),
            "tags": st.lists(st.integers(0, 5), max_size=3),
            "name": st.sampled_from(["x", "y", "z"]),
        }
    ),
    min_size=1,
    max_size=30,
)


def predicates() -> list[Any]:
    small = in_lambda(["a"], lambda a: a < 3)
    return [
        in_set({1, 4}, "a"),
        in_intersection([2, 5], "tags"),
        small,
        in_lambda(["a"], lambda a, limit: a > limit, 2),
        in_negate(in_set({"x"}, "name")),
        in_reduce([in_set({1, 2, 3}, "a"), in_negate(small)], all),
        in_reduce([in_set({"z"}, "name"), small], any),
        in_pseudorandom_split([0.5, 0.5], 1, "a"),
    ]


@given(rows)
def test_a_batch_gets_the_answers_its_rows_get(data: list[dict[str, Any]]):
    frame = pd.DataFrame({"a": [r["a"] for r in data], "tags": [r["tags"] for r in data],
                          "name": [r["name"] for r in data]})  # fmt: skip
    for predicate in predicates():
        one_by_one = [bool(predicate.do_include(row)) for row in data]
        assert predicate_mask(predicate, frame).tolist() == one_by_one, predicate


def test_pseudorandom_subsets_split_the_rows_and_repeat():
    values = [{"id": i} for i in range(2000)]
    subsets = [in_pseudorandom_split([0.6, 0.3, 0.1], k, "id") for k in range(3)]
    counts = [sum(bool(s.do_include(v)) for v in values) for s in subsets]
    assert sum(counts) == 2000
    assert all(sum(bool(s.do_include(v)) for s in subsets) == 1 for v in values)
    assert 1100 < counts[0] < 1300
    assert 500 < counts[1] < 700
    assert [bool(subsets[0].do_include(v)) for v in values[:50]] == [
        bool(in_pseudorandom_split([0.6, 0.3, 0.1], 0, "id").do_include(v)) for v in values[:50]
    ]


def test_fields_are_collected_through_combinations():
    combined = in_reduce([in_set({1}, "a"), in_negate(in_lambda(["b", "c"], max))], all)
    assert combined.get_fields() == {"a", "b", "c"}


def test_a_predicate_of_ones_own_is_asked_as_petastorm_asks_it():
    class Even(PredicateBase):
        def get_fields(self) -> set[str]:
            return {"a"}

        def do_include(self, values: Any) -> Any:
            return values["a"] % 2 == 0

    frame = pd.DataFrame({"a": [1, 2, 4]})
    assert predicate_mask(Even(), frame).tolist() == [False, True, True]
    assert predicate_mask(in_negate(Even()), frame).tolist() == [True, False, False]


def test_a_batch_answer_must_be_one_boolean_per_row():
    with pytest.raises(ConfigurationError, match="one boolean per row"):
        predicate_mask(in_lambda(["a"], lambda a: True), pd.DataFrame({"a": [1, 2]}))


@pytest.mark.parametrize(
    "make",
    [
        lambda: in_lambda("a", bool),  # type: ignore[arg-type]
        lambda: in_negate(object()),
        lambda: in_reduce([in_set({1}, "a"), 3], all),
        lambda: in_pseudorandom_split([0.5], 1, "a"),
    ],
)
def test_bad_predicates_are_refused(make: Any):
    with pytest.raises(ConfigurationError):
        make()


def test_in_intersection_wants_a_list():
    with pytest.raises(ConfigurationError, match="not a list"):
        in_intersection([1], "a").do_include({"a": 1})
    assert in_intersection([1], "a").do_include({"a": np.array([0, 1])})
