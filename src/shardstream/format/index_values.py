"""Values that ``index.json`` entries repeat or share: checked once, kept once.

A dataset's shards share their column names, encodings, column sizes and hash names, and
index entries are frozen: each distinct set is checked once and one object serves every entry
that has it (an index of 10,000 shards holds one column dict, not 10,000).
"""

from __future__ import annotations

from typing import Any

from shardstream.errors import IndexFormatError

__all__ = [
    "check_columns",
    "column_set",
    "is_int",
    "is_utf8",
    "known_columns",
    "optional_str",
    "shared",
]

#: Distinct values remembered; past this many, values are checked each time and not shared.
KNOWN_LIMIT = 1024

# Column sets already checked, each one dict shared by the entries that have it.
_KNOWN_COLUMNS: dict[tuple[tuple[Any, ...], tuple[Any, ...]], dict[str, str]] = {}
_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def shared(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """One tuple for equal tuples (hash names, column sizes repeat in every entry)."""
    known = _SHARED.get(values)
    if known is None:
        if len(_SHARED) < KNOWN_LIMIT:
            _SHARED[values] = values
        return values
    return known


def column_set(names: Any, encodings: Any, where: str) -> dict[str, str]:
    """The shared column dict of ``names`` and ``encodings``, each distinct set checked once.

    Raises:
        IndexFormatError: The names or encodings are not lists of strings of equal length with
            unique names.
    """
    try:  # the shards of a dataset share their columns: check each distinct set once
        key = (tuple(names), tuple(encodings))
        known = _KNOWN_COLUMNS.get(key)
    except TypeError:  # unhashable parts: the checks below say what is wrong
        key, known = None, None
    if known is not None:
        return known
    columns = check_columns(names, encodings, where)
    if key is not None and len(_KNOWN_COLUMNS) < KNOWN_LIMIT:
        _KNOWN_COLUMNS[key] = columns
    return columns


def known_columns(names: list[Any], encodings: list[Any]) -> dict[str, str] | None:
    """The column dict of a set :func:`column_set` has checked already, else ``None``."""
    try:
        return _KNOWN_COLUMNS.get((tuple(names), tuple(encodings)))
    except TypeError:  # unhashable parts: never checked
        return None


def check_columns(names: Any, encodings: Any, where: str) -> dict[str, str]:
    """The column dict of ``names`` and ``encodings``, checked (not remembered).

    Raises:
        IndexFormatError: They are not lists of strings of equal length with unique names.
    """
    if (
        not isinstance(names, list)
        or not isinstance(encodings, list)
        or len(names) != len(encodings)
        or not all(isinstance(x, str) for x in names + encodings)
        or len(set(names)) != len(names)
    ):
        raise IndexFormatError(
            f"{where}: column_names and column_encodings must be lists of strings of equal "
            f"length with unique names, got {names!r} and {encodings!r}"
        )
    return dict(zip(names, encodings, strict=True))


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no file can have this name
        return False
    return True


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def optional_str(value: object, where: str) -> str | None:
    """``value`` if it is a string or ``None``.

    Raises:
        IndexFormatError: Anything else, named with ``where``.
    """
    if value is not None and not isinstance(value, str):
        raise IndexFormatError(f"{where} must be a string or null, got {value!r}")
    return value
