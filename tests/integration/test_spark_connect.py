"""make_spark_converter and dataframe_to_mds on Spark Connect, against a local Connect server.

Databricks' serverless compute and shared clusters hand users Connect DataFrames
(``pyspark.sql.connect.dataframe.DataFrame``: no JVM on the client). The server is the Connect
jar that pyspark ships, started once for the run (``spark_connect_session.py``); the workflow
tests run Petastorm's examples against it as a user's script would, each in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import shardstream
from shardstream import LocalDataset
from shardstream.converters import dataframe_to_mds
from shardstream.errors import ConfigurationError
from shardstream.loader import SparkDatasetConverter, make_spark_converter

from .spark_connect_session import connect_server_fixture, connect_spark_fixture  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

ROWS = 57
REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / "examples" / "petastorm" / "petastorm_workflows.py"
WORKFLOW_ROWS = 600


def write_source(spark: Any, folder: Path, first: int, rows: int) -> None:
    """``rows`` rows from id ``first`` in three Parquet files: id, a double, an array, a string."""
    (
        spark.range(first, first + rows)
        .selectExpr(
            "id", "id / 4 AS x", "array(CAST(id AS DOUBLE), 0.5) AS v", "concat('row-', id) AS name"
        )
        .repartition(3)
        .write.mode("overwrite")
        .parquet(str(folder))
    )


@pytest.fixture
def source(connect_spark: Any, tmp_path: Path) -> Path:
    """A Parquet folder whose name needs quoting in a URI (``inputFiles()`` quotes it)."""
    folder = tmp_path / "source 50% off"
    write_source(connect_spark, folder, 0, ROWS)
    return folder


def cache_files(cache: Path) -> dict[str, int]:
    """Every file under the cache folder, with its modification time."""
    return {str(path): path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}


def torch_ids(converter: SparkDatasetConverter, **kwargs: Any) -> list[int]:
    ids: list[int] = []
    with converter.make_torch_dataloader(**kwargs) as loader:
        for batch in loader:
            ids += batch["id"].tolist()
    return ids


def test_the_dataframe_is_a_connect_one(connect_spark: Any, source: Path):
    df = connect_spark.read.parquet(str(source))
    assert type(df).__module__ == "pyspark.sql.connect.dataframe"
    assert not hasattr(df, "_jdf")


def test_dataframe_to_mds_on_connect(connect_spark: Any, source: Path, tmp_path: Path):
    out = tmp_path / "mds"
    df = connect_spark.read.parquet(str(source))
    local, remote = dataframe_to_mds(df, mds_kwargs={"out": str(out)}, float_dtype="float32")
    assert (local, remote) == (str(out), "")
    with LocalDataset(out, cache_dir=tmp_path / "mds-cache") as dataset:
        samples = sorted(
            (dataset[i] for i in range(len(dataset))), key=lambda sample: int(sample["id"])
        )
    assert [int(s["id"]) for s in samples] == list(range(ROWS))
    assert LocalDataset(str(out)).shards[0].columns["x"] == "float32"  # float_dtype applied
    assert all(s["x"] == np.float32(s["id"] / 4) for s in samples)
    assert [s["name"] for s in samples] == [f"row-{i}" for i in range(ROWS)]


def test_converter_torch_epoch_holds_each_row_once(
    connect_spark: Any, source: Path, tmp_path: Path
):
    converter = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(tmp_path / "cache")
    )
    assert len(converter) == ROWS
    ids, sizes = [], []
    with converter.make_torch_dataloader(batch_size=10, num_epochs=1, workers_count=2) as loader:
        for batch in loader:
            assert batch["x"].dtype == torch.float32
            assert batch["v"].shape[1:] == (2,)
            assert torch.equal(batch["x"], batch["id"].to(torch.float32) / 4)
            assert batch["name"] == [f"row-{i}" for i in batch["id"].tolist()]
            ids += batch["id"].tolist()
            sizes.append(len(batch["id"]))
    assert Counter(ids) == dict.fromkeys(range(ROWS), 1)
    assert sorted(sizes) == [7] + [10] * 5


def test_converter_tf_dataset_one_epoch(connect_spark: Any, source: Path, tmp_path: Path):
    converter = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(tmp_path / "cache")
    )
    with converter.make_tf_dataset(batch_size=10, num_epochs=1) as dataset:
        batches = list(dataset.as_numpy_iterator())
    ids = np.concatenate([batch.id for batch in batches]).tolist()
    assert Counter(ids) == dict.fromkeys(range(ROWS), 1)
    for batch in batches:
        assert batch.x.dtype == np.float32
        assert [name.decode() for name in batch.name] == [f"row-{i}" for i in batch.id]


def test_the_same_dataframe_reuses_its_copy(
    connect_spark: Any, connect_url: str, source: Path, tmp_path: Path
):
    cache = tmp_path / "cache"
    df = connect_spark.read.parquet(str(source))
    first = make_spark_converter(df, parent_cache_dir_url=str(cache))
    written = cache_files(cache)
    assert any(name.endswith("index.json") for name in written)
    again = make_spark_converter(df, parent_cache_dir_url=str(cache))
    reread = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(cache)
    )
    assert again.cache_dir_url == reread.cache_dir_url == first.cache_dir_url
    from pyspark.sql import SparkSession

    other: Any = SparkSession.builder.remote(connect_url).create()  # another job's session
    try:
        assert other.session_id != connect_spark.session_id
        other.conf.set("spark.sql.session.timeZone", "UTC")  # as the fixture's: part of the key
        elsewhere = make_spark_converter(
            other.read.parquet(str(source)), parent_cache_dir_url=str(cache)
        )
    finally:
        other.stop()
    assert elsewhere.cache_dir_url == first.cache_dir_url
    assert cache_files(cache) == written  # no file written, none rewritten


def test_a_rewritten_source_gets_a_new_copy(connect_spark: Any, source: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    first = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(cache)
    )
    write_source(connect_spark, source, 1000, ROWS + 5)  # other rows, the same folder
    changed = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(cache)
    )
    assert changed.cache_dir_url != first.cache_dir_url
    assert len(changed) == ROWS + 5
    assert sorted(torch_ids(changed, batch_size=16, num_epochs=1, workers_count=0)) == list(
        range(1000, 1000 + ROWS + 5)
    )
    assert sorted(torch_ids(first, batch_size=16, num_epochs=1, workers_count=0)) == list(
        range(ROWS)
    )  # the first copy stays whole


def test_a_file_rewritten_under_its_name_gets_a_new_copy(
    connect_spark: Any, source: Path, tmp_path: Path
):
    import pyarrow.parquet as pq

    cache = tmp_path / "cache"
    first = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(cache)
    )
    victim = sorted(source.glob("*.parquet"))[0]
    table = pq.read_table(victim)
    pq.write_table(table.slice(0, table.num_rows - 1), victim)  # one row fewer, same name
    (victim.parent / f".{victim.name}.crc").unlink()  # Hadoop's checksum of the old bytes
    changed = make_spark_converter(
        connect_spark.read.parquet(str(source)), parent_cache_dir_url=str(cache)
    )
    assert changed.cache_dir_url != first.cache_dir_url
    assert len(changed) == ROWS - 1


def test_plan_options_and_in_memory_rows_change_the_key(
    connect_spark: Any, source: Path, tmp_path: Path
):
    df = connect_spark.read.parquet(str(source))
    one = connect_spark.createDataFrame([(1, 2.0)], "a long, b double")
    two = connect_spark.createDataFrame([(1, 3.0)], "a long, b double")
    variants: list[tuple[Any, dict[str, Any]]] = [
        (df, {}),
        (df.filter("id < 50"), {}),
        (df, {"compression_codec": "gzip"}),
        (df, {"dtype": "float64"}),
        (one, {}),
        (two, {}),
    ]
    urls = [
        make_spark_converter(frame, parent_cache_dir_url=str(tmp_path), **options).cache_dir_url
        for frame, options in variants
    ]
    assert len(set(urls)) == len(urls)
    assert make_spark_converter(one, parent_cache_dir_url=str(tmp_path)).cache_dir_url == urls[4]


def test_wide_plans_are_keyed_whole_and_the_conf_put_back(connect_spark: Any):
    from shardstream.converters.spark_cache_key import dataframe_key

    conf = "spark.sql.debug.maxToStringFields"

    def wide(last: int) -> Any:  # 40 columns: past the 25 fields a plan prints by default
        columns = [f"id + {i} AS c{i}" for i in range(39)]
        return connect_spark.range(5).selectExpr(*columns, f"id * {last} AS c39")

    assert connect_spark.conf.get(conf, None) is None
    key, material = dataframe_key(wide(2), {})
    assert "more field" not in material["plan"]
    assert "session" not in material  # keyed by the text alone: reused by later sessions
    assert key != dataframe_key(wide(3), {})[0]  # the 40th column's expression counts
    assert connect_spark.conf.get(conf, None) is None  # unset again
    connect_spark.conf.set(conf, "30")
    try:
        dataframe_key(wide(2), {})
        assert connect_spark.conf.get(conf) == "30"  # the user's value, back
    finally:
        connect_spark.conf.unset(conf)


def test_literals_that_read_as_ids_change_the_key(connect_spark: Any, source: Path):
    from shardstream.converters.spark_cache_key import dataframe_key

    df = connect_spark.read.parquet(str(source))
    one, two = (dataframe_key(df.filter(f"name = 'row#{n}'"), {}) for n in (1, 2))
    assert one[1]["plan"] == two[1]["plan"]  # the server's text prints literals bare
    assert one[0] != two[0]


def test_delete_and_rebuild(connect_spark: Any, source: Path, tmp_path: Path):
    df = connect_spark.read.parquet(str(source))
    converter = make_spark_converter(df, parent_cache_dir_url=str(tmp_path / "cache"))
    key = Path(converter.cache_dir_url).parent
    converter.delete()
    assert not key.exists()
    rebuilt = make_spark_converter(df, parent_cache_dir_url=str(tmp_path / "cache"))
    assert Path(rebuilt.cache_dir_url).parent == key
    assert Path(rebuilt.cache_dir_url) != Path(converter.cache_dir_url)
    assert len(rebuilt) == ROWS


def test_a_deleted_source_is_named(connect_spark: Any, source: Path, tmp_path: Path):
    from pyspark.errors import AnalysisException

    from shardstream.converters.spark_connect_key import server_file_stats

    df = connect_spark.read.parquet(str(source))
    gone = sorted(str(path) for path in source.glob("*.parquet"))[0]
    for path in source.iterdir():
        path.unlink()
    source.rmdir()
    with pytest.raises(AnalysisException, match="source 50% off"):  # the server analyses anew
        make_spark_converter(df, parent_cache_dir_url=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ConfigurationError, match="read the source again") as caught:
        server_file_stats(connect_spark, [Path(gone).as_uri()])  # gone between two calls
    assert Path(gone).as_uri() in str(caught.value)


def run_workflow(workflow: str, url: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    """Petastorm's example ``workflow`` on the Connect server, as a user's script runs it."""
    report = tmp_path / f"{workflow}-{uuid.uuid4().hex[:6]}.json"
    src = Path(shardstream.__file__).resolve().parents[1]  # the shardstream under test
    env = {**os.environ, "PYTHONPATH": str(src), "TF_CPP_MIN_LOG_LEVEL": "3"}
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        env.pop(name, None)
    subprocess.run(
        [sys.executable, str(WORKFLOWS), workflow, "--rows", str(WORKFLOW_ROWS), "--cache",
         str(tmp_path / "cache"), "--report", str(report), "--remote", url, *args],
        check=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(report.read_text())
    assert result["rows"] == WORKFLOW_ROWS
    return result


def test_workflow_torch_on_connect(connect_url: str, tmp_path: Path):
    result = run_workflow("torch", connect_url, tmp_path, "--epochs", "2")
    assert Counter(result["ids"]) == dict.fromkeys(range(WORKFLOW_ROWS), 2)  # once an epoch
    assert result["loss"] < result["first_epoch_loss"] or result["loss"] < 0.3


def test_workflow_keras_on_connect(connect_url: str, tmp_path: Path):
    result = run_workflow("keras", connect_url, tmp_path, "--epochs", "3")
    assert result["losses"][-1] < result["losses"][0]
    assert result["accuracy"] > 0.7


def test_workflow_hyperopt_trials_read_in_spark_tasks(connect_url: str, tmp_path: Path):
    result = run_workflow("hyperopt", connect_url, tmp_path, "--trials", "2")
    assert [trial["status"] for trial in result["results"]] == ["ok", "ok"]
    for trial in result["results"]:
        assert trial["pid"] != result["driver_pid"]  # read inside a Spark task
        assert trial["rows"] == trial["distinct"] == WORKFLOW_ROWS
    assert 0.01 <= result["best"]["lr"] <= 1.0
