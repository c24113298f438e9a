"""Arrow record batches to MDS sample dicts, a column at a time.

Each column of a batch becomes one Python list of values ready for its encoding (numbers
through one numpy conversion, arrays as numpy views of the column's buffer), and the samples
are zipped from those lists: no per-cell type dispatch.

Nulls have one behaviour, chosen by ``on_null``:

- ``"error"`` (the default): a :class:`~shardstream.errors.SampleEncodingError` naming the
  column and the row (and where the row came from, e.g. a Spark partition). MDS has no null,
  so a null must be filled (``DataFrame.fillna``, ``pyarrow.compute.fill_null``) or the row
  dropped or rewritten (in a UDF) before writing.
- ``"skip"``: rows holding a null are dropped (and counted in the log).

A null *inside* an array written as ``ndarray`` counts as a null of its row; ``json`` columns
keep nulls inside their values (as JSON ``null``).
"""

from __future__ import annotations

import base64
import datetime
import io
import itertools
import logging
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Literal

import numpy as np

from shardstream._optional import require
from shardstream.converters.arrow_columns import column_encoder
from shardstream.converters.arrow_types import (
    arrow_module,
    leaf_type,
    list_shape,
    numpy_dtype_name,
)
from shardstream.errors import ConfigurationError, SampleEncodingError
from shardstream.format.encodings import get_encoding
from shardstream.format.encodings.ndarray import NDArrayEncoding

__all__ = ["NULL_POLICIES", "BatchConverter", "OnNull"]

logger = logging.getLogger(__name__)

OnNull = Literal["error", "skip"]
NULL_POLICIES = ("error", "skip")

