"""Petastorm's own TensorFlow reader tests (``test_tf_utils.py``, ``test_tf_dataset.py``), ported.

On the same ``synthetic_dataset`` as tests/integration/test_petastorm_end_to_end.py, in TF1
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
    make_petastorm_dataset,
    make_reader,
    tf_tensors,
)

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)
from .test_petastorm_end_to_end import Synthetic, TestSchema
from .test_petastorm_end_to_end import synthetic_dataset as synthetic_dataset_fixture  # noqa: F401

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
