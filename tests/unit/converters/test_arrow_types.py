from __future__ import annotations

import pyarrow as pa
import pytest

from shardstream.converters import infer_columns, infer_encoding
from shardstream.errors import ConfigurationError

CASES = [
    (pa.int8(), "int8"),
    (pa.int16(), "int16"),
    (pa.int32(), "int32"),
    (pa.int64(), "int64"),
    (pa.uint8(), "uint8"),
    (pa.uint64(), "uint64"),
    (pa.float16(), "float16"),
    (pa.float32(), "float32"),
    (pa.float64(), "float64"),
    (pa.bool_(), "uint8"),
    (pa.decimal128(20, 4), "str_decimal"),
    (pa.decimal256(50, 2), "str_decimal"),
    (pa.string(), "str"),
    (pa.large_string(), "str"),
    (pa.binary(), "bytes"),
    (pa.large_binary(), "bytes"),
    (pa.binary(4), "bytes"),
    (pa.date32(), "int32"),
    (pa.date64(), "int32"),
    (pa.timestamp("us", tz="UTC"), "int64"),
    (pa.timestamp("ns"), "int64"),
    (pa.duration("us"), "int64"),
    (pa.time64("us"), "int64"),
    (pa.list_(pa.float64()), "ndarray:float64"),
    (pa.large_list(pa.int16()), "ndarray:int16"),
    (pa.list_(pa.bool_()), "ndarray:uint8"),
    (pa.list_(pa.list_(pa.int32())), "ndarray:int32"),
    (pa.list_(pa.float32(), 3), "ndarray:float32:3"),
    (pa.list_(pa.list_(pa.uint8(), 4), 2), "ndarray:uint8:2,4"),
    (pa.list_(pa.list_(pa.uint8(), 4)), "ndarray:uint8"),  # an outer variable level
    (pa.list_(pa.string()), "json"),
    (pa.struct([("a", pa.int32())]), "json"),
    (pa.map_(pa.string(), pa.int64()), "json"),
    (pa.dictionary(pa.int32(), pa.string()), "str"),
]


@pytest.mark.parametrize(("arrow_type", "encoding"), CASES, ids=[str(t) for t, _ in CASES])
def test_each_arrow_type_has_its_encoding(arrow_type: pa.DataType, encoding: str):
    assert infer_encoding(arrow_type, column="c") == encoding


def test_a_type_without_encoding_names_the_column_and_the_fix():
    with pytest.raises(
        ConfigurationError, match=r"column 'nothing'.*columns=\{'nothing': 'json'\}"
    ):
        infer_encoding(pa.null(), column="nothing")


def test_columns_follow_the_schema_order_and_refuse_duplicates():
    schema = pa.schema([("b", pa.int8()), ("a", pa.string())])
    assert list(infer_columns(schema).items()) == [("b", "int8"), ("a", "str")]
    with pytest.raises(ConfigurationError, match=r"repeated: \['a'\]"):
        infer_columns(pa.schema([("a", pa.int8()), ("a", pa.string())]))
