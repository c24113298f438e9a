"""Random access to the rows of one decoded Parquet row group, as samples or as columns.

Each column is turned into Python values once, on first use, and indexed from then on:

* numbers and booleans without nulls: a numpy array (a row's value is a numpy scalar);
* lists of numbers without nulls: one numpy array per row (ragged lengths are fine);
* everything else as ``pyarrow`` gives it (``str``, ``bytes``, ``None`` for nulls,
  ``datetime``, ``Decimal``, ``list``, ``dict`` for structs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.shard_file import SampleFile

__all__ = ["RowGroupView"]


class RowGroupView:
    """The rows of one row group, by their index within it.

    Implements :class:`~shardstream.format.shard_view.ShardView`; the row group is decoded
    whole when read, so it is held in this process's memory.

    Args:
        table: The row group, read (and projected) into a ``pyarrow.Table``.
        source: The file and row group, named in errors.
    """

    def __init__(self, table: Any, *, source: str) -> None:
        self.source = source
        self.schema = table.schema  # ``.names``: the columns, in get_many's order
        self.names: list[str] = list(table.schema.names)
        #: Bytes the decoded row group holds in memory.
        self.held_bytes = int(table.nbytes)
        self._rows = int(table.num_rows)
        self._table: Any = table
        self._columns: list[Any] = [None] * len(self.names)
        self._all: list[Any] | None = None  # every column, once all are decoded

    in_memory = True
    grouped_decode = False  # decoded whole already: one call or many cost the same
    reads_runs = False

    def __len__(self) -> int:
        return self._rows

    def get(self, index: int) -> dict[str, Any]:
        """Row ``index`` as ``{column: value}``."""
        if not 0 <= index < self._rows:
            raise IndexError(f"{self.source}: row {index} is out of range for {self._rows} rows")
        columns = self._all if self._all is not None else self._decode_all()
        return {name: values[index] for name, values in zip(self.names, columns, strict=True)}

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Row ``index`` (negative counts from the end)."""
        return self.get(index + self._rows if index < 0 else index)

    def get_many(self, indices: Sequence[int]) -> list[list[Any]]:
        """Rows ``indices`` as one list of values per column (in :attr:`names` order)."""
        picked = np.asarray(indices, dtype=np.int64)
        if picked.size and (picked.min() < 0 or picked.max() >= self._rows):
            raise IndexError(f"{self.source}: rows {indices} run outside {self._rows} rows")
        out = []
        for k in range(len(self.names)):
            values = self._column(k)
            if isinstance(values, np.ndarray):
                out.append(list(values[picked]))
            else:
                out.append([values[i] for i in picked.tolist()])
        return out

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Rows ``indices`` as one list per column (:meth:`get_many`)."""
        return list(self.get_many(indices))

    def sample_file(self) -> SampleFile | None:
        """``None``: a row group is read whole."""
        return None

    def let_go(self, first: int, stop: int) -> None:
        """Held until released."""

    def release(self) -> None:
        """Drop the decoded data (values already handed out stay valid)."""
        self._table = None
        self._columns = [None] * len(self.names)
        self._all = None

    def _decode_all(self) -> list[Any]:
        self._all = [self._column(k) for k in range(len(self.names))]
        return self._all

    def _column(self, k: int) -> Any:
        values = self._columns[k]
        if values is None:
            if self._table is None:
                raise ValueError(f"{self.source}: the row group view was released")
            values = self._columns[k] = _values(self._table.column(k))
        return values


def _values(column: Any) -> Any:
    """A chunked Arrow column as an indexable sequence of Python (or numpy) values."""
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    kind = column.type
    if column.null_count == 0 and (
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    ):
        return np.array(column.to_numpy())  # a writable copy: torch warns on read-only arrays
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and column.null_count == 0:
        item = kind.value_type
        if pa.types.is_integer(item) or pa.types.is_floating(item):
            array = column.combine_chunks()
            if array.values.null_count == 0:
                offsets = array.offsets.to_numpy()
                flat = np.array(array.values.to_numpy())
                return [flat[offsets[i] : offsets[i + 1]] for i in range(len(array))]
    return column.to_pylist()
