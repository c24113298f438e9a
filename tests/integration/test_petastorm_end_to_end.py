"""Petastorm's own reader tests (``petastorm/tests/test_end_to_end.py``, 0.13.1), ported.

The dataset is Petastorm's ``synthetic_dataset``: 100 rows of its ``TestSchema`` written by a
real local Spark through our ``materialize_dataset`` and ``dict_to_spark_row``
(tests/petastorm_testschema.py). Each test keeps Petastorm's name and body; where shardstream
differs on purpose, the test says how, and asserts what shardstream does (docs/parquet.md).
Tests of features not provided (row-group indexes, NGrams) are not ported.
"""

from __future__ import annotations

import json
import operator
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.petastorm_testschema import create_test_dataset, petastorm_test_schema

from shardstream.loader.petastorm import (
    CompressedImageCodec,
    PredicateBase,
    ScalarCodec,
    TransformSpec,
    Unischema,
    UnischemaField,
    in_lambda,
    make_batch_reader,
    make_reader,
)
from shardstream.loader.petastorm.metadata import ROW_GROUPS_PER_FILE_KEY, UNISCHEMA_KEY

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]
TestSchema = petastorm_test_schema()
ROWS = 100


class Synthetic:
    def __init__(self, url: str, data: list[dict[str, Any]]) -> None:
        self.url, self.path, self.data = url, url.removeprefix("file://"), data


