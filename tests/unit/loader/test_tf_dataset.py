"""make_tf_dataset's elements as Petastorm's: namedtuples, static shapes, bools, TF1 iterators."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.loader import TransformSpec
from shardstream.loader.epoch_tail import EpochTail
from shardstream.loader.fields import SparkHint
from shardstream.loader.tf_dataset import tf_dataset
from shardstream.sampling import Topology

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf

ROWS = 23
COLUMNS = {"features": "ndarray:float32", "flag": "uint8", "label": "float32", "name": "str"}
HINTS = {"features": SparkHint(False, 1, False), "flag": SparkHint(True, 0, True)}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("tf") / "data")
    with MDSWriter(out=out, columns=COLUMNS, size_limit=600) as writer:
        for i in range(ROWS):
            writer.write({"features": np.full(4, i, "f4"), "flag": i % 2, "label": i % 3,
                          "name": f"row-{i}"})  # fmt: skip
    return out


def make(data: str, batch_size: int = 5, epochs: int | None = 1, **kwargs: Any) -> Any:
    dataset = StreamingDataset(local=data, batch_size=batch_size)
    tail = EpochTail.of(epoch_size=dataset.epoch_size, batch_size=batch_size, topology=Topology())
    return tf_dataset(dataset, batch_size, epochs, tail, None, **kwargs)


def test_elements_are_namedtuples_with_static_shapes(data: str):
    dataset = make(data, hints=HINTS)
    spec = dataset.element_spec
    assert spec._fields == ("features", "flag", "label", "name")
    assert spec.features.shape.as_list() == [None, None]  # rank known: Keras can build on it
    assert spec.flag.dtype == tf.bool
    assert spec.label.shape.as_list() == [None]
    assert spec.name.dtype == tf.string
    batches = list(dataset.as_numpy_iterator())
    assert [len(batch.label) for batch in batches] == [5, 5, 5, 5, 3]
    ids = np.concatenate([batch.features[:, 0] for batch in batches]).astype(int)
    assert sorted(ids.tolist()) == list(range(ROWS))
    for batch in batches:
        assert batch.flag.tolist() == [bool(i % 2) for i in batch.features[:, 0].astype(int)]


def test_without_hints_the_rank_is_unknown(data: str):
    assert make(data).element_spec.features.shape.rank is None


def test_keras_fits_on_the_mapped_tuples(data: str):
    # As Petastorm's examples do: endless epochs, steps_per_epoch from the row count.
    dataset = make(data, epochs=None, hints=HINTS).map(lambda x: (x.features, x.label))
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(dataset, steps_per_epoch=ROWS // 5, epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2
    assert np.isfinite(history.history["loss"]).all()


def test_tf1_one_shot_iterators(data: str):
    dataset = make(data, hints=HINTS)
    first = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    assert first.features.shape == (5, 4)
    assert dataset.make_one_shot_iterator().get_next().label.shape == (5,)


def test_transform_spec_runs_on_each_batch(data: str):
    def func(frame: Any) -> Any:
        return frame.assign(total=[v.sum() for v in frame.features], label=frame.label * 10)

    spec = TransformSpec(func, edit_fields=[("total", np.float64, (), False)],
                         removed_fields=["name"], selected_fields=["total", "label"])  # fmt: skip
    dataset = make(data, hints=HINTS, transform_spec=spec)
    assert dataset.element_spec._fields == ("total", "label")
    assert dataset.element_spec.total.dtype == tf.float64
    rows = [
        (t, lab)
        for b in dataset.as_numpy_iterator()
        for t, lab in zip(b.total, b.label, strict=True)
    ]
    assert sorted(rows) == sorted((4.0 * i, 10.0 * (i % 3)) for i in range(ROWS))


def test_odd_column_names_become_positional(tmp_path: Path):
    out = str(tmp_path / "odd")
    with MDSWriter(out=out, columns={"_c0": "int64", "ok": "int64"}) as writer:
        for i in range(3):
            writer.write({"_c0": i, "ok": -i})
    element = make(out, batch_size=3).element_spec
    assert element._fields == ("_0", "ok")
