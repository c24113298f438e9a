"""Fields from MDS columns and Spark schemas; batches as typed arrays."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import types as T

from shardstream.errors import ConfigurationError
from shardstream.loader.fields import Field, SparkHint, batch_arrays, fields_of, spark_hints


def test_spark_hints_say_booleans_and_ranks():
    schema = T.StructType([
        T.StructField("flag", T.BooleanType(), True),
        T.StructField("features", VectorUDT(), False),
        T.StructField("grid", T.ArrayType(T.ArrayType(T.FloatType())), True),
        T.StructField("flags", T.ArrayType(T.BooleanType()), True),
        T.StructField("label", T.LongType(), False),
    ])  # fmt: skip
    assert spark_hints(schema) == {
        "flag": SparkHint(True, 0, True),
        "features": SparkHint(False, 1, False),
        "grid": SparkHint(False, 2, True),
        "flags": SparkHint(False, 1, True),  # an array of bools is stored as an ndarray
        "label": SparkHint(False, 0, False),
    }


def test_fields_of_refines_encodings_with_hints():
    columns = {"flag": "uint8", "features": "ndarray:float32", "fixed": "ndarray:int16:2,3",
               "name": "str", "raw": "bytes", "meta": "json", "label": "int64"}  # fmt: skip
    hints = {"flag": SparkHint(True, 0, True), "features": SparkHint(False, 1, False)}
    fields = {f.name: f for f in fields_of(columns, hints)}
    assert list(fields) == list(columns)  # the dataset's order
    assert fields["flag"] == Field("flag", np.dtype(bool), (), True)
    assert fields["features"].shape == (None,)
    assert fields["fixed"].shape == (2, 3)
    assert fields["fixed"].dtype == np.int16
    assert fields["name"].is_text
    assert fields["raw"].is_text
    assert fields["meta"].is_text
    assert fields["label"] == Field("label", np.dtype("int64"), ())
    assert fields_of({"features": "ndarray:float32"})[0].shape is None  # no schema: rank unknown


@pytest.mark.parametrize("encoding", ["pkl", "jpeg", "int", "ndarray"])
def test_fields_of_refuses_untyped_columns(encoding: str):
    with pytest.raises(ConfigurationError, match="'c'"):
        fields_of({"c": encoding})


def test_batch_arrays_types_and_stacks():
    columns = {"flag": "uint8", "v": "ndarray:float32", "name": "str", "meta": "json"}
    hints = {"flag": SparkHint(True, 0, False), "v": SparkHint(False, 1, False)}
    fields = fields_of(columns, hints)
    rows = [{"flag": 1, "v": np.array([1, 2], "f4"), "name": "a", "meta": {"k": 1}},
            {"flag": 0, "v": np.array([3, 4], "f4"), "name": "b", "meta": [2]}]  # fmt: skip
    out = batch_arrays(rows, fields, columns)
    assert out["flag"].dtype == np.bool_
    assert out["flag"].tolist() == [True, False]
    assert out["v"].shape == (2, 2)
    assert out["v"].dtype == np.float32
    assert out["name"].tolist() == ["a", "b"]
    assert out["meta"].tolist() == ['{"k": 1}', "[2]"]


def test_ragged_arrays_in_a_batch_name_the_column():
    field = Field("v", np.dtype("f4"), (None,))
    with pytest.raises(ConfigurationError, match="'v' holds arrays of different shapes"):
        batch_arrays([{"v": np.zeros(2)}, {"v": np.zeros(3)}], [field], {"v": "ndarray:float32"})
