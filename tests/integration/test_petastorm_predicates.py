"""Petastorm's own predicate tests (``petastorm/tests/test_predicates.py``), ported.

The predicates are asked as Petastorm asks them; the reader cases run on the
``synthetic_dataset`` of tests/integration/test_petastorm_end_to_end.py and on a dataset
partitioned by an integer field, written by a real local Spark through ``materialize_dataset``
(the rows are encoded on the driver, so Spark's workers need not import shardstream).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream.loader.petastorm import (
    ScalarCodec,
    Unischema,
    UnischemaField,
    dict_to_spark_row,
    in_intersection,
    in_lambda,
    in_negate,
    in_pseudorandom_split,
    in_reduce,
    in_set,
    make_reader,
    materialize_dataset,
)

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)
from .test_petastorm_end_to_end import Synthetic, TestSchema
from .test_petastorm_end_to_end import synthetic_dataset as synthetic_dataset_fixture  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]


@pytest.fixture(name="synthetic_dataset", scope="module")
def synthetic(synthetic_dataset_fixture: Synthetic) -> Synthetic:  # noqa: F811
    return synthetic_dataset_fixture


@pytest.fixture(scope="module")
def all_values() -> set[str]:
    return {f"guid_{i}" for i in range(10000)}


def _included(predicate: Any, field: str, values: Any) -> set[Any]:
    return {val for val in values if predicate.do_include({field: val})}


def test_inclusion(all_values: set[str]):
    for values in [{"guid_2", "guid_1"}, {"guid_5", "guid_XXX"}, {"guid_2"}]:
        test_predicate = in_set(values, "volume_guid")
        assert _included(test_predicate, "volume_guid", all_values) == all_values & values


def test_list_inclusion(all_values: set[str]):
    for values in [{"guid_2", "guid_1"}, {"guid_5", "guid_XXX"}, {"guid_XX"}]:
        test_predicate = in_intersection(values, "volume_guid")
        included = test_predicate.do_include({"volume_guid": list(all_values)})
        assert included != all_values.intersection(values)


def test_custom_function(all_values: set[str]):
    for value in ["guid_2", "guid_1", "guid_5", "guid_XXX", "guid_XX"]:
        test_predicate = in_lambda(["volume_guids"],
                                   lambda volume_guids, val=value: val in volume_guids)  # fmt: skip
        assert test_predicate.do_include({"volume_guids": all_values}) == (value in all_values)


def test_custom_function_with_state(all_values: set[str]):
    counter = [0]

    def pred_func(volume_guids: str, cntr: list[int]) -> bool:
        cntr[0] += 1
        return volume_guids in all_values

    test_predicate = in_lambda(["volume_guids"], pred_func, counter)
    for value in ["guid_2", "guid_1", "guid_5", "guid_XXX", "guid_XX"]:
        assert test_predicate.do_include({"volume_guids": value}) == (value in all_values)
    assert counter[0] == 5


def test_negation(all_values: set[str]):
    for values in [{"guid_2", "guid_1"}, {"guid_5", "guid_9"}, {"guid_2"}]:
        test_predicate = in_negate(in_set(values, "volume_guid"))
        assert _included(test_predicate, "volume_guid", all_values) == all_values - values


@pytest.mark.parametrize(("reduce", "combine"), [(all, set.intersection), (any, set.union)])
def test_and_argegarion_or_argegarion(all_values: set[str], reduce: Any, combine: Any):
    # Petastorm's test_and_argegarion (all) and test_or_argegarion (any).
    for values1 in [{"guid_0", "guid_1"}, {"guid_3", "guid_6", "guid_20"}, {"guid_2"}]:
        for values2 in [{"guid_2", "guid_1"}, {"guid_5", "guid_9"}, {"guid_2"}]:
            test_predicate = in_reduce(
                [in_set(values1, "volume_guid"), in_set(values2, "volume_guid")], reduce
            )
            included = _included(test_predicate, "volume_guid", all_values)
            assert included == combine(values1, values2)


def test_pseudorandom_split_on_string_field(all_values: set[str]):
    split_list = [0.3, 0.4, 0.1, 0.0, 0.2]
    for idx in range(len(split_list)):
        test_predicate = in_pseudorandom_split(split_list, idx, "string_partition_field")
        included = _included(test_predicate, "string_partition_field", all_values)
        expected_num = len(all_values) * split_list[idx]
        assert pytest.approx(len(included), expected_num * 0.1) == expected_num


def test_pseudorandom_split_on_integer_field():
    split_list = [0.3, 0.4, 0.1, 0.0, 0.2]
    int_values = list(range(1000))
    for idx in range(len(split_list)):
        test_predicate = in_pseudorandom_split(split_list, idx, "int_partitioning_field")
        included = _included(test_predicate, "int_partitioning_field", int_values)
        expected_num = len(int_values) * split_list[idx]
        assert pytest.approx(len(included), expected_num * 0.1) == expected_num


@pytest.mark.parametrize("convert_early_to_numpy", [False, True])
def test_predicate_on_single_column(synthetic_dataset: Synthetic, convert_early_to_numpy: bool):
    # Also Petastorm's ..._with_convert_early_to_numpy (the argument is accepted, not used).
    reader = make_reader(synthetic_dataset.url, schema_fields=[TestSchema.id2],
                         predicate=in_lambda(["id2"], lambda id2: True), reader_pool_type="dummy",
                         convert_early_to_numpy=convert_early_to_numpy)  # fmt: skip
    counter = 0
    with reader:
        for row in reader:
            counter += 1
            assert dict(row._asdict())["id2"] < 2
    assert counter == len(synthetic_dataset.data)


@pytest.mark.parametrize("convert_early_to_numpy", [False, True])
def test_predicate_on_partitioned_dataset(spark: Any, tmp_path: Path, convert_early_to_numpy: bool):
    # Also Petastorm's ..._with_convert_early_to_numpy.
    from pyspark.sql.types import IntegerType

    schema = Unischema("TestSchema", [
        UnischemaField("id", np.int32, (), ScalarCodec(IntegerType()), False),
        UnischemaField("test_field", np.int32, (), ScalarCodec(IntegerType()), False),
    ])  # fmt: skip
    dataset_url = f"file://{tmp_path}/partitioned_test_dataset"
    with materialize_dataset(spark, dataset_url, schema, 256):
        rows = [dict_to_spark_row(schema, {"id": x, "test_field": x * x}) for x in range(10)]
        spark.createDataFrame(rows, schema.as_spark_schema()).write.partitionBy("id") \
            .parquet(dataset_url)  # fmt: skip
    options: dict[str, Any] = {"convert_early_to_numpy": convert_early_to_numpy}
    with make_reader(dataset_url, predicate=in_lambda(["id"], lambda x: x == 3),
                     **options) as reader:  # fmt: skip
        assert next(reader).id == 3
    with make_reader(dataset_url, predicate=in_lambda(["id"], lambda x: x == "3"),
                     **options) as reader, pytest.raises(StopIteration):  # fmt: skip
        next(reader)
