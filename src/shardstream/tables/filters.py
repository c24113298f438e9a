"""pyarrow's DNF filters (``[[('year', '>=', 2020), ...], ...]``), as Petastorm passes them.

A filter is a list of conjunctions, each a list of ``(column, op, value)`` terms; a row passes
when every term of some conjunction holds. A flat list of terms is one conjunction. The
operators are pyarrow's: ``=`` (or ``==``), ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in`` and
``not in``. A null matches no term, as in pyarrow.

Two uses: :meth:`Filters.may_match` says whether a file can hold a passing row from its
partition values alone (terms on other columns count as true), so whole files are skipped;
:meth:`Filters.row_mask` decides each row of a batch.

A term on a partition column compares values of the column's type: :meth:`Filters.typed` reads
each such term's value as that type once, before any file is matched, as deltalake's partition
filters do (``"2026-11-01"`` is a date for a ``date32`` column, ``"7"`` an integer for an
``int64`` one; pyarrow refuses to compare text with a number or a date). A value that is not of
the type and does not read as it is an error naming the column and its type, as in both: it
would otherwise match no file, silently.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import datetime as dt
import decimal
import operator
import re
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

    def typed(self, types: Mapping[str, str]) -> Filters:
        """These filters with each term on a column of ``types`` holding a value of its type.

        Args:
            types: The partition columns' Arrow types, as text (``'int64'``, ``'date32[day]'``,
                ``'timestamp[us, tz=UTC]'``, ``'string'``...).

        Raises:
            ConfigurationError: A value is not of its column's type and does not read as one
                (text on a number column that is not a number, a date on a text column...).

        Example:
            >>> day = Filters.parse([("day", ">=", "2026-11-01")]).typed({"day": "date32[day]"})
            >>> day.may_match({"day": dt.date(2026, 11, 2)})
            True
        """
        return Filters(
            tuple(
                tuple(_typed_term(term, types[term[0]]) if term[0] in types else term
                      for term in group)
                for group in self.conjunctions
            )
        )  # fmt: skip

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


def _typed_term(term: Term, kind: str) -> Term:
    """``term`` with its value (each value of ``in``) read as the Arrow type ``kind``."""
    column, op, value = term
    if op in ("in", "not in"):
        return (column, op, frozenset(_typed_value(term, item, kind) for item in value))
    return (column, op, _typed_value(term, value, kind))


def _typed_value(term: Term, value: Any, kind: str) -> Any:
    try:
        return _as_type(value, kind)
    except (ValueError, TypeError, ArithmeticError):
        raise ConfigurationError(
            f"filter {term!r}: {term[0]!r} is a partition column of type {kind}, and "
            f"{value!r} ({type(value).__name__}) is not one and does not read as one; give "
            f"{_EXAMPLES.get(_family(kind), 'a value of that type')}"
        ) from None


# What a filter value of each kind of column may be, for the error that a value is not one.
_EXAMPLES = {
    "int": "an int, or text of one ('7')",
    "float": "a number, or text of one ('1.5')",
    "bool": "True or False, or 'true' or 'false'",
    "date": "a datetime.date, or ISO text ('2026-11-01')",
    "timestamp": "a datetime.datetime, or ISO text ('2026-11-01T12:00:00')",
    "decimal": "a Decimal or int, or text of one ('1.20')",
    "string": "text (as the values are written in the folder names)",
}
_INTEGER_TYPE = re.compile(r"u?int(8|16|32|64)")


def _family(kind: str) -> str:
    if _INTEGER_TYPE.fullmatch(kind):
        return "int"
    if kind in ("halffloat", "float", "double"):
        return "float"
    if kind in ("string", "large_string", "string_view"):
        return "string"
    for family in ("bool", "date", "timestamp", "decimal"):
        if kind.startswith(family):
            return family
    return "other"


def _as_type(value: Any, kind: str) -> Any:
    """``value`` as a value of the Arrow type ``kind`` (``None`` stays: it matches nothing).

    Raises:
        ValueError: It is not of the type and does not read as one.
    """
    family = _family(kind)
    if value is None or family == "other":
        return value
    if isinstance(value, np.generic):
        value = value.item()
    text = isinstance(value, str)
    number = isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)
    if family == "int" and (number or text):
        return int(value) if text else value
    if family == "float" and (number or text):
        return float(value) if text else value
    if family == "decimal" and (number or text):
        return decimal.Decimal(value) if text else value
    if family == "bool" and (isinstance(value, bool) or text):
        if text and value.lower() not in ("true", "false"):
            raise ValueError("neither 'true' nor 'false'")
        return value.lower() == "true" if text else value
    if family == "date" and (text or type(value) is dt.date):
        return dt.date.fromisoformat(value) if text else value
    if family == "timestamp" and (text or isinstance(value, dt.datetime)):
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if text else value
        zoned = "tz=" in kind  # an instant: naive text is UTC; a local time: instants in UTC
        if zoned and when.tzinfo is None:
            return when.replace(tzinfo=dt.timezone.utc)
        if not zoned and when.tzinfo is not None:
            return when.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return when
    if family == "string" and text:
        return value
    raise ValueError("not of the type")


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
