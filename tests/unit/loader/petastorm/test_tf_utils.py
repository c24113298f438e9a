"""make_petastorm_dataset: a reader's rows or batches as a tf.data.Dataset of namedtuples."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.petastorm_data import hello_row, write_hello

from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm import (
    make_batch_reader,
    make_petastorm_dataset,
    make_reader,
    tf_tensors,
)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf

ROWS = 24


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_hello(tmp_path_factory.mktemp("tf") / "hello", ROWS, files=1, row_group=5))


def test_a_row_reader_gives_one_namedtuple_of_tensors_per_row(hello: str):
    with make_reader(hello, schema_fields=["id", "label", "image", "sparse"]) as reader:
        dataset = make_petastorm_dataset(reader)
        spec = dataset.element_spec
        assert spec._fields == ("id", "label", "sparse", "image")  # the schema's order
        assert spec.id.dtype == tf.int32
        assert spec.id.shape.rank == 0
        assert spec.label.dtype == tf.string
        assert spec.image.shape.as_list() == [8, 6, 3]
        assert spec.sparse.shape.as_list() == [None]
        rows = list(dataset.as_numpy_iterator())
        with pytest.warns(UserWarning, match="multiple iterations.*num_epochs"):
            again = list(dataset.as_numpy_iterator())  # Petastorm resets the reader, and warns
        assert sorted(int(row.id) for row in again) == list(range(ROWS))
    assert sorted(int(row.id) for row in rows) == list(range(ROWS))
    for row in rows:
        expected = hello_row(int(row.id))
        assert row.label.decode() == expected["label"]
        np.testing.assert_array_equal(row.image, expected["image"])
        np.testing.assert_array_equal(row.sparse, expected["sparse"])


def test_a_batch_reader_gives_batches_and_keras_style_maps_work(hello: str):
    with make_batch_reader(hello, schema_fields=["id", "matrix", "score"]) as reader:
        dataset = make_petastorm_dataset(reader).map(lambda x: (x.matrix, x.score))
        assert dataset.element_spec[0].shape.as_list() == [None, 4, 3]
        pairs = list(dataset.as_numpy_iterator())
    assert sum(len(score) for _, score in pairs) == ROWS
    assert {float(s) for _, score in pairs for s in score} == {i / 8 for i in range(ROWS)}


def test_types_tensorflow_lacks_are_converted_as_petastorm_converts_them(tmp_path: Path):
    table = pa.table({
        "u16": pa.array([1, 2, 60000], pa.uint16()),
        "u32": pa.array([1, 2, 4_000_000_000], pa.uint32()),
        "when": pa.array([0, 1_500, 86_400_000], pa.timestamp("ms")),
        "price": pa.array([1, 2, 3], pa.decimal128(5, 2)),
    })  # fmt: skip
    pq.write_table(table, tmp_path / "a.parquet")
    with make_batch_reader(str(tmp_path), shuffle_row_groups=False) as reader:
        dataset = make_petastorm_dataset(reader)
        spec = dataset.element_spec
        assert (spec.u16.dtype, spec.u32.dtype, spec.when.dtype, spec.price.dtype) == (
            tf.int32, tf.int64, tf.int64, tf.string,
        )  # fmt: skip
        (batch,) = list(dataset.as_numpy_iterator())
    assert batch.u16.tolist() == [1, 2, 60000]
    assert batch.u32.tolist() == [1, 2, 4_000_000_000]
    assert batch.when.tolist() == [0, 1_500_000_000, 86_400_000_000_000]
    assert [p.decode() for p in batch.price] == ["1", "2", "3"]
    with make_reader(str(tmp_path), shuffle_row_groups=False) as reader:
        rows = list(make_petastorm_dataset(reader).as_numpy_iterator())
    assert [int(r.when) for r in rows] == [0, 1_500_000_000, 86_400_000_000_000]


def test_tf1_one_shot_iterators_work(hello: str):
    with make_reader(hello, schema_fields=["id"], num_epochs=1) as reader:
        iterator = make_petastorm_dataset(reader).make_one_shot_iterator()
        assert int(iterator.get_next().id) in range(ROWS)


def test_tf1_code_reads_output_shapes_and_types(hello: str):
    # Petastorm's datasets are tf.compat.v1's: TF1 code reads these attributes.
    with make_reader(hello, schema_fields=["id", "image", "sparse"]) as reader:
        dataset = make_petastorm_dataset(reader)
        assert dataset.output_types.id == tf.int32
        assert dataset.output_shapes.image.as_list() == [8, 6, 3]
        assert dataset.output_shapes.sparse.as_list() == [None]
        assert tf.compat.v1.data.get_output_shapes(dataset).id.rank == 0
        mapped = dataset.map(lambda row: row.id)
        assert mapped.output_types == tf.int32
        assert sorted(int(i) for i in mapped.as_numpy_iterator()) == list(range(ROWS))


def run_to_the_end(session: Any, fetches: Any) -> list[Any]:
    """What each run gives, until the input ends with OutOfRangeError (as TF1 loops stop)."""
    taken = []
    while True:
        try:
            taken.append(session.run(fetches))
        except tf.errors.OutOfRangeError:  # noqa: PERF203 (the loop ends here)
            return taken


def test_tf1_graph_sessions_run_a_one_shot_iterator(hello: str):
    with tf.Graph().as_default(), make_reader(hello, schema_fields=["id", "label"]) as reader:
        next_row = make_petastorm_dataset(reader).make_one_shot_iterator().get_next()
        with tf.compat.v1.Session() as session:
            taken = run_to_the_end(session, next_row)
    assert sorted(int(row.id) for row in taken) == list(range(ROWS))
    assert {row.label.decode() for row in taken} == {hello_row(i)["label"] for i in range(ROWS)}


def test_tf_tensors_read_one_row_per_session_run(hello: str):
    with tf.Graph().as_default(), make_reader(hello, schema_fields=["id", "image"]) as reader:
        row = tf_tensors(reader)
        assert row._fields == ("id", "image")
        assert row.image.shape.as_list() == [8, 6, 3]
        assert row.id.dtype == tf.int32
        with tf.compat.v1.Session() as session:
            taken = run_to_the_end(session, row)
    assert sorted(int(r.id) for r in taken) == list(range(ROWS))
    for r in taken:
        np.testing.assert_array_equal(r.image, hello_row(int(r.id))["image"])


def test_tf_tensors_shuffle_through_a_queue_and_take_batches(hello: str):
    with tf.Graph().as_default(), make_reader(hello, schema_fields=["id"]) as reader:
        row = tf_tensors(reader, shuffling_queue_capacity=10, min_after_dequeue=2)
        with tf.compat.v1.Session() as session:
            coordinator = tf.compat.v1.train.Coordinator()
            threads = tf.compat.v1.train.start_queue_runners(session, coordinator)
            taken = [int(session.run(row).id) for _ in range(ROWS - 2)]
            coordinator.request_stop()
            coordinator.join(threads, ignore_live_threads=True)
    assert len(set(taken)) == ROWS - 2
    with tf.Graph().as_default(), make_batch_reader(hello, schema_fields=["id"]) as reader:
        batch = tf_tensors(reader)
        assert batch.id.shape.as_list() == [None]
        with tf.compat.v1.Session() as session:
            assert len(session.run(batch).id) >= 1
        with pytest.raises(ConfigurationError, match="batch reader"):
            tf_tensors(reader, shuffling_queue_capacity=5)
