"""pyarrow's DNF filters (``[[('year', '>=', 2020), ...], ...]``), as Petastorm passes them.

A filter is a list of conjunctions, each a list of ``(column, op, value)`` terms; a row passes
when every term of some conjunction holds. A flat list of terms is one conjunction. The
operators are pyarrow's: ``=`` (or ``==``), ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in`` and
``not in``. A null matches no term, as in pyarrow.

Two uses: :meth:`Filters.may_match` says whether a file can hold a passing row from its
partition values alone (terms on other columns count as true), so whole files are skipped;
:meth:`Filters.row_mask` decides each row of a batch.

Pure: numpy only.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError

__all__ = ["Filters"]

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda value, allowed: value in allowed,
    "not in": lambda value, allowed: value not in allowed,
}

Term = tuple[str, str, Any]


@dataclass(frozen=True)
class Filters:
    """A disjunction of conjunctions of ``(column, op, value)`` terms.

    Example:
        >>> keep = Filters.parse([("year", ">=", 2021), ("kind", "in", {"a", "b"})])
        >>> keep.may_match({"year": 2020}), keep.may_match({"year": 2022})
        (False, True)
    """

    conjunctions: tuple[tuple[Term, ...], ...]

    @classmethod
    def parse(cls, filters: Sequence[Any]) -> Filters:
        """Filters in pyarrow's form: a list of terms, or a list of lists of terms.

        Raises:
            ConfigurationError: Not that form, an unknown operator, or ``in`` without a
                collection.
        """
        if isinstance(filters, (str, bytes)) or not isinstance(filters, Sequence) or not filters:
            raise ConfigurationError(
                f"filters must be a non-empty list of (column, op, value) tuples, or a list of "
                f"such lists (pyarrow's form), got {filters!r}"
            )
        nested = all(isinstance(item, list) for item in filters)
        groups = list(filters) if nested else [filters]
        return cls(tuple(tuple(_term(term) for term in group) for group in groups))

    @property
    def columns(self) -> set[str]:
        """Every column a term names."""
        return {term[0] for group in self.conjunctions for term in group}

    def may_match(self, known: Mapping[str, Any]) -> bool:
        """Whether rows with the ``known`` values (partition columns) can pass."""
        return any(
            all(_holds(term, known[term[0]]) for term in group if term[0] in known)
            for group in self.conjunctions
        )

    def row_mask(self, columns: Mapping[str, Sequence[Any]], rows: int) -> NDArray[np.bool_]:
        """Which of ``rows`` rows pass, given each named column's values.

        Raises:
            ConfigurationError: A term names a column that ``columns`` lacks.
        """
        missing = sorted(self.columns - columns.keys())
        if missing:
            raise ConfigurationError(
                f"filters name {', '.join(map(repr, missing))}, which the dataset does not "
                f"have; its columns are {', '.join(columns)}"
            )
        passing = np.zeros(rows, dtype=bool)
        for group in self.conjunctions:
            holds = np.ones(rows, dtype=bool)
            for term in group:
                values = columns[term[0]]
                holds &= np.fromiter((_holds(term, v) for v in values), bool, count=rows)
            passing |= holds
        return passing


def _term(term: Any) -> Term:
    if not isinstance(term, (tuple, list)) or len(term) != 3 or not isinstance(term[0], str):
        raise ConfigurationError(
            f"a filter term is a (column, op, value) tuple, got {term!r}; combine terms as "
            f"[[term, term], [term]] (an OR of ANDs)"
        )
    column, op, value = term
    if op not in _OPERATORS:
        raise ConfigurationError(
            f"filter {term!r}: unknown operator {op!r}; use one of {', '.join(_OPERATORS)}"
        )
    if op in ("in", "not in"):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ConfigurationError(f"filter {term!r}: {op!r} needs a list or set of values")
        value = frozenset(value)
    return (column, op, value)


def _holds(term: Term, value: Any) -> bool:
    """Whether ``value`` satisfies ``term`` (a null satisfies nothing)."""
    if value is None:
        return False
    _, op, wanted = term
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (int, float)) and isinstance(wanted, str):
        try:  # a partition value compared with its text, as pyarrow casts it
            wanted = type(value)(wanted)
        except ValueError:
            return False
    try:
        return bool(_OPERATORS[op](value, wanted))
    except TypeError:
        return False
