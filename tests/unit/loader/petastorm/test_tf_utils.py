"""make_petastorm_dataset: a reader's rows or batches as a tf.data.Dataset of namedtuples."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.petastorm_data import hello_row, write_hello

from shardstream.loader.petastorm import make_batch_reader, make_petastorm_dataset, make_reader

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
        with pytest.raises(Exception, match="reads its reader once"):
            list(dataset.as_numpy_iterator())
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