@pytest.fixture(scope="module")
def synthetic_dataset(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    url = f"file://{tmp_path_factory.mktemp('petastorm-e2e') / 'synthetic'}"
    return Synthetic(url, create_test_dataset(spark, url, range(ROWS)))


def dummy(url: Any, **kwargs: Any) -> Any:
    return make_reader(url, reader_pool_type="dummy", **kwargs)


def thread(url: Any, **kwargs: Any) -> Any:
    return make_reader(url, reader_pool_type="thread", **kwargs)


def process(url: Any, **kwargs: Any) -> Any:
    return make_reader(url, reader_pool_type="process", workers_count=2, **kwargs)


def batch_dummy(url: Any, **kwargs: Any) -> Any:
    return make_batch_reader(url, reader_pool_type="dummy", **kwargs)


MINIMAL = [dummy]
ALL = [dummy, thread, process]
SCALAR_ONLY = [batch_dummy]


class PartitionKeyInSetPredicate(PredicateBase):
    def __init__(self, inclusion_values: set[str]) -> None:
        self._inclusion_values = inclusion_values

    def get_fields(self) -> set[str]:
        return {"partition_key"}

    def do_include(self, values: Any) -> Any:
        return values["partition_key"] in self._inclusion_values


class EqualPredicate(PredicateBase):
    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def get_fields(self) -> set[str]:
        return set(self._values)

    def do_include(self, values: Any) -> Any:
        return self._values == values


class VectorizedEqualPredicate(PredicateBase):
    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def get_fields(self) -> set[str]:
        return set(self._values)

    def do_include(self, values: Any) -> Any:
        # Petastorm's starts from a list, which pandas now warns about ANDing with a Series.
        result: Any = np.ones(len(values), dtype=bool)
        for field_name in self._values:
            result &= values[field_name] == self._values[field_name]
        return result


def _check_simple_reader(reader: Any, expected_data: list[dict[str, Any]]) -> None:
    def _type(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return "|S" if v.dtype.str.startswith("|S") else v.dtype
        return type(v)

    count = 0
    for row in reader:
        actual = row._asdict()
        expected = next(d for d in expected_data if d["id"] == actual["id"])
        np.testing.assert_equal(actual, expected)
        assert {k: _type(v) for k, v in actual.items()} == {
            k: _type(v) for k, v in expected.items()
        }
        count += 1
    assert count == len(expected_data)


def _readout_all_ids(reader: Any, limit: int | None = None) -> list[Any]:
    ids = []
    for i, row in enumerate(reader):
        if limit is not None and i >= limit:
            break
        ids.append(row.id)
    if isinstance(ids[0], np.ndarray):
        ids = [i for arr in ids for i in arr]
    return ids


@pytest.mark.parametrize("reader_factory", ALL)
def test_simple_read(synthetic_dataset: Synthetic, reader_factory: Any):
    with reader_factory(synthetic_dataset.url) as reader:
        _check_simple_reader(reader, synthetic_dataset.data)


def test_simple_read_from_parquet_file(synthetic_dataset: Synthetic):
    one_parquet_file = sorted(Path(synthetic_dataset.path).glob("**/*.parquet"))[0]
    with dummy(f"file://{one_parquet_file}") as reader:
        all_data_from_file = list(reader)
    assert len(all_data_from_file) > 0
    with dummy([f"file://{one_parquet_file}", f"file://{one_parquet_file}"]) as reader:
        all_data_from_file_twice = list(reader)
    assert len(all_data_from_file) < len(all_data_from_file_twice)


def thread_batch(url: Any, **kwargs: Any) -> Any:
    return make_batch_reader(url, reader_pool_type="thread", **kwargs)


@pytest.mark.parametrize("reader_factory", [thread, thread_batch])
def test_shuffle_order_determinism(synthetic_dataset: Synthetic, reader_factory: Any):
    def ids(**kwargs: Any) -> list[Any]:
        with reader_factory(synthetic_dataset.url, **kwargs) as reader:
            return _readout_all_ids(reader)

    plain: dict[str, Any] = {"shuffle_rows": False, "shuffle_row_groups": False}
    shuffled: dict[str, Any] = {"shuffle_rows": True, "shuffle_row_groups": True}
    no_shuffle_readout_1 = ids(**plain)
    np.testing.assert_array_equal(no_shuffle_readout_1, ids(**plain))
    np.testing.assert_array_equal(no_shuffle_readout_1, [r["id"] for r in synthetic_dataset.data])
    shuffle_same_seed_1 = ids(**shuffled, seed=42)
    np.testing.assert_array_equal(shuffle_same_seed_1, ids(**shuffled, seed=42))
    shuffle_different_seed = ids(**shuffled, seed=123)
    assert not np.array_equal(shuffle_same_seed_1, shuffle_different_seed)
    assert not np.array_equal(no_shuffle_readout_1, shuffle_same_seed_1)
    assert (
        sorted(no_shuffle_readout_1)
        == sorted(shuffle_same_seed_1)
        == sorted(shuffle_different_seed)
    )


def test_shuffle_drop_ratio(synthetic_dataset: Synthetic):
    # Petastorm drops a part of each row group per epoch pass (shuffle_row_drop_partitions) to
    # decorrelate rows, and asserts that more partitions give fewer consecutive ids. Here every
    # shuffle is over all rows of the epoch, so the argument is accepted and not used: the first
    # half holds; the second is asserted as what shardstream does (every order as shuffled).
    with dummy(synthetic_dataset.url, shuffle_row_groups=False,
               shuffle_row_drop_partitions=1) as reader:  # fmt: skip
        first_readout = _readout_all_ids(reader)
    np.testing.assert_array_equal([r["id"] for r in synthetic_dataset.data], sorted(first_readout))
    for shuffle_dropout in [2, 5, 8]:
        with dummy(synthetic_dataset.url, shuffle_row_groups=True,
                   shuffle_row_drop_partitions=shuffle_dropout) as reader:  # fmt: skip
            readout = _readout_all_ids(reader)
        assert len(first_readout) == len(readout)
        assert np.sum(np.diff(readout) != 1) > len(readout) * 0.9


def test_predicate_on_partition_batched(synthetic_dataset: Synthetic):
    for expected_partition_keys in [{"p_0", "p_2"}, {"p_0"}, {"p_1", "p_2"}]:
        predicate = PartitionKeyInSetPredicate(expected_partition_keys)
        with batch_dummy(synthetic_dataset.url, predicate=predicate) as reader:
            partition_keys: set[str] = set()
            for row in reader:
                partition_keys |= set(row.partition_key)
            assert partition_keys == expected_partition_keys


def test_transform_function(synthetic_dataset: Synthetic):
    def double_matrix(sample: dict[str, Any]) -> dict[str, Any]:
        sample["matrix"] *= 2
        return sample

    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id, TestSchema.matrix],
               transform_spec=TransformSpec(double_matrix)) as reader:  # fmt: skip
        actual = next(reader)
        original = next(d for d in synthetic_dataset.data if d["id"] == actual.id)
        np.testing.assert_equal(original["matrix"] * 2, actual.matrix)


def test_transform_function_returns_a_new_dict(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id],
               transform_spec=TransformSpec(lambda sample: {"id": -1})) as reader:  # fmt: skip
        actual_ids = [x.id for x in reader]
    np.testing.assert_equal(actual_ids, [-1] * len(synthetic_dataset.data))


