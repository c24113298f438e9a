"""Petastorm's own TensorFlow reader tests (``test_tf_utils.py``, ``test_tf_dataset.py``), ported.

On the same ``synthetic_dataset`` as tests/integration/test_petastorm_end_to_end.py (and the
plain Parquet datasets of tests/integration/test_petastorm_parquet_reader.py), in TF1
graphs (``tf.Graph().as_default()``, as Petastorm's ``create_tf_graph``), with ``tf_tensors``
and ``make_petastorm_dataset``. NGram tests are not ported (NGrams are not provided).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from shardstream.loader.petastorm import (
    TransformSpec,
    in_lambda,
    make_batch_reader,
    make_petastorm_dataset,
    make_reader,
    tf_tensors,
)

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)
from .test_petastorm_end_to_end import Synthetic, TestSchema
from .test_petastorm_end_to_end import synthetic_dataset as synthetic_dataset_fixture  # noqa: F401
from .test_petastorm_parquet_reader import Dataset
from .test_petastorm_parquet_reader import (  # noqa: F401
    many_columns_non_petastorm_dataset as many_columns_fixture,
)
from .test_petastorm_parquet_reader import scalar_dataset as scalar_dataset_fixture  # noqa: F401

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow").compat.v1

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

NON_NULLABLE_FIELDS = set(TestSchema.fields.values()) - {
    TestSchema.matrix_nullable, TestSchema.string_array_nullable, TestSchema.integer_nullable,
}  # fmt: skip
_EXCLUDE_FIELDS = set(TestSchema.fields.values()) - {
    TestSchema.matrix_nullable, TestSchema.string_array_nullable, TestSchema.decimal,
    TestSchema.integer_nullable,
}  # fmt: skip


@pytest.fixture(name="synthetic_dataset", scope="module")
def synthetic(synthetic_dataset_fixture: Synthetic) -> Synthetic:  # noqa: F811
    return synthetic_dataset_fixture


@pytest.fixture(name="scalar_dataset", scope="module")
def scalar(scalar_dataset_fixture: Dataset) -> Dataset:  # noqa: F811
    return scalar_dataset_fixture


@pytest.fixture(name="many_columns_non_petastorm_dataset", scope="module")
def many_columns(many_columns_fixture: Dataset) -> Dataset:  # noqa: F811
    return many_columns_fixture


@contextlib.contextmanager
def _tf_session() -> Iterator[Any]:
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(coord=coord, start=True)
        yield sess
        coord.request_stop()
        coord.join(threads)


def _assert_fields_eq(actual: Any, desired: Any) -> None:
    if isinstance(desired, Decimal) or isinstance(actual, bytes):
        actual = actual.decode()
    elif isinstance(desired, np.ndarray) and desired.dtype.type == np.str_:
        actual = np.array([item.decode() for item in actual])
    if isinstance(desired, Decimal):
        np.testing.assert_equal(Decimal(actual), desired)
    else:
        np.testing.assert_equal(actual, desired)


def _assert_expected_rows_data(expected_data: list[dict[str, Any]], rows_data: list[Any]) -> None:
    for row_tuple in rows_data:
        row = row_tuple._asdict()
        expected = next(d for d in expected_data if d["id"] == row["id"])
        for column_name, actual in row.items():
            _assert_fields_eq(actual, expected[column_name])


def _read_from_tf_tensors(synthetic_dataset: Synthetic, count: int, capacity: int,
                          min_after_dequeue: int) -> tuple[list[Any], Any]:  # fmt: skip
    with tf.Graph().as_default(), make_reader(
        schema_fields=NON_NULLABLE_FIELDS, dataset_url=synthetic_dataset.url,
        reader_pool_type="dummy", shuffle_row_groups=False,
    ) as reader:  # fmt: skip
        row_tensors = tf_tensors(reader, shuffling_queue_capacity=capacity,
                                 min_after_dequeue=min_after_dequeue)  # fmt: skip
        with _tf_session() as sess:
            rows_data = [sess.run(row_tensors) for _ in range(count)]
    return rows_data, row_tensors


def test_simple_read_tensorflow(synthetic_dataset: Synthetic):
    url = synthetic_dataset.url
    with tf.Graph().as_default(), make_reader(schema_fields=NON_NULLABLE_FIELDS,
                                              dataset_url=url) as reader:  # fmt: skip
        row_tensors = tf_tensors(reader)
        with _tf_session() as sess:
            rows_data = [sess.run(row_tensors) for _ in range(30)]
    for column in row_tensors:
        assert column.get_shape().dims is not None
    _assert_expected_rows_data(synthetic_dataset.data, rows_data)


def test_shuffling_queue(synthetic_dataset: Synthetic):
    unshuffled_1, _ = _read_from_tf_tensors(synthetic_dataset, 30, 0, 0)
    unshuffled_2, _ = _read_from_tf_tensors(synthetic_dataset, 30, 0, 0)
    shuffled_1, shuffled_1_row_tensors = _read_from_tf_tensors(synthetic_dataset, 30, 10, 9)
    shuffled_2, _ = _read_from_tf_tensors(synthetic_dataset, 30, 10, 9)
    for column in shuffled_1_row_tensors:
        assert column.get_shape().dims is not None
    _assert_expected_rows_data(synthetic_dataset.data, shuffled_1)
    assert [f.id for f in unshuffled_1] == [f.id for f in unshuffled_2]
    assert [f.id for f in unshuffled_1] != [f.id for f in shuffled_2]
    assert [f.id for f in shuffled_1] != [f.id for f in shuffled_2]


def test_transform_function_new_field(synthetic_dataset: Synthetic):
    def double_matrix(sample: dict[str, Any]) -> dict[str, Any]:
        sample["double_matrix"] = sample["matrix"] * 2
        del sample["matrix"]
        return sample

    spec = TransformSpec(double_matrix, [("double_matrix", np.float32, (32, 16, 3), False)],
                         ["matrix"])  # fmt: skip
    with tf.Graph().as_default(), make_reader(
        synthetic_dataset.url, reader_pool_type="dummy",
        schema_fields=[TestSchema.id, TestSchema.matrix], transform_spec=spec,
    ) as reader:  # fmt: skip
        row_tensors = tf_tensors(reader)
        with _tf_session() as sess:
            actual = sess.run(row_tensors)
    original_sample = next(d for d in synthetic_dataset.data if d["id"] == actual.id)
    np.testing.assert_equal(original_sample["matrix"] * 2, actual.double_matrix)


def dummy(url: str, **kwargs: Any) -> Any:
    return make_reader(url, **{"reader_pool_type": "dummy", "schema_fields": _EXCLUDE_FIELDS,
                               **kwargs})  # fmt: skip


def thread(url: str, **kwargs: Any) -> Any:
    return make_reader(url, **{"reader_pool_type": "thread", "workers_count": 1,
                               "schema_fields": _EXCLUDE_FIELDS, **kwargs})  # fmt: skip


def process(url: str, **kwargs: Any) -> Any:
    return make_reader(url, **{"reader_pool_type": "process", "workers_count": 1,
                               "schema_fields": _EXCLUDE_FIELDS, **kwargs})  # fmt: skip


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_with_one_shot_iterator(synthetic_dataset: Synthetic, reader_factory: Any):
    with tf.Graph().as_default(), reader_factory(synthetic_dataset.url) as reader:
        dataset = make_petastorm_dataset(reader)
        iterator = dataset.make_one_shot_iterator()
        for shape in dataset.output_shapes:
            assert shape.dims is not None
        with tf.Session() as sess:
            iterator = iterator.get_next()
            for _ in synthetic_dataset.data:
                actual = sess.run(iterator)._asdict()
                expected = next(d for d in synthetic_dataset.data if d["id"] == actual["id"])
                for key in actual:
                    if isinstance(expected[key], str):
                        actual_value = actual[key].decode()
                    elif (isinstance(expected[key], np.ndarray)
                          and expected[key].dtype.type == np.str_):  # fmt: skip
                        actual_value = np.array([item.decode() for item in actual[key]])
                    else:
                        actual_value = actual[key]
                    np.testing.assert_equal(actual_value, expected[key])
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(iterator)


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_with_dataset_repeat(synthetic_dataset: Synthetic, reader_factory: Any):
    with tf.Graph().as_default(), reader_factory(synthetic_dataset.url) as reader:
        dataset = make_petastorm_dataset(reader).repeat(2)
        iterator = dataset.make_one_shot_iterator().get_next()
        match_str = "Running multiple iterations over make_petastorm_dataset is not recommend"
        # Around the whole pass: tf.data reads ahead, so the second pass may start (and warn)
        # while the first one's last rows are fetched.
        with tf.Session() as sess, pytest.warns(UserWarning, match=match_str):
            ids = [int(sess.run(iterator).id) for _ in range(2 * len(synthetic_dataset.data))]
        assert sorted(ids) == sorted(list(range(len(synthetic_dataset.data))) * 2)


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_with_dataset_repeat_after_cache(synthetic_dataset: Synthetic, reader_factory: Any):
    epochs = 3
    url = synthetic_dataset.url
    with tf.Graph().as_default(), reader_factory(url, schema_fields=[TestSchema.id]) as reader:
        dataset = make_petastorm_dataset(reader).cache().repeat(epochs)
        it_op = dataset.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            for _ in range(epochs):
                actual_res = [sess.run(it_op)._asdict()["id"] for _ in synthetic_dataset.data]
                np.testing.assert_equal(sorted(actual_res), list(range(len(actual_res))))
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(it_op)


@pytest.mark.parametrize("reader_factory", [dummy, thread, process])
def test_some_processing_functions(synthetic_dataset: Synthetic, reader_factory: Any):
    url = synthetic_dataset.url
    one = in_lambda(["id"], functools.partial(operator.eq, 1))
    two = in_lambda(["id"], functools.partial(operator.eq, 2))
    with tf.Graph().as_default(), reader_factory(url, predicate=one) as r1, \
            reader_factory(url, predicate=two) as r2:  # fmt: skip
        first, second = make_petastorm_dataset(r1), make_petastorm_dataset(r2)
        dataset = first.prefetch(10).concatenate(second).map(lambda x: x.id).batch(2)
        next_sample = dataset.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            np.testing.assert_array_equal(sess.run(next_sample), [1, 2])


# test_tf_utils.py's and test_tf_dataset.py's tests on plain Parquet (make_batch_reader).


def test_simple_read_tensorflow_with_parquet_dataset(scalar_dataset: Dataset):
    with (
        tf.Graph().as_default(),
        make_batch_reader(dataset_url_or_urls=scalar_dataset.url) as reader,
    ):
        row_tensors = tf_tensors(reader)
        for column_name, column in row_tensors._asdict().items():
            expected = [None, None] if column_name == "int_fixed_size_list" else [None]
            assert column.get_shape().as_list() == expected
        with _tf_session() as sess:
            for _ in range(2):
                batch = sess.run(row_tensors)._asdict()
                for i, id_value in enumerate(batch["id"]):
                    expected_row = next(d for d in scalar_dataset.data if d["id"] == id_value)
                    for field_name in expected_row:
                        _assert_scalar_eq(batch[field_name][i], expected_row[field_name])


def _assert_scalar_eq(actual: Any, desired: Any) -> None:
    # Dates and times come as int64 nanoseconds since 1970 in TensorFlow, as in Petastorm.
    if isinstance(desired, np.datetime64):
        actual = np.datetime64(int(actual), "ns")
    _assert_fields_eq(actual, desired)


def test_simple_read_tensorflow_with_non_petastorm_many_columns_dataset(
    many_columns_non_petastorm_dataset: Dataset,
):
    url = many_columns_non_petastorm_dataset.url
    with tf.Graph().as_default(), make_batch_reader(dataset_url_or_urls=url) as reader:
        row_tensors = tf_tensors(reader)
        for column in row_tensors:
            assert column.get_shape().as_list() == [None]
        with _tf_session() as sess:
            batch = sess.run(row_tensors)._asdict()
            assert set(batch.keys()) == set(many_columns_non_petastorm_dataset.data[0].keys())


def test_shuffling_queue_with_make_batch_reader(scalar_dataset: Dataset):
    url = scalar_dataset.url
    reader = make_batch_reader(dataset_url_or_urls=url)
    refused = pytest.raises(ValueError, match="shuffling_queue_capacity cannot be used")
    with tf.Graph().as_default(), reader, refused:
        tf_tensors(reader, 100, 90)


def test_transform_function_new_field_batched(scalar_dataset: Dataset):
    def double_float64(sample: Any) -> Any:
        sample["new_float64"] = sample["float64"] * 2
        del sample["float64"]
        return sample

    spec = TransformSpec(double_float64, [("new_float64", np.float64, (), False)], ["float64"])
    with tf.Graph().as_default(), make_batch_reader(scalar_dataset.url, reader_pool_type="dummy",
                                                    transform_spec=spec) as reader:  # fmt: skip
        row_tensors = tf_tensors(reader)
        with _tf_session() as sess:
            actual = sess.run(row_tensors)
        for actual_id, actual_float64 in zip(actual.id, actual.new_float64, strict=True):
            original_sample = next(d for d in scalar_dataset.data if d["id"] == actual_id)
            np.testing.assert_equal(original_sample["float64"] * 2, actual_float64)


def test_non_petastorm_with_many_colums_with_one_shot_iterator(
    many_columns_non_petastorm_dataset: Dataset,
):
    url = many_columns_non_petastorm_dataset.url
    with tf.Graph().as_default(), make_batch_reader(url, workers_count=1) as reader:
        dataset = make_petastorm_dataset(reader)
        iterator = dataset.make_one_shot_iterator()
        for shape in dataset.output_shapes:
            assert shape.dims is not None
        with tf.Session() as sess:
            sample = sess.run(iterator.get_next())._asdict()
            assert set(sample.keys()) == set(many_columns_non_petastorm_dataset.data[0].keys())


def test_non_petastorm_with_many_colums_epoch_count(many_columns_non_petastorm_dataset: Dataset):
    expected_num_epochs = 4
    url = many_columns_non_petastorm_dataset.url
    reader = make_batch_reader(url, workers_count=1, num_epochs=expected_num_epochs)
    with tf.Graph().as_default(), reader:
        dataset = make_petastorm_dataset(reader)
        iterator = dataset.make_one_shot_iterator()
        with tf.Session() as sess:
            get_next = iterator.get_next()
            rows_count = 0
            with contextlib.suppress(tf.errors.OutOfRangeError):
                while True:
                    rows_count += sess.run(get_next)._asdict()["col_0"].shape[0]
    assert expected_num_epochs * len(many_columns_non_petastorm_dataset.data) == rows_count
