"""Petastorm's row predicates: which rows a reader yields.

``make_reader`` asks a predicate about each row (a dict of the fields it names, decoded);
``make_batch_reader`` asks it about each batch (a pandas DataFrame of those fields) and takes a
boolean Series or array back, as Petastorm does. The predicates here answer both; a predicate of
one's own (any object with ``get_fields()`` and ``do_include(values)``, Petastorm's included)
is asked as Petastorm would ask it.
"""

from __future__ import annotations

import abc
import hashlib
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from shardstream.errors import ConfigurationError

__all__ = [
    "PredicateBase",
    "in_intersection",
    "in_lambda",
    "in_negate",
    "in_pseudorandom_split",
    "in_reduce",
    "in_set",
    "predicate_mask",
]


class PredicateBase(abc.ABC):
    """A row predicate: the fields it reads, and whether rows with these values are kept.

    Example:
        class LongText(PredicateBase):
            def get_fields(self):
                return {"text"}

            def do_include(self, values):
                return len(values["text"]) > 100

        assert LongText().do_include({"text": "x" * 101})
    """

    @abc.abstractmethod
    def get_fields(self) -> set[str]:
        """The names of the fields :meth:`do_include` reads."""

    @abc.abstractmethod
    def do_include(self, values: Any) -> Any:
        """Whether to keep a row (``values``: a dict) or each row of a batch (a DataFrame)."""


def _is_frame(values: Any) -> bool:
    return hasattr(values, "columns") and hasattr(values, "iloc")


class in_set(PredicateBase):
    """Rows whose ``predicate_field`` is one of ``inclusion_values``.

    Example:
        keep = in_set({"cat", "dog"}, "label")
        assert keep.do_include({"label": "cat"}) and not keep.do_include({"label": "cow"})
    """

    def __init__(self, inclusion_values: Iterable[Any], predicate_field: str) -> None:
        self._inclusion_values = set(inclusion_values)
        self._predicate_field = predicate_field

    def get_fields(self) -> set[str]:
        """The one field."""
        return {self._predicate_field}

    def do_include(self, values: Any) -> Any:
        """Whether the field's value is in the set (a mask, for a DataFrame)."""
        column = values[self._predicate_field]
        if _is_frame(values):
            return column.map(lambda value: value in self._inclusion_values)
        return column in self._inclusion_values


class in_intersection(PredicateBase):
    """Rows whose list field ``predicate_field`` holds at least one of ``inclusion_values``.

    Example:
        keep = in_intersection(["cat"], "labels")
        assert keep.do_include({"labels": ["dog", "cat"]})
    """

    def __init__(self, inclusion_values: Iterable[Any], predicate_field: str) -> None:
        self._inclusion_values = list(inclusion_values)
        self._predicate_field = predicate_field

    def get_fields(self) -> set[str]:
        """The one field."""
        return {self._predicate_field}

    def do_include(self, values: Any) -> Any:
        """Whether the field's values meet the inclusion values (a mask, for a DataFrame)."""
        if _is_frame(values):
            return values[self._predicate_field].map(self._meets)
        return self._meets(values[self._predicate_field])

    def _meets(self, value: Any) -> bool:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ConfigurationError(
                f"in_intersection: field {self._predicate_field!r} holds {value!r}, not a list"
            )
        return bool(np.isin(np.asarray(list(value)), self._inclusion_values).any())


class in_lambda(PredicateBase):
    """Rows for which ``predicate_func(*fields[, state_arg])`` is true.

    For a batch, the function gets each field as a pandas Series and returns a mask, as in
    Petastorm.

    Example:
        keep = in_lambda(["width", "height"], lambda w, h: w * h > 1000)
        assert keep.do_include({"width": 40, "height": 30})
    """

    def __init__(
        self,
        predicate_fields: list[str],
        predicate_func: Callable[..., Any],
        state_arg: Any = None,
    ) -> None:
        if not isinstance(predicate_fields, list):
            raise ConfigurationError(
                f"in_lambda's predicate_fields must be a list of names, got {predicate_fields!r}"
            )
        self._predicate_fields = predicate_fields
        self._predicate_func = predicate_func
        self._state_arg = state_arg

    def get_fields(self) -> set[str]:
        """The fields the function takes."""
        return set(self._predicate_fields)

    def do_include(self, values: Any) -> Any:
        """The function of the fields' values (and the state, when given)."""
        args = [values[field] for field in self._predicate_fields]
        if self._state_arg is not None:
            args.append(self._state_arg)
        return self._predicate_func(*args)


