"""From the dataset's rows to what a Petastorm reader yields.

The reader's :class:`~shardstream.StreamingDataLoader` collates each run of rows with
:class:`DecodeRows` (in its worker processes, for ``reader_pool_type='process'``): every field
decoded by its codec, one list of values per field, rows in the dataset's order. The reader's
:class:`Outputs` then keeps the rows that pass ``filters`` and the predicate, applies the
``transform_spec`` and makes the namedtuples: one per row (``make_reader``), or one per run with
a NumPy array per field (``make_batch_reader``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream._optional import require
from shardstream.errors import ConfigurationError, ShardFormatError
from shardstream.loader.fields import Field
from shardstream.loader.petastorm.codecs import cast_scalar
from shardstream.loader.petastorm.predicates import predicate_mask
from shardstream.loader.petastorm.unischema import Unischema, UnischemaField, as_field
from shardstream.loader.transform_spec import TransformSpec, returned_columns
from shardstream.tables.filters import Filters

__all__ = ["DecodeRows", "Outputs", "column_array", "decode_value"]

Block = Mapping[str, list[Any]]


def decode_value(field: UnischemaField, value: Any) -> Any:
    """A stored value of ``field`` as Petastorm's reader hands it over.

    A codec decodes it; without one, a scalar is cast to the field's NumPy type (Petastorm's
    ``decode_row``) except bytes, which ``numpy.bytes_`` would cut at a trailing zero byte.
    """
    if value is None:
        return None
    if field.codec is not None:
        return field.codec.decode(field, value)
    if field.shape or isinstance(value, (bytes, np.ndarray)):
        return value
    return cast_scalar(field.numpy_dtype, value)


class DecodeRows:
    """A DataLoader's ``collate_fn``: rows (dicts) in, one list of decoded values per field.

    Args:
        fields: The fields to decode, each with its codec.

    Example:
        collate = DecodeRows(list(schema.fields.values()))
        loader = StreamingDataLoader(dataset, batch_size=64, collate_fn=collate)
    """

    def __init__(self, fields: Sequence[UnischemaField]) -> None:
        self.fields = list(fields)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        """Each field's decoded values over ``rows``.

        Raises:
            ShardFormatError: A value its codec cannot decode; the message names the field.
        """
        return {field.name: _decoded(field, rows) for field in self.fields}


def _decoded(field: UnischemaField, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """``field``'s decoded values over ``rows``; an error names the field."""
    try:
        return [decode_value(field, row[field.name]) for row in rows]
    except (ValueError, TypeError, OSError, EOFError, KeyError) as exc:
        raise ShardFormatError(
            f"field {field.name!r}: a value does not decode with "
            f"{type(field.codec).__name__ if field.codec else field.numpy_dtype} "
            f"({exc}); the dataset's metadata does not match its data"
        ) from exc