def test_transform_remove_field(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id, TestSchema.id2],
               transform_spec=TransformSpec(removed_fields=["id2"])) as reader:  # fmt: skip
        row = next(reader)
        assert "id2" not in row._fields
        assert "id" in row._fields


def test_transform_function_with_predicate(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id, TestSchema.id2],
               predicate=in_lambda(["id2"], lambda id2: id2 == 1),
               transform_spec=TransformSpec(removed_fields=["id2"])) as reader:  # fmt: skip
        rows = list(reader)
    assert "id2" not in rows[0]._fields
    actual_ids = np.asarray([row.id for row in rows])
    assert actual_ids.size > 0
    assert np.all(actual_ids % 2 == 1)


def test_transform_function_returns_a_new_dict_with_predicate(synthetic_dataset: Synthetic):
    def transform(sample: dict[str, Any]) -> dict[str, Any]:
        return {"id": sample["id"], "id2": -1}

    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id, TestSchema.id2],
               predicate=in_lambda(["id2"], lambda id2: id2 == 1),
               transform_spec=TransformSpec(func=transform)) as reader:  # fmt: skip
        rows = list(reader)
    actual_ids = np.asarray([row.id for row in rows])
    assert actual_ids.size > 0
    assert np.all(actual_ids % 2 == 1)
    assert np.all(np.asarray([row.id2 for row in rows]) == -1)


def test_transform_function_new_field(synthetic_dataset: Synthetic):
    def double_matrix(sample: dict[str, Any]) -> dict[str, Any]:
        sample["double_matrix"] = sample["matrix"] * 2
        del sample["matrix"]
        return sample

    spec = TransformSpec(double_matrix, [("double_matrix", np.float32, (32, 16, 3), False)],
                         ["matrix"])  # fmt: skip
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id, TestSchema.matrix],
               transform_spec=spec) as reader:  # fmt: skip
        actual = next(reader)
    original = next(d for d in synthetic_dataset.data if d["id"] == actual.id)
    np.testing.assert_equal(original["matrix"] * 2, actual.double_matrix)


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
def test_simple_read_with_added_slashes(synthetic_dataset: Synthetic, reader_factory: Any):
    with reader_factory(synthetic_dataset.url + "///") as reader:
        next(reader)


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
def test_simple_read_moved_dataset(
    synthetic_dataset: Synthetic, tmp_path: Path, reader_factory: Any
):
    moved = tmp_path / "moved"
    shutil.copytree(synthetic_dataset.path, moved)
    with reader_factory(f"file://{moved}") as reader:
        next(reader)


def test_reading_subset_of_columns(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id2, TestSchema.id]) as reader:
        for row in reader:
            actual = dict(row._asdict())
            expected = next(d for d in synthetic_dataset.data if d["id"] == actual["id"])
            np.testing.assert_equal(expected["id2"], actual["id2"])


def test_reading_subset_of_columns_using_regex(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=["id$", "id_.*$", "partition_key$"]) as reader:
        for row in reader:
            actual = dict(row._asdict())
            assert set(actual) == {"id_float", "id_odd", "id", "partition_key"}
            expected = next(d for d in synthetic_dataset.data if d["id"] == actual["id"])
            np.testing.assert_equal(expected["id_float"], actual["id_float"])


@pytest.mark.parametrize("reader_factory", [dummy, batch_dummy])
def test_shuffle(synthetic_dataset: Synthetic, reader_factory: Any):
    with reader_factory(synthetic_dataset.url, shuffle_row_groups=False) as reader_1:
        first_readout = _readout_all_ids(reader_1)
    with reader_factory(synthetic_dataset.url, shuffle_row_groups=False) as reader_2:
        second_readout = _readout_all_ids(reader_2)
    np.testing.assert_array_equal(range(ROWS), sorted(first_readout))
    np.testing.assert_array_equal(first_readout, second_readout)
    with reader_factory(synthetic_dataset.url, shuffle_row_groups=True) as shuffled_reader:
        shuffled_readout = _readout_all_ids(shuffled_reader)
    assert np.any(np.not_equal(first_readout, shuffled_readout))


@pytest.mark.parametrize("reader_factory", ALL)
def test_predicate_on_partition(synthetic_dataset: Synthetic, reader_factory: Any):
    for expected_partition_keys in [{"p_0", "p_2"}, {"p_0"}, {"p_1", "p_2"}]:
        predicate = PartitionKeyInSetPredicate(expected_partition_keys)
        with reader_factory(synthetic_dataset.url, predicate=predicate) as reader:
            assert {row.partition_key for row in reader} == expected_partition_keys


