"""Petastorm's own batch-reader tests on plain Parquet (``test_parquet_reader.py``), ported.

The dataset is Petastorm's ``scalar_dataset``: 100 rows written by a real local Spark without a
Unischema, in 4 files of many row groups (tests/petastorm_testschema.py). Each test keeps
Petastorm's name and asserts what Petastorm's asserts; where shardstream differs on purpose,
the test says how. Tests of Petastorm's internals (``ArrowReaderWorker``'s helpers, its workers
pool, mocks of its row loading) are ported as far as they read through the public readers.
"""

from __future__ import annotations

import glob
import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from tests.petastorm_testschema import create_test_scalar_dataset

from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm import (
    TransformSpec,
    in_lambda,
    make_batch_reader,
    make_reader,
)

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]


class Dataset:
    def __init__(self, url: str, data: list[dict[str, Any]]) -> None:
        self.url, self.path, self.data = url, url.removeprefix("file://"), data


@pytest.fixture(scope="module")
def scalar_dataset(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    url = f"file://{tmp_path_factory.mktemp('petastorm-scalar') / 'scalar'}"
    return Dataset(url, create_test_scalar_dataset(spark, url, 100))


@pytest.fixture(scope="module")
def many_columns_non_petastorm_dataset(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Dataset:
    """Petastorm's create_many_columns_non_petastorm_dataset: 1000 int32 columns, 10 rows."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    names = [f"col_{k}" for k in range(1000)]
    data = [dict.fromkeys(names, i * 10000) for i in range(10)]
    schema = StructType([StructField(name, IntegerType(), False) for name in names])
    url = f"file://{tmp_path_factory.mktemp('petastorm-many') / 'many'}"
    spark.createDataFrame([tuple(row.values()) for row in data], schema).coalesce(4) \
        .write.option("compression", "none").mode("overwrite").parquet(url)  # fmt: skip
    return Dataset(url, data)


def dummy(url: Any, **kwargs: Any) -> Any:
    return make_batch_reader(url, reader_pool_type="dummy", **kwargs)


def thread(url: Any, **kwargs: Any) -> Any:
    return make_batch_reader(url, reader_pool_type="thread", **kwargs)


def process(url: Any, **kwargs: Any) -> Any:
    return make_batch_reader(url, reader_pool_type="process", **kwargs)


def _check_simple_reader(reader: Any, expected_data: list[dict[str, Any]]) -> None:
    names = expected_data[0].keys()
    count = 0
    for row in reader:
        actual = row._asdict()
        for i, id_value in enumerate(actual["id"]):
            expected = next(d for d in expected_data if d["id"] == id_value)
            for field in names:
                np.testing.assert_equal(actual[field][i, ...], expected[field])
        count += len(actual["id"])
    assert count == len(expected_data)


def _get_bad_field_name(field_list: list[str]) -> str:
    bad_field = field_list[0]
    while bad_field in field_list:
        bad_field += "VR46"
    return bad_field


def _ids(reader: Any) -> list[Any]:
    return list(itertools.chain(*[row.id for row in reader]))


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_simple_read(scalar_dataset: Dataset, reader_factory: Any):
    with reader_factory(scalar_dataset.url) as reader:
        _check_simple_reader(reader, scalar_dataset.data)


def test_simple_read_from_a_single_file(scalar_dataset: Dataset):
    one_parquet_file = glob.glob(f"{scalar_dataset.path}/**.parquet")[0]
    with dummy(f"file://{one_parquet_file}") as reader:
        all_data = list(reader)
    assert len(all_data) > 0


def test_specify_columns_to_read(scalar_dataset: Dataset):
    with dummy(scalar_dataset.url, schema_fields=["id", "float.*$"]) as reader:
        sample = next(reader)
        assert set(sample._asdict().keys()) == {"id", "float64"}
        assert sample.float64.size > 0


def test_many_columns_non_petastorm_dataset(many_columns_non_petastorm_dataset: Dataset):
    with dummy(many_columns_non_petastorm_dataset.url) as reader:
        sample = next(reader)
        assert set(sample._fields) == set(many_columns_non_petastorm_dataset.data[0].keys())


def test_partitioned_field_is_not_queried(spark: Any, tmp_path: Path):
    url = f"file://{tmp_path}"
    data = create_test_scalar_dataset(spark, url, 10, partition_by=["id"])
    with dummy(url, schema_fields=["string"]) as reader:
        all_rows = list(reader)
    # Petastorm yields one batch per row group (one row each here); shardstream's batches hold
    # the largest row group's count of rows, so the rows are counted rather than the batches.
    assert len(data) == sum(len(row.string) for row in all_rows)
    assert all_rows[0]._fields == ("string",)


def test_asymetric_parquet_pieces(spark: Any, tmp_path: Path):
    url = f"file://{tmp_path}"
    rows_count = 1000
    create_test_scalar_dataset(spark, url, rows_count, partition_by=["id_div_700"])
    files = glob.glob(f"{tmp_path}/**/*.parquet", recursive=True)
    row_group_counts = {pq.ParquetFile(path).metadata.num_row_groups for path in files}
    assert len(row_group_counts) > 1
    with dummy(url, schema_fields=["id"]) as reader:
        actual_row_ids = _ids(reader)
    assert rows_count == len(actual_row_ids)


def test_invalid_column_name(scalar_dataset: Dataset):
    bad_field = _get_bad_field_name(list(scalar_dataset.data[0].keys()))
    with pytest.raises(RuntimeError, match=f"No fields matching the criteria.*{bad_field}.*"):
        dummy(scalar_dataset.url, schema_fields=[bad_field])


def test_invalid_and_valid_column_names(scalar_dataset: Dataset):
    all_fields = list(scalar_dataset.data[0].keys())
    bad_field = _get_bad_field_name(all_fields)
    with dummy(scalar_dataset.url, schema_fields=[bad_field, all_fields[1]]) as reader:
        sample = next(reader)._asdict()
        assert len(sample) == 1
        assert bad_field not in sample


def _tensor_spec(keys: list[str]) -> TransformSpec:
    rng = np.random.default_rng(0)

    def preproc_fn1(x: Any) -> Any:
        return pd.DataFrame({
            "tensor_col_1": x["id"].map(lambda _: rng.random((2, 3))),
            "tensor_col_2": x["id"].map(lambda _: rng.random((3, 4, 5))),
        })  # fmt: skip

    edit_fields = [("tensor_col_1", np.float32, (2, 3), False),
                   ("tensor_col_2", np.float32, (3, 4, 5), False)]  # fmt: skip
    return TransformSpec(preproc_fn1, edit_fields=edit_fields, removed_fields=keys)


@pytest.mark.parametrize("convert_early_to_numpy", [False, True])
def test_transform_spec_support_return_tensor(
    scalar_dataset: Dataset, convert_early_to_numpy: bool
):
    # Also Petastorm's ..._with_convert_early_to_numpy. Their first half calls Petastorm's
    # private ArrowReaderWorker._check_shape_and_ravel, which has no counterpart here (a
    # transform's arrays are stacked by their shape as returned): not ported.
    spec = _tensor_spec(list(scalar_dataset.data[0].keys()))
    with dummy(scalar_dataset.url, transform_spec=spec,
               convert_early_to_numpy=convert_early_to_numpy) as reader:  # fmt: skip
        sample = next(reader)._asdict()
        assert len(sample) == 2
        assert sample["tensor_col_1"].shape[1:] == (2, 3)
        assert sample["tensor_col_2"].shape[1:] == (3, 4, 5)
    if not convert_early_to_numpy:
        return

    def simple_transform_fn(x: Any) -> Any:
        return pd.DataFrame({"transformed_id": x["id"] * 2, "string_field": x["string"]})

    simple_spec = TransformSpec(
        simple_transform_fn,
        edit_fields=[("transformed_id", np.int32, (), False), ("string_field", np.str_, (), False)],
        removed_fields=list(scalar_dataset.data[0].keys()),
    )
    with dummy(scalar_dataset.url, transform_spec=simple_spec,
               predicate=in_lambda(["id"], lambda x: x >= 0),
               convert_early_to_numpy=True) as reader:  # fmt: skip
        sample = next(reader)._asdict()
        assert len(sample) == 2
        assert "transformed_id" in sample
        assert "string_field" in sample
        assert np.all(sample["transformed_id"] >= 0)


@pytest.mark.parametrize("partition_by", [["string"], ["id"], ["string", "id"]])
def test_string_partition(spark: Any, tmp_path: Path, partition_by: list[str]):
    url = f"file://{tmp_path}"
    data = create_test_scalar_dataset(spark, url, 10, partition_by=partition_by)
    with dummy(url) as reader:
        actual_row_ids = _ids(reader)
    assert len(data) == len(actual_row_ids)


def test_shuffle_per_row_group(scalar_dataset: Dataset):
    reader_factory: Any
    for reader_factory in [make_batch_reader, make_reader]:
        with reader_factory(scalar_dataset.url, reader_pool_type="dummy",
                            shuffle_rows=True, shuffle_row_groups=False) as reader:  # fmt: skip
            row_ids_batched = [row.id for row in reader]
        if reader_factory == make_batch_reader:
            actual_row_ids = list(itertools.chain(*row_ids_batched))
        else:
            actual_row_ids = row_ids_batched
        assert len(scalar_dataset.data) == len(actual_row_ids)
        assert not np.array_equal(list(np.arange(len(scalar_dataset.data))), actual_row_ids)


def test_random_seed(scalar_dataset: Dataset):
    reader_factory: Any
    for reader_factory in [make_batch_reader, make_reader]:
        results = []
        for _ in range(2):
            with reader_factory(scalar_dataset.url, reader_pool_type="dummy", shuffle_rows=True,
                                seed=123, shuffle_row_groups=True, cur_shard=0,
                                shard_count=2) as reader:  # fmt: skip
                row_ids_batched = [row.id for row in reader]
            if reader_factory == make_batch_reader:
                results.append(list(itertools.chain(*row_ids_batched)))
            else:
                results.append(row_ids_batched)
        np.testing.assert_equal(results[0], results[1])


def test_results_queue_size_propagation_in_make_batch_reader(scalar_dataset: Dataset):
    # Petastorm checks its thread pool's queue size, which shardstream has no counterpart of
    # (it prefetches by row groups): the argument is accepted, by name and in its place.
    with make_batch_reader(scalar_dataset.url, reader_pool_type="thread",
                           results_queue_size=42) as batch_reader:  # fmt: skip
        assert len(_ids(batch_reader)) == len(scalar_dataset.data)
    with make_batch_reader(scalar_dataset.url, None, "thread", 10, 42) as batch_reader:
        assert len(_ids(batch_reader)) == len(scalar_dataset.data)


@pytest.mark.parametrize("convert_early_to_numpy", [False, True])
def test_shuffle_with_cache_epoch_variation(
    scalar_dataset: Dataset, tmp_path: Path, convert_early_to_numpy: bool
):
    cache_location = str(tmp_path / "cache")
    with make_batch_reader(scalar_dataset.url, reader_pool_type="dummy", cache_type="local-disk",
                           cache_location=cache_location, cache_size_limit=1000000,
                           cache_row_size_estimate=100, shuffle_rows=True, seed=42, num_epochs=3,
                           convert_early_to_numpy=convert_early_to_numpy) as reader:  # fmt: skip
        all_ids = _ids(reader)
        assert os.path.exists(cache_location)
    size = len(scalar_dataset.data)
    epochs = [np.array(all_ids[k * size : (k + 1) * size]) for k in range(3)]
    np.testing.assert_array_equal(sorted(epochs[0]), sorted(epochs[1]))
    np.testing.assert_array_equal(sorted(epochs[1]), sorted(epochs[2]))
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])
    assert not np.array_equal(epochs[0], epochs[2])
    with make_batch_reader(scalar_dataset.url, reader_pool_type="dummy", cache_type="local-disk",
                           cache_location=cache_location + "_no_shuffle",
                           cache_size_limit=1000000, cache_row_size_estimate=100,
                           shuffle_rows=False,
                           convert_early_to_numpy=convert_early_to_numpy) as plain:  # fmt: skip
        no_shuffle_all_ids = np.array(_ids(plain))
    assert not np.array_equal(no_shuffle_all_ids, epochs[0])


def test_shuffle_cache_pyarrow_num_rows_zero(spark: Any, tmp_path: Path):
    # Petastorm's first half; its second half (and test_shuffle_cache_num_rows_zero) patch
    # Petastorm's private ArrowReaderWorker._load_rows with a mock, which has no counterpart.
    url = f"file://{tmp_path / 'small_dataset'}"
    create_test_scalar_dataset(spark, url, 4)
    with make_batch_reader(url, reader_pool_type="dummy", cache_type="local-disk",
                           cache_location=str(tmp_path / "cache"), cache_size_limit=1000000,
                           cache_row_size_estimate=100, shuffle_rows=True, seed=42,
                           convert_early_to_numpy=False) as reader:  # fmt: skip
        batches = list(reader)
    assert len(batches) > 0
    assert sum(len(batch.id) for batch in batches) > 0


def test_convert_early_to_numpy(scalar_dataset: Dataset):
    one_parquet_file = glob.glob(f"{scalar_dataset.path}/**.parquet")[0]
    with dummy(f"file://{one_parquet_file}", convert_early_to_numpy=True) as reader:
        all_data = list(reader)
        assert len(all_data) > 0


def test_convert_early_to_numpy_with_transform_spec(scalar_dataset: Dataset):
    with dummy(scalar_dataset.url, schema_fields=["id", "float.*$"],
               convert_early_to_numpy=True) as reader:  # fmt: skip
        sample = next(reader)
        assert set(sample._asdict().keys()) == {"id", "float64"}
        assert sample.float64.size > 0


# Petastorm's test_end_to_end.py tests on the scalar dataset.


def test_transform_function_batched(scalar_dataset: Dataset):
    # Petastorm patches its Unischema's field order to alphabetical; ours keeps the files' order,
    # which Spark wrote alphabetically here, so no patch is needed.
    def double_float64(sample: Any) -> Any:
        sample["float64"] *= 2
        return sample

    with make_batch_reader(scalar_dataset.url,
                           transform_spec=TransformSpec(double_float64)) as reader:  # fmt: skip
        actual = next(reader)
        for actual_id, actual_float64 in zip(actual.id, actual.float64, strict=True):
            original_sample = next(d for d in scalar_dataset.data if d["id"] == actual_id)
            np.testing.assert_equal(original_sample["float64"] * 2, actual_float64)


def test_transform_function_batched_deleting_column(scalar_dataset: Dataset):
    def double_float64(sample: Any) -> Any:
        del sample["float64"]
        return sample

    spec = TransformSpec(double_float64, removed_fields=["float64"])
    with make_batch_reader(scalar_dataset.url, transform_spec=spec) as reader:
        actual = next(reader)
        assert "float64" not in actual._fields


def test_transform_function_batched_auto_deleting_column(scalar_dataset: Dataset):
    spec = TransformSpec(removed_fields=["float64"])
    with make_batch_reader(scalar_dataset.url, transform_spec=spec) as reader:
        actual = next(reader)
        assert "float64" not in actual._fields


def test_transform_function_with_predicate_batched(scalar_dataset: Dataset):
    def double_float64(sample: Any) -> Any:
        assert all(sample["id"] % 2 == 0)
        sample["float64"] *= 2
        return sample

    even = in_lambda(["id"], lambda id: id % 2 == 0)
    spec = TransformSpec(double_float64)
    with make_batch_reader(scalar_dataset.url, transform_spec=spec, predicate=even) as reader:
        actual = next(reader)
        for actual_id, actual_float64 in zip(actual.id, actual.float64, strict=True):
            assert actual_id % 2 == 0
            original_sample = next(d for d in scalar_dataset.data if d["id"] == actual_id)
            np.testing.assert_equal(original_sample["float64"] * 2, actual_float64)


def test_make_batch_reader_with_url_list(scalar_dataset: Dataset):
    url_list = [f"file://{scalar_dataset.path}/{name}" for name in os.listdir(scalar_dataset.path)]
    url_list = [url for url in url_list if url.endswith(".parquet")]
    with make_batch_reader(url_list, workers_count=1) as reader:
        row_count = 0
        for batch in reader:
            row_count += len(batch.id)
        assert row_count == 100


def test_a_url_list_reads_only_its_files_with_their_partitions(spark: Any, tmp_path: Path):
    # Not Petastorm's: two of the partitioned files, given as paths, read with their partition
    # column (from the folders under the files' common folder), and a mix of file systems.
    url = f"file://{tmp_path}"
    data = create_test_scalar_dataset(spark, url, 50, num_files=1, partition_by=["string2"])
    files = sorted(glob.glob(f"{tmp_path}/string2=world_1*/*.parquet"))
    assert len(files) == 11  # world_1 and world_10 .. world_19
    with make_batch_reader(files, schema_fields=["id", "string2"]) as reader:
        batches = list(reader)
    ids = sorted(int(i) for batch in batches for i in batch.id)
    assert ids == sorted(int(r["id"]) for r in data if str(r["string2"]).startswith("world_1"))
    assert {str(s) for batch in batches for s in batch.string2} == {
        str(r["string2"]) for r in data if int(r["id"]) in ids
    }
    with pytest.raises(ConfigurationError, match="2 file systems"):
        make_batch_reader([files[0], "s3://bucket/x.parquet"])


def test_pyarrow_filters_make_batch_reader(spark: Any, tmp_path: Path):
    url = f"file://{tmp_path}"
    create_test_scalar_dataset(spark, url, 3000, partition_by=["id_div_700"])
    with make_batch_reader(url, filters=[("id_div_700", "=", 2)]) as reader:
        uv = set()
        for data in reader:
            for _id_div_700 in data.id_div_700:
                uv.add(_id_div_700)
        assert uv == {2}