@dataclass(frozen=True)
class Outputs:
    """What a reader makes of each block of decoded rows.

    Attributes:
        selected: The fields the reader yields (before the transform), in order.
        schema: The schema of what it yields (after the transform).
        batched: One namedtuple of arrays per block, not one per row.
        filters: pyarrow DNF filters on the rows, or ``None``.
        predicate: A Petastorm predicate, or ``None``.
        transform: A transform of the rows (a DataFrame per block, or a dict per row).
        row_predicate: Ask the predicate about each row (a dict) even in batches: Petastorm
            asks a batch reader's predicate on partition columns alone about each partition.
    """

    selected: list[str]
    schema: Unischema
    batched: bool
    filters: Filters | None = None
    predicate: Any = None
    transform: TransformSpec | None = None
    row_predicate: bool = False

    def of(self, block: Block) -> list[Any]:
        """The namedtuples of ``block``: one per kept row, or one for all (none when empty)."""
        rows = len(next(iter(block.values()))) if block else 0
        keep = self._kept(block, rows)
        picked = {name: [v for v, k in zip(block[name], keep, strict=True) if k]
                  for name in self.selected}  # fmt: skip
        count = int(keep.sum())
        if self.batched:
            return [self._batch(picked)] if count else []
        return [self._row({name: values[k] for name, values in picked.items()})
                for k in range(count)]  # fmt: skip

    def _kept(self, block: Block, rows: int) -> NDArray[np.bool_]:
        keep = np.ones(rows, dtype=bool)
        if self.filters is not None:
            keep &= self.filters.row_mask(block, rows)
        if self.predicate is not None:
            names = sorted(self.predicate.get_fields())
            if self.batched and not self.row_predicate:
                keep &= predicate_mask(self.predicate, _frame({n: block[n] for n in names}))
            else:
                keep &= np.fromiter(
                    (bool(self.predicate.do_include({n: block[n][k] for n in names}))
                     for k in range(rows)),
                    bool, count=rows,
                )  # fmt: skip
        return keep

    def _batch(self, columns: dict[str, list[Any]]) -> Any:
        if self.transform is not None:
            frame = _frame(columns)
            if self.transform.func is not None:
                frame = self.transform.func(frame)
            columns = returned_columns(frame, list(self.schema.fields))
        fields = [as_field(field) for field in self.schema.fields.values()]
        return self.schema.make_namedtuple_tf(
            *(column_array(field, columns[field.name]) for field in fields)
        )

    def _row(self, row: dict[str, Any]) -> Any:
        if self.transform is not None and self.transform.func is not None:
            row = self.transform.func(row)
            if not isinstance(row, Mapping):
                raise ConfigurationError(
                    f"make_reader's transform_spec func takes a row (a dict) and returns a "
                    f"dict; it returned {type(row).__name__}"
                )
        missing = [name for name in self.schema.fields if name not in row]
        if missing:
            raise ConfigurationError(
                f"transform_spec's func returned a row without {', '.join(map(repr, missing))}; "
                f"declare new or changed fields in edit_fields and dropped ones in removed_fields"
            )
        return self.schema.make_namedtuple_tf(*(row[name] for name in self.schema.fields))


def _frame(columns: Mapping[str, list[Any]]) -> Any:
    """A pandas DataFrame of the columns (arrays stay one object a row)."""
    pandas = require("pandas", extra="spark", purpose="Petastorm predicates and transforms")
    frame = pandas.DataFrame(index=range(len(next(iter(columns.values()), []))))
    for name, values in columns.items():
        if values and isinstance(values[0], np.ndarray):
            frame[name] = pandas.Series(values, dtype=object)
        else:
            frame[name] = values
    return frame


def column_array(field: Field, values: Sequence[Any]) -> NDArray[Any]:
    """One field's values over a batch as one array, rows first.

    Numbers and booleans keep the field's dtype (a null makes numbers ``float64`` NaN, as
    pandas does), text is a ``str_`` array, arrays of one shape are stacked; anything else
    (bytes, decimals, dates, arrays of different shapes, other nulls) is an object array.

    Example:
        >>> column_array(Field("x", np.dtype("int32"), ()), [1, 2]).dtype
        dtype('int32')
    """
    has_null = any(value is None for value in values)
    kind = field.dtype.kind
    if field.shape == () or (field.shape is None and not _arrays(values)):
        if kind in "biuf" and has_null:
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        if kind in "biuf" and not has_null:
            return np.asarray(values).astype(field.dtype, copy=False)
        if kind == "U" and not has_null:
            return np.array(values, dtype=np.str_) if values else np.zeros(0, np.str_)
        if kind == "M" and not has_null:
            return np.array([_datetime64(v) for v in values], dtype="datetime64[ns]")
        return _objects(values)
    arrays = [np.asarray(value) for value in values]
    shapes = {array.shape for array in arrays}
    if has_null or len(shapes) > 1:
        return _objects(values)
    if not arrays:
        dims = tuple(dim or 0 for dim in (field.shape or ()))
        return np.zeros((0, *dims), dtype=field.dtype)
    stacked = np.stack(arrays)
    return stacked.astype(field.dtype, copy=False) if kind != "O" else stacked


def _arrays(values: Sequence[Any]) -> bool:
    return any(isinstance(value, np.ndarray) for value in values)


def _objects(values: Sequence[Any]) -> NDArray[Any]:
    out = np.empty(len(values), dtype=object)
    for position, value in enumerate(values):
        out[position] = value  # one by one: a list of equal arrays would be broadcast
    return out


def _datetime64(value: Any) -> Any:
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return np.datetime64(value, "ns")
