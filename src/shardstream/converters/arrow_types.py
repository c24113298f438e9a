"""Which MDS column encoding each Arrow type gets.

One mapping serves every source that reaches Arrow: Spark (through ``mapInArrow``), pandas,
Arrow tables and Hugging Face datasets. The table (also in the README):

=============================================  ===========================================
Arrow type (Spark type)                        MDS encoding
=============================================  ===========================================
int8 / int16 / int32 / int64                   ``int8`` / ``int16`` / ``int32`` / ``int64``
(ByteType, ShortType, IntegerType, LongType)   (signs kept)
uint8 ... uint64                               ``uint8`` ... ``uint64``
float16 / float32 / float64 (Float, Double)    ``float16`` / ``float32`` / ``float64``
bool (BooleanType)                             ``uint8`` (0 or 1)
decimal (DecimalType)                          ``str_decimal``
string (StringType)                            ``str``
binary (BinaryType)                            ``bytes``
date32 / date64 (DateType)                     ``int32``: days since 1970-01-01
timestamp, any unit (TimestampType)            ``int64``: microseconds since the Unix epoch
                                               (UTC for a zoned type, wall clock for a naive
                                               one, e.g. TimestampNTZType)
duration / time (DayTimeIntervalType)          ``int64``: microseconds
list of numbers or bools, any depth            ``ndarray:<dtype>`` (``ndarray:<dtype>:<shape>``
(ArrayType, ML Vector after vector_to_array)   when every level has a fixed size)
struct, map, list of anything else             ``json``
=============================================  ===========================================

Timestamps with nanoseconds that are not whole microseconds are refused rather than rounded
(every mapping above is lossless); give such a column ``str`` in ``columns=`` to keep it as
ISO-8601 text.
"""

from __future__ import annotations

from typing import Any

from shardstream._optional import require
from shardstream.errors import ConfigurationError

__all__ = [
    "arrow_module",
    "infer_columns",
    "infer_encoding",
    "leaf_type",
    "list_shape",
    "numpy_dtype_name",
]

_NUMERIC = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "halffloat",
    "float",
    "double",
}
_ARROW_TO_NUMPY = {"halffloat": "float16", "float": "float32", "double": "float64"}


def arrow_module() -> Any:
    """``pyarrow``, imported on first use."""
    return require("pyarrow", extra="arrow", purpose="Converting tables to MDS")


def numpy_dtype_name(arrow_type: Any) -> str | None:
    """The numpy dtype name of a numeric or boolean Arrow type (bool as ``uint8``), else None."""
    name = str(arrow_type)
    if name == "bool":
        return "uint8"
    if name in _NUMERIC:
        return _ARROW_TO_NUMPY.get(name, name)
    return None


def _is_list(pa: Any, arrow_type: Any) -> bool:
    types = pa.types
    return bool(
        types.is_list(arrow_type)
        or types.is_large_list(arrow_type)
        or types.is_fixed_size_list(arrow_type)
        or getattr(types, "is_list_view", lambda _: False)(arrow_type)
        or getattr(types, "is_large_list_view", lambda _: False)(arrow_type)
    )


def leaf_type(arrow_type: Any) -> tuple[Any, int]:
    """The element type under every level of list nesting, and the number of levels."""
    pa = arrow_module()
    depth = 0
    while _is_list(pa, arrow_type):
        arrow_type = arrow_type.value_type
        depth += 1
    return arrow_type, depth


def list_shape(arrow_type: Any) -> tuple[int, ...] | None:
    """The static shape of nested fixed-size lists, or None when a level is variable."""
    pa = arrow_module()
    shape = []
    while _is_list(pa, arrow_type):
        if not pa.types.is_fixed_size_list(arrow_type):
            return None
        shape.append(arrow_type.list_size)
        arrow_type = arrow_type.value_type
    return tuple(shape) if shape and all(shape) else None


def infer_encoding(arrow_type: Any, *, column: str) -> str:
    """The MDS encoding for values of ``arrow_type`` (see the module's table).

    Args:
        arrow_type: A ``pyarrow.DataType``.
        column: The column's name, for the error message.

    Raises:
        ConfigurationError: The type has no natural encoding (a column of nulls only, say);
            the message says to name one in ``columns=``.

    Example:
        import pyarrow as pa
        infer_encoding(pa.list_(pa.float32()), column="embedding")  # "ndarray:float32"
    """
    pa = arrow_module()
    types = pa.types
    if types.is_dictionary(arrow_type):
        return infer_encoding(arrow_type.value_type, column=column)
    if isinstance(arrow_type, pa.ExtensionType):
        return infer_encoding(arrow_type.storage_type, column=column)
    dtype = numpy_dtype_name(arrow_type)
    if dtype is not None:
        return dtype
    if types.is_decimal(arrow_type):
        return "str_decimal"
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return "str"
    if getattr(types, "is_string_view", lambda _: False)(arrow_type):
        return "str"
    if (
        types.is_binary(arrow_type)
        or types.is_large_binary(arrow_type)
        or types.is_fixed_size_binary(arrow_type)
        or getattr(types, "is_binary_view", lambda _: False)(arrow_type)
    ):
        return "bytes"
    if types.is_date(arrow_type):
        return "int32"
    if types.is_timestamp(arrow_type) or types.is_duration(arrow_type) or types.is_time(arrow_type):
        return "int64"
    if _is_list(pa, arrow_type):
        leaf, _ = leaf_type(arrow_type)
        dtype = numpy_dtype_name(leaf)
        if dtype is None:
            return "json"
        shape = list_shape(arrow_type)
        return (
            f"ndarray:{dtype}" if shape is None else f"ndarray:{dtype}:{','.join(map(str, shape))}"
        )
    if types.is_struct(arrow_type) or types.is_map(arrow_type):
        return "json"
    raise ConfigurationError(
        f"column {column!r} has Arrow type {arrow_type}, which has no MDS encoding by default; "
        f"name one for it in columns= (e.g. columns={{{column!r}: 'json'}}), or cast or drop "
        f"the column first"
    )


def infer_columns(schema: Any) -> dict[str, str]:
    """Column name to MDS encoding for every field of an Arrow schema, in schema order.

    Raises:
        ConfigurationError: Two fields share a name, or a type has no encoding.

    Example:
        import pyarrow as pa
        schema = pa.schema([("text", pa.string()), ("label", pa.int64())])
        infer_columns(schema)  # {"text": "str", "label": "int64"}
    """
    names = list(schema.names)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigurationError(
            f"column names must be unique; repeated: {duplicates}: rename or drop the copies"
        )
    return {field.name: infer_encoding(field.type, column=field.name) for field in schema}