class in_negate(PredicateBase):
    """Rows another predicate leaves out.

    Example:
        keep = in_negate(in_set({"cat"}, "label"))
        assert keep.do_include({"label": "dog"})
    """

    def __init__(self, predicate: Any) -> None:
        _check_predicate(predicate)
        self._predicate = predicate

    def get_fields(self) -> set[str]:
        """The other predicate's fields."""
        return set(self._predicate.get_fields())

    def do_include(self, values: Any) -> Any:
        """The other predicate's answer, negated."""
        if _is_frame(values):
            return ~predicate_mask(self._predicate, values)
        return not self._predicate.do_include(values)


class in_reduce(PredicateBase):
    """Rows for which ``reduce_func`` of several predicates' answers is true (``all``, ``any``).

    Example:
        keep = in_reduce([in_set({"cat"}, "label"), in_lambda(["w"], lambda w: w > 10)], all)
        assert keep.do_include({"label": "cat", "w": 11})
    """

    def __init__(self, predicate_list: Sequence[Any], reduce_func: Callable[[list[Any]], Any]):
        for predicate in predicate_list:
            _check_predicate(predicate)
        self._predicate_list = list(predicate_list)
        self._reduce_func = reduce_func

    def get_fields(self) -> set[str]:
        """Every predicate's fields."""
        return set().union(*(set(p.get_fields()) for p in self._predicate_list))

    def do_include(self, values: Any) -> Any:
        """``reduce_func`` of the answers (row by row, for a DataFrame)."""
        if _is_frame(values):
            masks = [predicate_mask(p, values) for p in self._predicate_list]
            rows = len(values)
            return np.fromiter(
                (bool(self._reduce_func([bool(m[k]) for m in masks])) for k in range(rows)),
                bool,
                count=rows,
            )
        return self._reduce_func([p.do_include(values) for p in self._predicate_list])


class in_pseudorandom_split(PredicateBase):
    """One subset of a fixed split of the rows, by the MD5 of ``predicate_field``'s text.

    ``fraction_list=[0.7, 0.3]`` with ``subset_index=1`` keeps about 30% of the rows, always
    the same ones: the rows Petastorm keeps (the same hash).

    Example:
        validation = in_pseudorandom_split([0.8, 0.2], 1, "id")
        picked = [i for i in range(1000) if validation.do_include({"id": i})]
        assert 100 < len(picked) < 300
    """

    def __init__(
        self, fraction_list: Sequence[float], subset_index: int, predicate_field: str
    ) -> None:
        if not 0 <= subset_index < len(fraction_list):
            raise ConfigurationError(
                f"in_pseudorandom_split: subset_index {subset_index} is out of range for "
                f"{len(fraction_list)} fractions"
            )
        self._predicate_field = predicate_field
        borders = np.cumsum(fraction_list).tolist()
        low = borders[subset_index - 1] if subset_index else 0.0
        self._bucket_low = low * (sys.maxsize - 1)
        self._bucket_high = borders[subset_index] * (sys.maxsize - 1)

    def get_fields(self) -> set[str]:
        """The one field."""
        return {self._predicate_field}

    def do_include(self, values: Any) -> Any:
        """Whether the value's hash falls in this subset (a mask, for a DataFrame)."""
        if _is_frame(values):
            return values[self._predicate_field].map(self._inside)
        if self._predicate_field not in values:
            raise ConfigurationError(
                f"in_pseudorandom_split: the row has no field {self._predicate_field!r}"
            )
        return self._inside(values[self._predicate_field])

    def _inside(self, value: Any) -> bool:
        digest = hashlib.md5(str(value).encode("utf-8"), usedforsecurity=False).hexdigest()
        bucket = int(digest, 16) % sys.maxsize
        return bool(self._bucket_low <= bucket < self._bucket_high)


def _check_predicate(predicate: Any) -> None:
    if not (hasattr(predicate, "get_fields") and hasattr(predicate, "do_include")):
        raise ConfigurationError(
            f"a predicate has get_fields() and do_include(values); got {predicate!r}"
        )


def predicate_mask(predicate: Any, frame: Any) -> Any:
    """``predicate``'s answer for each row of the DataFrame ``frame``, as a boolean array.

    Raises:
        ConfigurationError: The answer is not one boolean per row.
    """
    answer = predicate.do_include(frame)
    mask = np.asarray(answer)
    if mask.shape != (len(frame),):
        raise ConfigurationError(
            f"{type(predicate).__name__}.do_include answered {type(answer).__name__} of shape "
            f"{mask.shape} for a batch of {len(frame)} rows; make_batch_reader's predicates "
            f"take a pandas DataFrame and return one boolean per row (a Series)"
        )
    return mask.astype(bool)
