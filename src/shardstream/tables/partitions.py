"""Partition columns of a Parquet dataset: the ``key=value`` folders its files lie in.

Spark, pyarrow and Petastorm write a partitioned DataFrame as ``year=2024/kind=a/part-0.parquet``
and read the folder names back as columns (Hive's partitioning): every row of a file holds its
folders' values. The values are URL-quoted in the names (``a%2Fb`` is ``a/b``), and
``__HIVE_DEFAULT_PARTITION__`` is a null. A column whose values all read as integers is
``int64``, any other ``string``.

Pure: file keys in, typed values out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from shardstream.errors import ShardFormatError

__all__ = ["HIVE_NULL", "Partitioning", "folder_values"]

#: The folder value Spark and Hive write for a null.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_INTEGER = re.compile(r"-?\d+")


def folder_values(key: str) -> list[tuple[str, str | None]]:
    """The ``(name, value)`` pairs of the ``name=value`` folders of a file key, outermost first.

    Example:
        >>> folder_values("year=2024/kind=a%2Fb/part-0.parquet")
        [('year', '2024'), ('kind', 'a/b')]
    """
    pairs: list[tuple[str, str | None]] = []
    for folder in key.split("/")[:-1]:
        name, equals, value = folder.partition("=")
        if equals and name:
            text = unquote(value)
            pairs.append((unquote(name), None if text == HIVE_NULL else text))
    return pairs


@dataclass(frozen=True)
class Partitioning:
    """The partition columns of a dataset's files, and each file's values.

    Attributes:
        names: The columns, outermost folder first.
        types: Each column's Arrow type: ``'int64'`` or ``'string'``.
        values: One tuple of typed values (``int``, ``str`` or ``None``) per file, in the
            files' order.

    Example:
        >>> parts = Partitioning.of(["y=1/a.parquet", "y=2/b.parquet"], source="ds")
        >>> parts.names, parts.types, parts.row(1)
        (('y',), ('int64',), {'y': 2})
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]

    @classmethod
    def of(cls, keys: Sequence[str], *, source: str) -> Partitioning:
        """The partitioning of the files ``keys`` (relative to the dataset's root).

        Raises:
            ShardFormatError: The files lie in folders of different names (``year=`` for some,
                ``day=`` or nothing for others), or one name twice.
        """
        found = [folder_values(key) for key in keys]
        names = tuple(name for name, _ in found[0]) if found else ()
        for key, pairs in zip(keys, found, strict=True):
            these = tuple(name for name, _ in pairs)
            if these != names:
                raise ShardFormatError(
                    f"{source}: {key} lies in the partition folders {list(these)} but "
                    f"{keys[0]} in {list(names)}; every file of a partitioned dataset must lie "
                    f"in folders of the same names, in the same order"
                )
        if len(set(names)) != len(names):
            raise ShardFormatError(
                f"{source}: the partition folders {list(names)} name a column twice"
            )
        raw = [[value for _, value in pairs] for pairs in found]
        types = tuple(
            "int64" if all(_integer(row[k]) for row in raw) else "string" for k in range(len(names))
        )
        values = tuple(
            tuple(_typed(value, kind) for value, kind in zip(row, types, strict=True))
            for row in raw
        )
        return cls(names, types, values)

    def row(self, file: int) -> dict[str, Any]:
        """File ``file``'s value of each partition column."""
        return dict(zip(self.names, self.values[file], strict=True))


def _integer(value: str | None) -> bool:
    """Whether a folder value reads as an integer (a null does too)."""
    return value is None or _INTEGER.fullmatch(value) is not None


def _typed(value: str | None, kind: str) -> Any:
    return int(value) if value is not None and kind == "int64" else value
