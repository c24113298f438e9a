"""Nulls in a DataFrame given to ``make_spark_converter``: filled by a per-type policy.

MDS has no null, and Petastorm's users convert DataFrames with nullable columns, so the
converter fills nulls before writing instead of failing the Spark job (``on_null="fill"``, its
default; ``"error"`` and ``"skip"`` keep :func:`~shardstream.converters.dataframe_to_mds`'s
meanings). Each type's null becomes what Petastorm's pandas-based reader would hand over, as
far as a typed column can hold it:

======================================  ===============================================
column type                             a null becomes
======================================  ===============================================
float, double (and elements of their    NaN
arrays)
integer, boolean, decimal               NaN, the column becoming float (``dtype``, or
                                        float64 when ``dtype=None``), as pandas does
arrays of integers with null elements   NaN, the array becoming float in the same way
date, timestamp (zoned)                 NaN, the column becoming float64: days, or
                                        microseconds, since 1970-01-01 (what MDS stores)
string / binary                         ``""`` / ``b""``
an array that is itself null;           none: the conversion stops before writing, naming
timestamp without time zone             the column (fill it first, or ``on_null="skip"``)
struct, map (written as JSON)           kept, as JSON ``null``
======================================  ===============================================

Float columns are filled without looking at the data; the others are counted first, in one
Spark job over the nullable columns, and only a column that holds a null changes type. Every
change is logged with the column and its count of nulls.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from shardstream._optional import require
from shardstream.errors import ConfigurationError

__all__ = ["fill_nulls"]

logger = logging.getLogger(__name__)

_FLOATS = ("FloatType", "DoubleType")
_TO_FLOAT = ("ByteType", "ShortType", "IntegerType", "LongType", "BooleanType", "DecimalType")
#: Date and zoned timestamp columns, and the SQL function giving the number MDS stores for each.
_TIMES = {"DateType": "unix_date", "TimestampType": "unix_micros"}


def fill_nulls(dataframe: Any, dtype: str | None) -> Any:
    """``dataframe`` with its nulls filled by the policy in this module's docstring.

    Args:
        dataframe: A ``pyspark.sql.DataFrame`` (ML vectors already arrays).
        dtype: What integer columns holding nulls become: ``'float32'``, else float64.

    Returns:
        The DataFrame to write (the same one when no column can hold a null).

    Raises:
        ConfigurationError: A null array, or a null of a type nothing fills (a timestamp
            without time zone, an interval), naming the column and its count.

    Example:
        df = fill_nulls(spark.createDataFrame([(1, None)], "a int, b double"), "float32")
    """
    functions = require("pyspark.sql.functions", extra="spark", purpose="make_spark_converter")
    fields = [field for field in dataframe.schema.fields if _may_hold_null(field)]
    if not fields:
        return dataframe
    counted = [field for field in fields if type(field.dataType).__name__ not in _FLOATS]
    counts, whole = _null_counts(dataframe, counted, functions) if counted else ({}, {})
    for field in counted:
        if whole.get(field.name):
            _refuse(field, whole[field.name])
    target = "float" if dtype == "float32" else "double"
    columns, changed = [], False
    for field in dataframe.schema.fields:
        column = functions.col(_quoted(field.name))
        nulls = counts.get(field.name)
        if field in fields and (nulls is None or nulls > 0):
            column = _filled(field, column, target, functions, nulls or 0)
            changed = True
            if nulls:
                logger.warning(
                    "column %r holds %d null(s): filled as %s (make_spark_converter's "
                    "on_null='fill'; pass on_null='error' to refuse them)",
                    field.name, nulls, _what(field.dataType, target),
                )  # fmt: skip
        columns.append(column.alias(field.name))
    return dataframe.select(*columns) if changed else dataframe


def _may_hold_null(field: Any) -> bool:
    data_type, nullable = field.dataType, bool(field.nullable)
    while type(data_type).__name__ == "ArrayType":
        nullable = nullable or bool(data_type.containsNull)
        data_type = data_type.elementType
    return nullable


def _null_counts(
    dataframe: Any, fields: list[Any], functions: Any
) -> tuple[dict[str, int], dict[str, int]]:
    """Per column, the rows holding a null anywhere, and those whose array is itself null."""
    aggregates = []
    for index, field in enumerate(fields):
        column = functions.col(_quoted(field.name))
        has_null = column.isNull()
        if type(field.dataType).__name__ == "ArrayType":
            has_null = has_null | functions.exists(column, _any_null(field.dataType, functions))
            whole = column.isNull().cast("long")
        else:
            whole = functions.lit(0)
        aggregates.append(functions.sum(has_null.cast("long")).alias(f"c{index}"))
        aggregates.append(functions.sum(whole).alias(f"w{index}"))
    row = dataframe.agg(*aggregates).collect()[0]
    counts = {field.name: int(row[f"c{index}"] or 0) for index, field in enumerate(fields)}
    whole_nulls = {field.name: int(row[f"w{index}"] or 0) for index, field in enumerate(fields)}
    return counts, whole_nulls


def _refuse(field: Any, nulls: int) -> NoReturn:
    raise ConfigurationError(
        f"column {field.name!r} ({field.dataType.simpleString()}) holds {nulls} null(s), and MDS "
        f"has no null for it: fill them first (df.na.fill, or coalesce(col, <default>)), or "
        f"pass on_null='skip' to drop those rows"
    )


def _any_null(array_type: Any, functions: Any) -> Any:
    """A predicate over one element of ``array_type``: it, or an element below it, is null."""
    element = array_type.elementType
    if type(element).__name__ == "ArrayType":
        inner = _any_null(element, functions)
        return lambda x: x.isNull() | functions.exists(x, inner)
    return lambda x: x.isNull()


def _filled(field: Any, column: Any, target: str, functions: Any, nulls: int) -> Any:
    """``column`` with its nulls filled (see the module docstring)."""
    data_type = field.dataType
    name = type(data_type).__name__
    nan = functions.lit(float("nan"))
    if name in _FLOATS:
        return functions.coalesce(column, nan.cast(data_type))
    if name in _TO_FLOAT:
        return functions.coalesce(column.cast(target), nan.cast(target))
    if name in _TIMES:  # the numbers MDS stores for them, as float64: float32 would round
        number = functions.expr(f"{_TIMES[name]}({_quoted(field.name)})").cast("double")
        return functions.coalesce(number, nan.cast("double"))
    if name == "StringType":
        return functions.coalesce(column, functions.lit(""))
    if name == "BinaryType":
        return functions.coalesce(column, functions.lit(bytearray()))
    if name == "ArrayType":
        element = _filled_element(data_type.elementType, target, functions)
        return column if element is None else functions.transform(column, element)
    if name in ("StructType", "MapType"):
        return column  # JSON keeps its nulls
    return _refuse(field, nulls)


def _filled_element(data_type: Any, target: str, functions: Any) -> Any:
    """How one array element is filled, or ``None`` when it needs nothing."""
    name = type(data_type).__name__
    nan = functions.lit(float("nan"))
    if name in _FLOATS:
        return lambda x: functions.coalesce(x, nan.cast(data_type))
    if name in _TO_FLOAT:
        return lambda x: functions.coalesce(x.cast(target), nan.cast(target))
    if name == "ArrayType":
        inner = _filled_element(data_type.elementType, target, functions)
        if inner is None:
            return None
        return lambda x: functions.transform(x, inner)
    return None


def _what(data_type: Any, target: str) -> str:
    name = type(data_type).__name__
    if name in _FLOATS:
        return "NaN"
    if name in _TO_FLOAT:
        return f"NaN, the column now {target}"
    if name in _TIMES:
        return "NaN, the column now float64 " + ("days" if name == "DateType" else "microseconds")
    if name == "StringType":
        return "''"
    if name == "BinaryType":
        return "b''"
    return "NaN (its elements)"


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