@pytest.mark.parametrize("reader_factory", ALL)
def test_predicate_on_multiple_fields(synthetic_dataset: Synthetic, reader_factory: Any):
    expected_values = {"id": 11, "id2": 1}
    with reader_factory(synthetic_dataset.url, shuffle_row_groups=False,
                        predicate=EqualPredicate(expected_values)) as reader:  # fmt: skip
        actual = next(reader)
    assert actual.id == expected_values["id"]
    assert actual.id2 == expected_values["id2"]


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
def test_predicate_with_invalid_fields(synthetic_dataset: Synthetic, reader_factory: Any):
    # Petastorm raises ValueError at the first next(); shardstream when the reader is made
    # (a ConfigurationError, a ValueError), naming the fields the dataset lacks. The empty
    # predicate of Petastorm's cases reads no field: Petastorm refuses it, shardstream keeps
    # the rows it accepts, so that case is left out.
    for predicate_spec in [{"invalid_field_name": 1}, {"invalid_field_name": 1, "id": 11},
                           {"invalid_field_name": 1, "invalid_field_name_2": 11}]:  # fmt: skip
        with pytest.raises(ValueError, match="invalid_field_name"):
            reader_factory(synthetic_dataset.url, shuffle_row_groups=False,
                           predicate=EqualPredicate(predicate_spec))  # fmt: skip


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
@pytest.mark.parametrize("seed", [None, 0])
def test_partition_multi_node(synthetic_dataset: Synthetic, reader_factory: Any, seed: Any):
    with reader_factory(synthetic_dataset.url, cur_shard=0, shard_count=5, seed=seed) as reader, \
            reader_factory(synthetic_dataset.url, cur_shard=0, shard_count=5,
                           seed=seed) as reader_2:  # fmt: skip
        results_1 = set(_readout_all_ids(reader))
        results_2 = set(_readout_all_ids(reader_2))
    assert results_1, "Non empty shard expected"
    np.testing.assert_equal(results_1, results_2)
    assert len(results_1) < len(synthetic_dataset.data)
    for partition in range(1, 5):
        with reader_factory(synthetic_dataset.url, cur_shard=partition, shard_count=5,
                            seed=seed) as reader_other:  # fmt: skip
            assert not set(_readout_all_ids(reader_other)) & results_1


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
@pytest.mark.parametrize(
    "kwargs",
    [{"shard_count": 0}, {"shard_count": 5}, {"cur_shard": "0", "shard_count": 5},
     {"cur_shard": 0, "shard_count": "5"}],
)  # fmt: skip
def test_partition_value_error(
    synthetic_dataset: Synthetic, reader_factory: Any, kwargs: dict[str, Any]
):
    with pytest.raises(ValueError, match="cur_shard and shard_count"):
        reader_factory(synthetic_dataset.url, **kwargs)


@pytest.mark.parametrize("reader_factory", [dummy, batch_dummy])
def test_stable_pieces_order(synthetic_dataset: Synthetic, reader_factory: Any):
    baseline_run = None
    for _ in range(4):
        with reader_factory(synthetic_dataset.url, shuffle_row_groups=False) as reader:
            this_run = _readout_all_ids(reader)
        if baseline_run:
            assert this_run == baseline_run
        baseline_run = this_run


def test_invalid_schema_field(synthetic_dataset: Synthetic):
    from pyspark.sql.types import LongType, ShortType, StringType

    bogus = Unischema("BogusSchema", [
        UnischemaField("partition_key", np.bytes_, (), ScalarCodec(StringType()), False),
        UnischemaField("id", np.int64, (), ScalarCodec(LongType()), False),
        UnischemaField("bogus_key", np.int32, (), ScalarCodec(ShortType()), False),
    ])  # fmt: skip
    with pytest.raises(ValueError, match="bogus_key"):
        dummy(synthetic_dataset.url, schema_fields=bogus.fields.values(), shuffle_row_groups=False,
              predicate=EqualPredicate({"bogus_key": 11, "id": 1}))  # fmt: skip


def test_use_persisted_codec_and_not_provided_by_user(synthetic_dataset: Synthetic):
    new = UnischemaField("matrix_uint16", np.uint16, (2, 3, 4), CompressedImageCodec("png"), False)
    with dummy(synthetic_dataset.url, schema_fields=[new]) as reader:
        row = next(reader)
    assert row.matrix_uint16.shape == (32, 16, 3)


