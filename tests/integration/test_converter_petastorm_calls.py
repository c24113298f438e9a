"""The converter's loaders as Petastorm's users call them, on a real local SparkSession.

An ML Vector column, a BooleanType column and a label: TensorFlow elements are namedtuples whose
signature Keras builds on, and ``transform_spec`` runs in the torch loader's worker processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.sql import types as T

from shardstream.loader import SparkDatasetConverter, TransformSpec, make_spark_converter

from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROWS = 40


@pytest.fixture(scope="module")
def converter(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> SparkDatasetConverter:
    from pyspark.ml.linalg import VectorUDT

    schema = T.StructType([
        T.StructField("features", VectorUDT(), False),
        T.StructField("flag", T.BooleanType(), False),
        T.StructField("label", T.DoubleType(), False),
    ])  # fmt: skip
    rows = [(Vectors.dense([i, i / 2, 1.0]), i % 2 == 0, float(i % 3)) for i in range(ROWS)]
    df = spark.createDataFrame(rows, schema)
    return make_spark_converter(df, str(tmp_path_factory.mktemp("petastorm-calls")))


def test_tf_elements_fit_a_keras_model(converter: SparkDatasetConverter):
    tf = pytest.importorskip("tensorflow")
    with converter.make_tf_dataset(batch_size=8) as dataset:  # endless, as Petastorm's default
        spec = dataset.element_spec
        assert spec._fields == ("features", "flag", "label")
        assert spec.features.shape.as_list() == [None, None]
        assert spec.features.dtype == tf.float32
        assert spec.flag.dtype == tf.bool
        first = next(iter(dataset))
        assert first.flag.numpy().tolist() == [i % 2 == 0 for i in first.features[:, 0].numpy()]
        model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        # shuffle=False: Keras warns that it cannot shuffle a tf.data.Dataset (the loader does).
        history = model.fit(dataset.map(lambda x: (x.features, x.label)), shuffle=False,
                            steps_per_epoch=len(converter) // 8, epochs=2, verbose=0)  # fmt: skip
    assert np.isfinite(history.history["loss"]).all()


def add_norm(frame: Any) -> Any:  # module level: pickled into the loader's workers
    return frame.assign(norm=[float(np.linalg.norm(v)) for v in frame.features], pid=os.getpid())


def test_transform_spec_runs_in_the_torch_workers(converter: SparkDatasetConverter):
    spec = TransformSpec(add_norm, edit_fields=[("norm", np.float32, (), False),
                                                ("pid", np.int64, (), False)],
                         removed_fields=["flag"])  # fmt: skip
    norms, pids = {}, set()
    with converter.make_torch_dataloader(
        batch_size=8, num_epochs=1, workers_count=2, transform_spec=spec
    ) as loader:
        for batch in loader:
            assert set(batch) == {"features", "label", "norm", "pid"}
            for row, norm in zip(batch["features"].tolist(), batch["norm"].tolist(), strict=True):
                norms[int(row[0])] = norm
            pids.update(batch["pid"].tolist())
    assert sorted(norms) == list(range(ROWS))  # every row once
    assert norms[4] == pytest.approx(np.linalg.norm([4, 2, 1]), rel=1e-6)
    assert os.getpid() not in pids
    assert len(pids) == 2


def test_transform_spec_on_tf(converter: SparkDatasetConverter, tmp_path: Path):
    pytest.importorskip("tensorflow")
    spec = TransformSpec(lambda frame: frame.assign(label=frame.label + 1),
                         selected_fields=["label"])  # fmt: skip
    with converter.make_tf_dataset(batch_size=8, num_epochs=1, transform_spec=spec) as dataset:
        labels = [v for batch in dataset.as_numpy_iterator() for v in batch.label.tolist()]
    assert sorted(labels) == sorted(float(i % 3) + 1 for i in range(ROWS))
