"""Which MDS encoding each Spark type gets: the reference's schema helpers, on one mapping.

``dataframe_to_mds`` goes through Arrow (:mod:`shardstream.converters.arrow_types` holds the
table), so ``SPARK_TO_MDS``, :func:`infer_dataframe_schema` and :func:`is_json_compatible`
answer from that same mapping rather than a second one: what they say is what the converter
writes. They take the place of mosaicml-streaming's ``streaming.base.converters`` helpers.
Importing this module imports no pyspark: ``SPARK_TO_MDS`` is built on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardstream._optional import require
from shardstream.converters.arrow_samples import BatchConverter
from shardstream.converters.arrow_types import infer_columns
from shardstream.errors import ConfigurationError

__all__ = [
    "SPARK_TO_MDS",
    "arrow_schema",
    "infer_dataframe_schema",
    "is_json_compatible",
    "vectors_as_arrays",
]

#: Spark type to MDS encoding (the reference's keys, shardstream's encodings); built on first
#: use, as it needs pyspark.
SPARK_TO_MDS: dict[Any, str]

# The atomic Spark types whose values are JSON values as they are.
_JSON_ATOMS = (
    "StringType", "ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType",
    "BooleanType", "NullType",
)  # fmt: skip


def _types() -> Any:
    return require("pyspark.sql.types", extra="spark", purpose="Spark schemas")


def vectors_as_arrays(dataframe: Any) -> Any:
    """``dataframe`` with its ML ``Vector`` columns (dense or sparse) as dense ``array<double>``."""
    vectors = [
        field.name
        for field in dataframe.schema.fields
        if type(field.dataType).__name__ == "VectorUDT"
    ]
    if not vectors:
        return dataframe
    functions = require("pyspark.ml.functions", extra="spark", purpose="ML vector columns")
    column = require("pyspark.sql.functions", extra="spark", purpose="ML vector columns").col
    for name in vectors:
        dataframe = dataframe.withColumn(name, functions.vector_to_array(column(name), "float64"))
    return dataframe


def arrow_schema(spark_schema: Any) -> Any:
    """The ``pyarrow.Schema`` Spark sends a ``StructType``'s rows in (timestamps in UTC).

    Raises:
        ConfigurationError: A type Arrow cannot carry; the message says to cast or drop it.
    """
    types = require("pyspark.sql.pandas.types", extra="spark", purpose="dataframe_to_mds")
    try:
        return types.to_arrow_schema(spark_schema, timezone="UTC")
    except TypeError as exc:
        raise ConfigurationError(
            f"the DataFrame's schema has a type Arrow cannot carry ({exc}); cast or drop "
            f"that column first"
        ) from exc


def infer_dataframe_schema(
    dataframe: Any, user_defined_cols: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """The columns ``dataframe_to_mds`` writes a DataFrame with, or a check of yours.

    The reference's function of the same name, answered from shardstream's type mapping:
    every Spark type Arrow carries has an encoding (booleans, dates and timestamps included,
    which the reference refuses), and small integers keep their sign (``ByteType`` is
    ``int8``, where the reference says ``uint8``).

    Args:
        dataframe: A ``pyspark.sql.DataFrame`` (only its schema is read).
        user_defined_cols: Column name to MDS encoding, to check against the DataFrame.

    Returns:
        The inferred column name to encoding, or ``None`` when ``user_defined_cols`` was
        given and fits.

    Raises:
        ConfigurationError: A column is not in the DataFrame, an encoding cannot hold its
            column's type, or a type has no encoding (a ``ValueError``, as the reference's).
        UnknownEncodingError: An encoding no one registered (a ``ValueError`` too).

    Example:
        df = spark.createDataFrame([(1, "a")], "id long, text string")
        infer_dataframe_schema(df)  # {"id": "int64", "text": "str"}
        infer_dataframe_schema(df, {"id": "int64", "text": "json"})  # None: it fits
    """
    schema = arrow_schema(vectors_as_arrays(dataframe).schema)
    if user_defined_cols is None:
        return infer_columns(schema)
    BatchConverter(schema, user_defined_cols)  # refuses what it could not write
    return None


def is_json_compatible(data_type: Any) -> bool:
    """Whether a Spark type's values are JSON values as they are (no conversion on the way).

    Strings, numbers, booleans and nulls, and arrays, structs and string-keyed maps of them.
    (A ``json`` column takes any type: others are converted, decimals and dates to text, for
    example; see docs/converters.md.) Unlike the reference, ``LongType`` and ``DoubleType``
    count, and a map with non-string keys does not (JSON object keys are strings).

    Args:
        data_type: A ``pyspark.sql.types.DataType``.

    Example:
        from pyspark.sql.types import ArrayType, LongType, MapType, StringType
        is_json_compatible(MapType(StringType(), ArrayType(LongType())))  # True
    """
    types = _types()
    if isinstance(data_type, types.StructType):
        return all(is_json_compatible(field.dataType) for field in data_type.fields)
    if isinstance(data_type, types.ArrayType):
        return is_json_compatible(data_type.elementType)
    if isinstance(data_type, types.MapType):
        return isinstance(data_type.keyType, types.StringType) and is_json_compatible(
            data_type.valueType
        )
    return isinstance(data_type, tuple(getattr(types, name) for name in _JSON_ATOMS))


def _spark_to_mds() -> dict[Any, str]:
    """Spark type to MDS encoding, for the types the reference's ``SPARK_TO_MDS`` lists."""
    types = _types()
    atoms = [
        types.ByteType(), types.ShortType(), types.IntegerType(), types.LongType(),
        types.FloatType(), types.DoubleType(), types.DecimalType(), types.StringType(),
        types.BinaryType(), types.BooleanType(), types.TimestampType(),
        types.TimestampNTZType(), types.DateType(), types.DayTimeIntervalType(),
    ]  # fmt: skip
    arrays = [types.ArrayType(atom) for atom in atoms[:6]]
    keys = [*atoms, *arrays]
    fields = [types.StructField(f"c{i}", key) for i, key in enumerate(keys)]
    encodings = infer_columns(arrow_schema(types.StructType(fields)))
    return {key: encodings[field.name] for key, field in zip(keys, fields, strict=True)}


def __getattr__(name: str) -> Any:
    if name == "SPARK_TO_MDS":  # built once, on first use: it needs pyspark
        value = globals()[name] = _spark_to_mds()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
