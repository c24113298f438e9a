"""converters.spark_types: the reference's Spark schema helpers, on shardstream's type mapping.

``infer_dataframe_schema`` reads nothing but ``dataframe.schema``, so a stand-in holding a real
``StructType`` takes the DataFrame's place here (no JVM); tests/integration/test_spark_convert.py
checks the same answers against a real DataFrame and what ``dataframe_to_mds`` writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import types as T

from shardstream import converters
from shardstream.converters import infer_dataframe_schema, is_json_compatible
from shardstream.errors import ShardstreamError


@dataclass
class Frame:
    """What infer_dataframe_schema reads of a DataFrame."""

    schema: T.StructType


def frame(**types: T.DataType) -> Frame:
    return Frame(T.StructType([T.StructField(name, t) for name, t in types.items()]))


def test_spark_to_mds_is_what_inference_gives_each_type():
    table = converters.SPARK_TO_MDS
    assert table[T.ByteType()] == "int8"  # the reference says uint8, losing the sign
    assert table[T.ShortType()] == "int16"
    assert table[T.BooleanType()] == "uint8"  # the reference has None: refused
    assert table[T.TimestampType()] == "int64"
    assert table[T.DateType()] == "int32"
    assert table[T.ArrayType(T.FloatType())] == "ndarray:float32"
    for spark_type, encoding in table.items():
        assert infer_dataframe_schema(frame(c=spark_type)) == {"c": encoding}


def test_the_reference_keys_are_all_there():
    reference_keys = [
        T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(),
        T.DoubleType(), T.DecimalType(), T.StringType(), T.BinaryType(), T.BooleanType(),
        T.TimestampType(), T.TimestampNTZType(), T.DateType(), T.DayTimeIntervalType(),
        T.ArrayType(T.IntegerType()), T.ArrayType(T.ShortType()), T.ArrayType(T.LongType()),
        T.ArrayType(T.FloatType()), T.ArrayType(T.DoubleType()),
    ]  # fmt: skip
    assert all(isinstance(converters.SPARK_TO_MDS.get(key), str) for key in reference_keys)


def test_importing_the_converters_imports_no_pyspark_until_spark_to_mds_is_read():
    code = (
        "import sys, shardstream.converters as c; print('pyspark' in sys.modules); "
        "c.SPARK_TO_MDS; print('pyspark' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)  # fmt: skip
    assert result.stdout.split() == ["False", "True"]


def test_inference_and_checks_of_user_columns():
    df = frame(id=T.LongType(), text=T.StringType(), tags=T.MapType(T.StringType(), T.LongType()))
    assert infer_dataframe_schema(df) == {"id": "int64", "text": "str", "tags": "json"}
    assert infer_dataframe_schema(df, {"id": "int64", "text": "json"}) is None
    assert infer_dataframe_schema(df, {"id": "int"}) is None  # the reference refuses 'int'
    for columns, message in [
        ({"x": "str"}, r"columns \['x'\] are not in the data"),
        ({"text": "int32"}, "column 'text' has Arrow type string"),
        ({"id": "nope"}, "nope"),
    ]:
        with pytest.raises(ValueError, match=message) as info:  # ValueError, as the reference's
            infer_dataframe_schema(df, columns)
        assert isinstance(info.value, ShardstreamError)


@pytest.mark.parametrize(
    ("spark_type", "compatible"),
    [
        (T.StringType(), True),
        (T.LongType(), True),  # the reference says False
        (T.DoubleType(), True),  # the reference says False
        (T.BooleanType(), True),
        (T.NullType(), True),
        (T.BinaryType(), False),
        (T.DecimalType(10, 2), False),
        (T.DateType(), False),
        (T.ArrayType(T.ArrayType(T.IntegerType())), True),
        (T.StructType([T.StructField("a", T.LongType()), T.StructField("b", T.DateType())]), False),
        (T.MapType(T.StringType(), T.ArrayType(T.FloatType())), True),
        (T.MapType(T.IntegerType(), T.StringType()), False),  # JSON keys are strings
    ],
)
def test_is_json_compatible(spark_type: T.DataType, compatible: bool):
    assert is_json_compatible(spark_type) is compatible


ATOMS = [T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(),
         T.DoubleType(), T.BooleanType(), T.StringType(), T.BinaryType(), T.DateType(),
         T.TimestampType(), T.DecimalType(12, 3)]  # fmt: skip
NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
           T.BooleanType)  # fmt: skip


def spark_types() -> st.SearchStrategy[Any]:
    def nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            inner.map(T.ArrayType),
            st.lists(inner, min_size=1, max_size=3).map(
                lambda ts: T.StructType([T.StructField(f"f{i}", t) for i, t in enumerate(ts)])
            ),
            st.tuples(st.sampled_from([T.StringType(), T.IntegerType()]), inner).map(
                lambda kv: T.MapType(*kv)
            ),
        )

    return st.recursive(st.sampled_from(ATOMS), nest, max_leaves=6)


def leaf(spark_type: Any) -> Any:
    while isinstance(spark_type, T.ArrayType):
        spark_type = spark_type.elementType
    return spark_type


@given(spark_type=spark_types())
def test_every_nested_spark_type_has_an_encoding(spark_type: Any):
    (encoding,) = infer_dataframe_schema(frame(c=spark_type)).values()  # type: ignore[union-attr]
    if isinstance(spark_type, (T.StructType, T.MapType)):
        assert encoding == "json"
    elif isinstance(spark_type, T.ArrayType):
        assert encoding.startswith("ndarray:") == isinstance(leaf(spark_type), NUMERIC)
    # Spark's own JSON rendering of the type, as an independent oracle: no binary, temporal or
    # decimal leaf, and no map keyed by anything but strings.
    text = json.dumps(spark_type.jsonValue())
    converted = ('"binary"', '"date"', '"timestamp"', '"decimal(', '"keyType": "integer"')
    assert is_json_compatible(spark_type) == (not any(name in text for name in converted))