_NUMERIC_ENCODINGS = {
    "int": "int64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}
_FILE_ENCODINGS = {"bytes", "jpeg", "png", "jpeg_array", "jpegarray", "list[jpeg]", "list[png]"}
_PIL_ENCODINGS = {"pil", "list[pil]"}

Values = Callable[[Any, np.ndarray[Any, Any]], list[Any]]


class BatchConverter:
    """Turns Arrow record batches of one schema into MDS sample dicts.

    Args:
        schema: The batches' ``pyarrow.Schema``.
        columns: Column name to MDS encoding; every name must be a field of ``schema``
            (other fields are not written).
        on_null: ``"error"`` or ``"skip"`` (see the module docstring).
        where: Where the rows come from, for messages (e.g. ``"Spark partition 3"``).

    Raises:
        ConfigurationError: A column is missing from the schema, or its Arrow type cannot be
            written with its encoding.

    Example:
        import pyarrow as pa
        table = pa.table({"text": ["a", "b"], "label": [0, 1]})
        converter = BatchConverter(table.schema, {"text": "str", "label": "int"})
        for batch in table.to_batches():
            samples = converter.samples(batch)  # [{"text": "a", "label": 0}, ...]
    """

    def __init__(
        self,
        schema: Any,
        columns: Mapping[str, str],
        *,
        on_null: OnNull = "error",
        where: str = "the input",
    ) -> None:
        if on_null not in NULL_POLICIES:
            raise ConfigurationError(f"on_null must be one of {NULL_POLICIES}, got {on_null!r}")
        missing = [name for name in columns if name not in schema.names]
        if missing:
            raise ConfigurationError(
                f"columns {missing} are not in the data, whose columns are {list(schema.names)}; "
                "name only those in columns= (or fix the spelling)"
            )
        self.columns = dict(columns)
        self.on_null = on_null
        self.where = where
        self.skipped = 0
        self._names = list(self.columns)
        self._types = {name: schema.field(name).type for name in self._names}
        self._values: dict[str, Values] = {
            name: _values_for(name, self._types[name], encoding, where)
            for name, encoding in self.columns.items()
        }
        encoders = {
            name: column_encoder(self._types[name], encoding, _NUMERIC_ENCODINGS.get(encoding))
            for name, encoding in self.columns.items()
        }
        #: Whether :meth:`encode` may return whole encoded columns (every column has an encoder).
        self.columnar = all(encoder is not None for encoder in encoders.values())
        self._encoders = {name: encoder for name, encoder in encoders.items() if encoder}
        self._element_checked = {
            name
            for name, encoding in self.columns.items()
            if encoding.startswith("ndarray") or encoding in _NUMERIC_ENCODINGS
        }

    def samples(self, batch: Any, first_row: int = 0) -> list[dict[str, Any]]:
        """The samples of one ``pyarrow.RecordBatch`` (or ``Table``), in order.

        Args:
            batch: Rows whose schema is the converter's.
            first_row: The number of the batch's first row in its source, for messages.

        Raises:
            SampleEncodingError: A null with ``on_null="error"``, or a value its encoding
                cannot hold (an empty or ragged array for ``ndarray``, an overflow), naming
                the column and row.
        """
        batch, rows = self._kept(batch, first_row)
        return self._dicts(batch, rows)

    def encode(
        self, batch: Any, first_row: int = 0
    ) -> dict[str, list[bytes]] | list[dict[str, Any]]:
        """The rows of one batch, ready for an :class:`~shardstream.MDSWriter`.

        Whole columns of encoded values (for ``MDSWriter.write_columns``) when every column
        can be encoded at once (see :mod:`shardstream.converters.arrow_columns`), else the
        sample dicts of :meth:`samples` (for ``MDSWriter.write``). Both write the same bytes.

        Raises:
            SampleEncodingError: As :meth:`samples`.
        """
        batch, rows = self._kept(batch, first_row)
        if self.columnar and batch.num_rows:
            columns = {}
            for name in self._names:
                values = self._encoders[name](_plain(batch.column(name)))
                if values is None:
                    break
                columns[name] = values
            else:
                return columns
        return self._dicts(batch, rows)

    def _kept(self, batch: Any, first_row: int) -> tuple[Any, np.ndarray[Any, Any]]:
        """The batch less its rows holding a null (raising for one on error), and row numbers."""
        rows = np.arange(first_row, first_row + batch.num_rows, dtype=np.int64)
        bad = self._null_rows(batch, first_row)
        if bad is not None:
            keep = ~bad
            self.skipped += int(bad.sum())
            batch = batch.filter(arrow_module().array(keep))
            rows = rows[keep]
        return batch, rows

    def _dicts(self, batch: Any, rows: np.ndarray[Any, Any]) -> list[dict[str, Any]]:
        if batch.num_rows == 0:
            return []
        lists = [self._values[name](_plain(batch.column(name)), rows) for name in self._names]
        names = self._names
        return [dict(zip(names, values, strict=True)) for values in zip(*lists, strict=True)]

    def _null_rows(self, batch: Any, first_row: int) -> np.ndarray[Any, Any] | None:
        """A mask of the rows to skip, or None when none; raises for the first null on error."""
        mask: np.ndarray[Any, Any] | None = None
        for name in self._names:
            array = _plain(batch.column(name))
            row_nulls = _row_nulls(array, deep=name in self._element_checked)
            if row_nulls is None:
                continue
            if self.on_null == "error":
                row = int(np.argmax(row_nulls))
                inner = "" if array.is_null()[row].as_py() else " (an element of its array)"
                raise SampleEncodingError(
                    f"column {name!r} is null{inner} at row {first_row + row} of {self.where}; "
                    f"MDS has no "
                    f"null value. Fill it first (DataFrame.fillna / na.fill, pyarrow.compute."
                    f"fill_null), drop or rewrite such rows in udf_iterable, or pass "
                    f"on_null='skip' to drop them"
                )
            mask = row_nulls if mask is None else mask | row_nulls
        return mask


def _plain(array: Any) -> Any:
    """The array without chunking, dictionary or extension wrapping."""
    pa = arrow_module()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _row_nulls(array: Any, *, deep: bool) -> np.ndarray[Any, Any] | None:
    """Per row, whether it is null (or, with ``deep``, holds a null element); None if none."""
    pc = require("pyarrow.compute", extra="arrow", purpose="Converting tables to MDS")
    nulls: np.ndarray[Any, Any] | None = None
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
    if deep:
        level, parents = array, None
        while hasattr(level, "flatten") and leaf_type(level.type)[1] > 0:
            step = pc.list_parent_indices(level).to_numpy(zero_copy_only=False)
            parents = step if parents is None else parents[step]
            level = level.flatten()
        if parents is not None and level.null_count:
            hit = np.zeros(len(array), dtype=bool)
            hit[parents[level.is_null().to_numpy(zero_copy_only=False)]] = True
            nulls = hit if nulls is None else nulls | hit
    if nulls is None or not nulls.any():
        return None
    return nulls


def _values_for(name: str, arrow_type: Any, encoding: str, where: str) -> Values:
    """The function that turns one column into a list of values for ``encoding``."""
    pa = arrow_module()
    types = pa.types
    if types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if isinstance(arrow_type, pa.ExtensionType):
        arrow_type = arrow_type.storage_type
    base = encoding.partition(":")[0]

    def refuse(hint: str = "") -> ConfigurationError:
        return ConfigurationError(
            f"column {name!r} has Arrow type {arrow_type}, which cannot be written with "
            f"encoding {encoding!r}{hint}; choose another encoding in columns=, or convert "
            f"the column first (a cast, or udf_iterable)"
        )

    if encoding in _NUMERIC_ENCODINGS:
        target = pa.from_numpy_dtype(np.dtype(_NUMERIC_ENCODINGS[encoding]))
        as_number = _as_numbers(arrow_type)
        if as_number is None:
            raise refuse()

        def numbers(array: Any, rows: np.ndarray[Any, Any]) -> list[Any]:
            try:
                cast = as_number(array).cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SampleEncodingError(
                    f"column {name!r} of {where} does not fit encoding {encoding!r}: {exc}; "
                    "choose a wider encoding for it in columns= (e.g. 'int64' or 'float64')"
                ) from exc
            values: list[Any] = cast.to_numpy(zero_copy_only=False).tolist()
            return values

        return numbers
    if base == "ndarray":
        return _ndarray_values(name, arrow_type, encoding, where, refuse)
    if encoding == "str":
        return _str_values(arrow_type, refuse)
    if encoding in _FILE_ENCODINGS or encoding in _PIL_ENCODINGS:
        single = encoding in ("bytes", "jpeg", "png", "pil")
        leaf, depth = leaf_type(arrow_type)
        if encoding == "bytes" and (
            types.is_string(arrow_type) or types.is_large_string(arrow_type)
        ):
            return lambda array, rows: [text.encode("utf-8") for text in array.to_pylist()]
        if depth != (0 if single else 1) or not _is_binary(types, leaf):
            raise refuse(" (it takes binary values)" if single else " (it takes lists of binary)")
        if encoding in _PIL_ENCODINGS:
            return _pil_values(single)
        return lambda array, rows: array.to_pylist()
    if encoding == "json":
        if _needs_json_care(pa, arrow_type):
            return lambda array, rows: [_jsonable(v, array.type) for v in array.to_pylist()]
        return lambda array, rows: array.to_pylist()
    if encoding == "str_decimal":
        if not (types.is_decimal(arrow_type) or types.is_integer(arrow_type)):
            raise refuse()
        return lambda array, rows: [Decimal(v) for v in array.to_pylist()]
    get_encoding(encoding)  # an unknown name fails here, naming it
    return lambda array, rows: array.to_pylist()


def _is_binary(types: Any, arrow_type: Any) -> bool:
    return bool(
        types.is_binary(arrow_type)
        or types.is_large_binary(arrow_type)
        or types.is_fixed_size_binary(arrow_type)
    )


def _as_numbers(arrow_type: Any) -> Callable[[Any], Any] | None:
    """How to view a column as plain numbers (dates as days, times as microseconds)."""
    pa = arrow_module()
    types = pa.types
    if numpy_dtype_name(arrow_type) is not None or types.is_decimal(arrow_type):
        return lambda array: array
    if types.is_date(arrow_type):
        return lambda array: array.cast(pa.date32()).cast(pa.int32())
    if types.is_timestamp(arrow_type):
        micros = pa.timestamp("us", arrow_type.tz)
        return lambda array: array.cast(micros, safe=True).cast(pa.int64())
    if types.is_duration(arrow_type):
        return lambda array: array.cast(pa.duration("us"), safe=True).cast(pa.int64())
    if types.is_time(arrow_type):
        return lambda array: array.cast(pa.time64("us"), safe=True).cast(pa.int64())
    return None


def _str_values(arrow_type: Any, refuse: Callable[..., ConfigurationError]) -> Values:
    pa = arrow_module()
    types = pa.types
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return lambda array, rows: array.to_pylist()
    if types.is_date(arrow_type) or types.is_timestamp(arrow_type) or types.is_time(arrow_type):
        return lambda array, rows: [value.isoformat() for value in array.to_pylist()]
    if numpy_dtype_name(arrow_type) is not None or types.is_decimal(arrow_type):
        return lambda array, rows: [str(value) for value in array.to_pylist()]
    raise refuse(" (for nested values use 'json')")


def _pil_values(single: bool) -> Values:
    image = require("PIL.Image", extra="images", purpose="Decoding image bytes")

    def decode(data: bytes) -> Any:
        opened = image.open(io.BytesIO(data))
        opened.load()
        return opened

    if single:
        return lambda array, rows: [decode(value) for value in array.to_pylist()]
    return lambda array, rows: [[decode(item) for item in value] for value in array.to_pylist()]


def _ndarray_values(
    name: str,
    arrow_type: Any,
    encoding: str,
    where: str,
    refuse: Callable[..., ConfigurationError],
) -> Values:
    spec = get_encoding(encoding)
    assert isinstance(spec, NDArrayEncoding)
    leaf, depth = leaf_type(arrow_type)
    leaf_dtype = numpy_dtype_name(leaf)
    if depth == 0 or leaf_dtype is None:
        raise refuse(" (ndarray needs a list of numbers or bools)")
    dtype = np.dtype(spec.dtype_name or leaf_dtype)
    pa = arrow_module()
    target = pa.from_numpy_dtype(dtype)
    shape = spec.shape

    def fail(row: int, problem: str) -> SampleEncodingError:
        return SampleEncodingError(
            f"column {name!r} at row {row} of {where}: {problem}; give the column encoding "
            f"'json' in columns= to keep such values"
        )

    def leaves(values: Any) -> np.ndarray[Any, Any]:
        try:
            cast = values.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SampleEncodingError(
                f"column {name!r} of {where} does not fit encoding {encoding!r}: {exc}; "
                "choose a dtype that holds its values in columns= (e.g. 'ndarray:float64')"
            ) from exc
        block: np.ndarray[Any, Any] = cast.to_numpy(zero_copy_only=False)
        return block

    fixed = list_shape(arrow_type)
    if fixed is not None:

        def fixed_rows(array: Any, rows: np.ndarray[Any, Any]) -> list[Any]:
            flat = array
            for _ in range(depth):
                flat = flat.flatten()
            if shape is not None and math.prod(shape) != math.prod(fixed):
                raise fail(int(rows[0]), f"shape {fixed} does not fill the encoding's {shape}")
            return list(leaves(flat).reshape((len(array), *(shape or fixed))))

        return fixed_rows
    if depth == 1:

        def one_level(array: Any, rows: np.ndarray[Any, Any]) -> list[Any]:
            offsets = array.offsets.to_numpy(zero_copy_only=False)
            values = leaves(array.values)
            lengths = np.diff(offsets)
            if len(lengths) and not lengths.all():
                raise fail(int(rows[int(np.argmin(lengths))]), "an empty array cannot be stored")
            split = [values[start:end] for start, end in itertools.pairwise(offsets)]
            if shape is None:
                return split
            if (lengths != int(np.prod(shape))).any():
                bad = int(np.argmax(lengths != int(np.prod(shape))))
                raise fail(int(rows[bad]), f"{lengths[bad]} values do not fill shape {shape}")
            return [part.reshape(shape) for part in split]

        return one_level

    def nested(array: Any, rows: np.ndarray[Any, Any]) -> list[Any]:
        out = []
        for number, value in enumerate(array.to_pylist()):
            try:
                item = np.array(value, dtype=dtype)
            except ValueError as exc:
                raise fail(
                    int(rows[number]), f"the nested array is not rectangular ({exc})"
                ) from exc
            if item.size == 0 or item.ndim != depth:
                raise fail(int(rows[number]), f"an array of shape {item.shape} cannot be stored")
            out.append(item if shape is None else item.reshape(shape))
        return out

    return nested


def _needs_json_care(pa: Any, arrow_type: Any) -> bool:
    """Whether ``to_pylist`` of this type yields values ``json.dumps`` cannot take as they are."""
    types = pa.types
    if types.is_map(arrow_type):
        return True
    if types.is_struct(arrow_type):
        return any(_needs_json_care(pa, field.type) for field in arrow_type)
    if leaf_type(arrow_type)[1]:
        return _needs_json_care(pa, arrow_type.value_type)
    return not (
        numpy_dtype_name(arrow_type) is not None
        or types.is_string(arrow_type)
        or types.is_large_string(arrow_type)
        or types.is_null(arrow_type)
    )


def _jsonable(value: Any, arrow_type: Any) -> Any:
    """A copy of ``value`` that ``json.dumps`` takes.

    Maps with text keys become objects (others ``[key, value]`` pairs), decimals and temporal
    values ISO text, durations microseconds, bytes base64 text.
    """
    if value is None:
        return None
    pa = arrow_module()
    types = pa.types
    if types.is_struct(arrow_type):
        return {field.name: _jsonable(value[field.name], field.type) for field in arrow_type}
    if types.is_map(arrow_type):
        pairs = [
            (_jsonable(key, arrow_type.key_type), _jsonable(item, arrow_type.item_type))
            for key, item in value
        ]
        if types.is_string(arrow_type.key_type) or types.is_large_string(arrow_type.key_type):
            return dict(pairs)
        return [list(pair) for pair in pairs]
    if leaf_type(arrow_type)[1]:
        return [_jsonable(item, arrow_type.value_type) for item in value]
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(microseconds=1)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
