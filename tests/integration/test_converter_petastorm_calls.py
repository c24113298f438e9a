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
    return make_spark_converter(
        df, parent_cache_dir_url=str(tmp_path_factory.mktemp("petastorm-calls"))
    )


def test_tf_elements_fit_a_keras_model(converter: SparkDatasetConverter):
    import tensorflow as tf

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
    spec = TransformSpec(lambda frame: frame.assign(label=frame.label + 1),
                         selected_fields=["label"])  # fmt: skip
    with converter.make_tf_dataset(batch_size=8, num_epochs=1, transform_spec=spec) as dataset:
        labels = [v for batch in dataset.as_numpy_iterator() for v in batch.label.tolist()]
    assert sorted(labels) == sorted(float(i % 3) + 1 for i in range(ROWS))


def test_nulls_are_filled_by_type(spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    from shardstream import LocalDataset

    schema = ("id long, d double, i int, kept int, flag boolean, s string, b binary, "
              "arr array<double>, ints array<int>, day string")  # fmt: skip
    rows = [
        (0, None, None, 1, None, None, None, [1.0, None], [1, None], None),
        (1, 2.5, 7, 2, True, "x", b"y", [0.5], [3, 4], "1970-01-03"),
        (2, 3.5, 8, 3, False, "z", b"w", [5.0, 6.0], [5], "1970-01-01"),
    ]
    df = (
        spark.createDataFrame(rows, schema)
        .selectExpr("*", "to_date(day) as date", "cast(to_date(day) as timestamp) as at")
        .drop("day")
    )
    with caplog.at_level("WARNING", logger="shardstream.converters.spark_nulls"):
        converter = make_spark_converter(df, parent_cache_dir_url=str(tmp_path))
    assert "column 'i' holds 1 null(s): filled as NaN, the column now float" in caplog.text
    assert "'kept'" not in caplog.text  # no null: untouched, and not reported
    got = {int(r["id"]): r for r in LocalDataset(local=converter.cache_dir_url)}
    assert np.isnan(got[0]["d"])
    assert got[1]["d"] == 2.5
    assert np.isnan(got[0]["i"])
    assert got[1]["i"] == 7.0
    assert np.asarray(got[1]["i"]).dtype == np.float32  # dtype='float32', as the floats
    assert np.asarray(got[0]["kept"]).dtype == np.int32  # a column without nulls keeps its type
    assert np.isnan(got[0]["flag"])
    assert got[1]["flag"] == 1.0
    assert (got[0]["s"], got[0]["b"]) == ("", b"")
    assert got[0]["arr"][0] == 1.0
    assert np.isnan(got[0]["arr"][1])
    assert got[0]["ints"].dtype == np.float32
    assert np.isnan(got[0]["ints"][1])
    assert got[2]["ints"].tolist() == [5.0]
    assert np.isnan(got[0]["date"])
    assert got[1]["date"] == 2.0
    assert np.isnan(got[0]["at"])
    assert got[1]["at"] == 2 * 86_400 * 10**6
    assert np.asarray(got[1]["at"]).dtype == np.float64  # float32 would round microseconds


def leftovers(parent: Path) -> list[Path]:
    return sorted(parent.rglob("*")) if parent.exists() else []


def test_a_failed_conversion_leaves_no_folder(spark: Any, tmp_path: Path):
    from pyspark.errors import PythonException

    from shardstream.errors import ConfigurationError

    df = spark.createDataFrame([(0, None), (1, "2024-01-02")], "id long, day string")
    wall = df.selectExpr("id", "cast(day as timestamp_ntz) as day")
    with pytest.raises(ConfigurationError, match="column 'day' \\(timestamp_ntz\\) holds 1 null"):
        make_spark_converter(wall, parent_cache_dir_url=str(tmp_path / "a"))
    assert leftovers(tmp_path / "a") == []
    arrays = spark.createDataFrame([(0, None), (1, [1.0])], "id long, v array<double>")
    with pytest.raises(ConfigurationError, match="column 'v' \\(array<float>\\) holds 1"):
        make_spark_converter(arrays, parent_cache_dir_url=str(tmp_path / "a"))
    with pytest.raises(PythonException, match="'day' is null"):  # the failed job's error
        make_spark_converter(df, parent_cache_dir_url=str(tmp_path / "b"), on_null="error")
    assert leftovers(tmp_path / "b") == []  # neither the run nor its key folder


def test_petastorm_argument_order(spark: Any, tmp_path: Path):
    import json

    df = spark.range(300).selectExpr("id", "cast(id as double) / 3 as x")
    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, str(tmp_path))
    try:
        converter = make_spark_converter(df, 1024, "uncompressed", "float64")
    finally:
        spark.conf.unset(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF)
    index = json.loads((Path(converter.cache_dir_url) / "index.json").read_text())
    assert len(index["shards"]) > 2  # 1 KiB shards
    assert {shard["compression"] for shard in index["shards"]} == {None}
    assert {shard["column_encodings"][1] for shard in index["shards"]} == {"float64"}
    with pytest.warns(FutureWarning, match="parent_cache_dir_url=url"):
        again = make_spark_converter(df, str(tmp_path / "other"))  # type: ignore[arg-type]
    assert again.cache_dir_url.startswith(str(tmp_path / "other"))


def test_delete_dir_handler(converter: SparkDatasetConverter, spark: Any, tmp_path: Path):
    from shardstream.loader import register_delete_dir_handler

    deleted: list[str] = []
    df = spark.range(5)
    own = make_spark_converter(df, parent_cache_dir_url=str(tmp_path))
    register_delete_dir_handler(deleted.append)
    try:
        own.delete()
    finally:
        register_delete_dir_handler(None)
    assert len(deleted) == 1
    assert own.cache_dir_url.startswith(deleted[0])
    assert os.path.isdir(own.cache_dir_url)  # the handler did the deleting: nothing
    own.delete()
    assert not os.path.exists(own.cache_dir_url)