def test_single_column_predicate(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id],
               predicate=EqualPredicate({"id": 1})) as reader:  # fmt: skip
        all_rows = list(reader)
    assert len(all_rows) == 1
    assert all_rows[0].id == 1


def test_two_column_predicate(synthetic_dataset: Synthetic):
    with dummy(synthetic_dataset.url, schema_fields=[TestSchema.id2, TestSchema.partition_key],
               predicate=EqualPredicate({"id2": 1, "partition_key": "p_2"})) as reader:  # fmt: skip
        all_rows = list(reader)
    assert all_rows
    assert (np.array(list(map(operator.attrgetter("id2"), all_rows))) == 1).all()
    assert (np.array(list(map(operator.attrgetter("partition_key"), all_rows))) == "p_2").all()


@pytest.mark.parametrize("reader_factory", ALL)
def test_multiple_epochs(synthetic_dataset: Synthetic, reader_factory: Any):
    num_epochs = 5
    expected = sorted(num_epochs * [d["id"] for d in synthetic_dataset.data])
    with reader_factory(synthetic_dataset.url, num_epochs=num_epochs) as reader:
        np.testing.assert_equal(sorted(_readout_all_ids(reader)), expected)
        reader.reset()
        np.testing.assert_equal(sorted(_readout_all_ids(reader)), expected)


@pytest.mark.parametrize("reader_factory", ALL)
def test_fail_if_resetting_in_the_middle_of_epoch(
    synthetic_dataset: Synthetic, reader_factory: Any
):
    with reader_factory(synthetic_dataset.url, num_epochs=5) as reader:
        assert len(_readout_all_ids(reader, limit=20)) == 20
        with pytest.raises(NotImplementedError):
            reader.reset()


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
def test_unlimited_epochs(synthetic_dataset: Synthetic, reader_factory: Any):
    with reader_factory(synthetic_dataset.url, num_epochs=None) as reader:
        actual_ids = _readout_all_ids(reader, len(synthetic_dataset.data) * 3 + 2)
    expected_ids = [d["id"] for d in synthetic_dataset.data]
    assert len(actual_ids) > len(expected_ids)
    assert set(actual_ids) == set(expected_ids)


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
def test_num_epochs_value_error(synthetic_dataset: Synthetic, reader_factory: Any):
    with pytest.raises(ValueError, match="num_epochs"):
        reader_factory(synthetic_dataset.url, num_epochs=-10)
    with pytest.raises(ValueError, match="num_epochs"):
        reader_factory(synthetic_dataset.url, num_epochs="abc")


def test_materialize_dataset_hadoop_config(spark: Any, tmp_path: Path):
    hadoop_config = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_config.set("parquet.summary.metadata.level", "COMMON_ONLY")
    hadoop_config.setInt("parquet.row-group.size.row.check.min", 100)
    try:
        create_test_dataset(spark, f"file://{tmp_path}", range(10))
        assert not (tmp_path / "_metadata").exists()
        assert hadoop_config.get("parquet.summary.metadata.level") == "COMMON_ONLY"
        assert hadoop_config.get("parquet.row-group.size.row.check.min") == "100"
        assert hadoop_config.get("parquet.block.size") is None
        assert hadoop_config.get("parquet.block.size.row.check.min") is None
    finally:
        hadoop_config.unset("parquet.summary.metadata.level")
        hadoop_config.unset("parquet.row-group.size.row.check.min")


def test_materialize_restores_the_settings_when_the_write_fails(spark: Any, tmp_path: Path):
    # Not Petastorm's (it restores them only after a successful block): a failed job must
    # not leave the session writing 3-row checks and no summaries.
    from shardstream.loader.petastorm import materialize_dataset

    hadoop_config = spark.sparkContext._jsc.hadoopConfiguration()
    seen = []

    def failing_job() -> None:
        with materialize_dataset(spark, f"file://{tmp_path}", TestSchema, 1):
            seen.append(hadoop_config.get("parquet.block.size"))
            raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError, match="the job failed"):
        failing_job()
    assert seen == [str(1024 * 1024)]
    assert hadoop_config.get("parquet.block.size") is None
    assert not (tmp_path / "_common_metadata").exists()


@pytest.mark.parametrize("reader_factory", MINIMAL + SCALAR_ONLY)
def test_dataset_path_is_a_unicode(synthetic_dataset: Synthetic, reader_factory: Any):
    with reader_factory(synthetic_dataset.url.encode().decode("utf-8")) as reader:
        next(reader)


def test_should_fail_if_reading_after_stop(synthetic_dataset: Synthetic):
    # Petastorm's message is "Trying to read a sample after a reader created by make_reader()
    # was stopped"; ours says the same in other words.
    reader = make_reader(synthetic_dataset.url, workers_count=1)
    next(reader)
    reader.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        next(reader)


def test_should_fail_if_reading_out_of_context_manager(synthetic_dataset: Synthetic):
    with make_reader(synthetic_dataset.url, workers_count=1) as reader:
        next(reader)
    with pytest.raises(RuntimeError, match="stopped"):
        next(reader)


def test_pyarrow_filters_make_reader(synthetic_dataset: Synthetic):
    with make_reader(synthetic_dataset.url, workers_count=5, num_epochs=1,
                     filters=[("partition_key", "=", "p_5")]) as reader:  # fmt: skip
        assert {data.partition_key for data in reader} == {"p_5"}


def test_too_many_shards(synthetic_dataset: Synthetic):
    # Petastorm raises NoDataAvailableError when shards outnumber row groups; shardstream
    # splits rows, not row groups, so every shard gets its share (docs/parquet.md).
    with dummy(synthetic_dataset.url, cur_shard=0, shard_count=50) as reader:
        assert 1 <= len(list(reader)) <= 3


def test_the_dataset_is_what_petastorm_stores(synthetic_dataset: Synthetic):
    root = Path(synthetic_dataset.path)
    metadata = pq.read_schema(root / "_common_metadata").metadata
    assert b"petastorm.unischema" in metadata[UNISCHEMA_KEY]
    counts = json.loads(metadata[ROW_GROUPS_PER_FILE_KEY])
    files = sorted(str(p.relative_to(root)) for p in root.glob("partition_key=*/*.parquet"))
    assert sorted(counts) == files
    assert all(counts[f] == pq.ParquetFile(root / f).num_row_groups for f in files)


@pytest.mark.parametrize("reader_factory", [*ALL, batch_dummy])
def test_simple_read_with_disk_cache(
    synthetic_dataset: Synthetic, reader_factory: Any, tmp_path: Path
):
    with reader_factory(synthetic_dataset.url, num_epochs=2, cache_type="local-disk",
                        cache_location=str(tmp_path / "cache"), cache_size_limit=10 * 2**30,
                        cache_row_size_estimate=100) as reader:  # fmt: skip
        ids = _readout_all_ids(reader)
    assert len(ids) == 200
    assert set(ids) == set(range(100))


def test_predicate_on_multiple_fields_batched(synthetic_dataset: Synthetic):
    expected_values = {"id": 11, "id2": 1}
    with batch_dummy(synthetic_dataset.url, shuffle_row_groups=False,
                     predicate=VectorizedEqualPredicate(expected_values)) as reader:  # fmt: skip
        actual = next(reader)
    assert actual.id.shape == (1,)
    assert actual.id[0] == expected_values["id"]
    assert actual.id2[0] == expected_values["id2"]


def test_predicate_on_partition_filters_out_everything(synthetic_dataset: Synthetic):
    # Petastorm warns "No matching data is available for loading" when the reader is made (it
    # prunes row groups by partition first); shardstream applies the predicate to the rows, so
    # the reader is made quietly and yields nothing.
    predicate = PartitionKeyInSetPredicate({"non existing value"})
    with make_reader(synthetic_dataset.url, reader_pool_type="dummy", predicate=predicate) as r:
        assert list(r) == []


def test_materialize_with_summary_metadata(spark: Any, tmp_path: Path):
    create_test_dataset(spark, f"file://{tmp_path}", range(10), use_summary_metadata=True)
    assert (tmp_path / "_metadata").exists()
    with dummy(f"file://{tmp_path}") as reader:
        assert sorted(int(row.id) for row in reader) == list(range(10))


def test_multithreaded_reads(synthetic_dataset: Synthetic):
    from concurrent.futures import ThreadPoolExecutor

    with make_reader(synthetic_dataset.url, workers_count=5, num_epochs=1) as reader, \
            ThreadPoolExecutor(max_workers=10) as executor:  # fmt: skip
        results = [f.result() for f in [executor.submit(next, reader) for _ in range(100)]]
    assert len(results) == len(synthetic_dataset.data)
    assert {r.id for r in results} == {d["id"] for d in synthetic_dataset.data}
