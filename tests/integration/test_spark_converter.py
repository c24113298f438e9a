"""make_spark_converter with a real local SparkSession: cache keying, torch and TF loaders.

The DataFrames are read from Parquet files, as a Petastorm user's would be; each test has its
own cache folder. The reuse test runs a second Spark application in a subprocess.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pyspark.sql import functions as F

from shardstream.converters import (
    PARENT_CACHE_DIR_URL_CONF,
    SHARDSTREAM_CACHE_DIR_URL_CONF,
    cache_dataframe,
    spark_cache,
    spark_cache_key,
)
from shardstream.errors import ConfigurationError
from shardstream.loader import SparkDatasetConverter, make_spark_converter

from .conftest import S3Server
from .spark_session import spark_fixture  # noqa: F401 (the session fixture `spark`)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

ROWS = 103
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def parquet(spark: Any, tmp_path: Path) -> Path:
    """103 rows in three Parquet files: id, a double, an array of doubles, a string."""
    path = tmp_path / "source"
    (
        spark.range(ROWS)
        .withColumn("x", F.col("id") / 4)
        .withColumn("v", F.array(F.col("id").cast("double"), F.lit(0.5)))
        .withColumn("name", F.concat(F.lit("row-"), F.col("id").cast("string")))
        .repartition(3)
        .write.parquet(str(path))
    )
    return path


@pytest.fixture
def converter(spark: Any, parquet: Path, tmp_path: Path) -> SparkDatasetConverter:
    return make_spark_converter(
        spark.read.parquet(str(parquet)), parent_cache_dir_url=str(tmp_path / "cache")
    )


def torch_ids(converter: SparkDatasetConverter, **kwargs: Any) -> list[int]:
    ids: list[int] = []
    with converter.make_torch_dataloader(**kwargs) as loader:
        for batch in loader:
            ids += batch["id"].tolist()
    return ids


def run_folders(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/run-*"))


def test_len_rows_once_and_float32(converter: SparkDatasetConverter):
    assert len(converter) == ROWS
    assert os.path.isfile(os.path.join(converter.cache_dir_url, "index.json"))
    sizes, ids = [], []
    with converter.make_torch_dataloader(batch_size=10, num_epochs=1, workers_count=2) as loader:
        for batch in loader:
            assert set(batch) == {"id", "x", "v", "name"}
            assert batch["x"].dtype == torch.float32
            assert batch["v"].dtype == torch.float32
            assert batch["v"].shape[1:] == (2,)
            assert batch["id"].dtype == torch.int64
            assert batch["name"] == [f"row-{i}" for i in batch["id"].tolist()]
            assert torch.equal(batch["x"], batch["id"].to(torch.float32) / 4)
            sizes.append(len(batch["id"]))
            ids += batch["id"].tolist()
    assert sorted(ids) == list(range(ROWS))
    assert sorted(sizes) == [3] + [10] * 10


def test_dtype_none_keeps_doubles(spark: Any, parquet: Path, tmp_path: Path):
    converter = make_spark_converter(
        spark.read.parquet(str(parquet)), parent_cache_dir_url=str(tmp_path), dtype=None
    )
    with converter.make_torch_dataloader(batch_size=50, num_epochs=1, workers_count=0) as loader:
        batch = next(iter(loader))
    assert batch["x"].dtype == batch["v"].dtype == torch.float64


def test_materializing_shows_progress_and_workers_fit_the_cores(
    spark: Any,
    parquet: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
):
    with caplog.at_level("INFO", logger="shardstream"):
        converter = make_spark_converter(
            spark.read.parquet(str(parquet)), parent_cache_dir_url=str(tmp_path)
        )
    assert "dataframe_to_mds" in capfd.readouterr().err  # the bar of Spark tasks
    assert any("materializing the DataFrame" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # a 2-core machine
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with converter.make_torch_dataloader(batch_size=50, num_epochs=1) as loader:
            assert sorted(i for b in loader for i in b["id"].tolist()) == list(range(ROWS))
    assert not [w for w in caught if "worker" in str(w.message)], caught


def test_two_epochs_shuffled(converter: SparkDatasetConverter):
    epochs: list[list[int]] = [[], []]
    with converter.make_torch_dataloader(
        batch_size=16, num_epochs=2, workers_count=2, shuffling_queue_capacity=100, seed=3
    ) as loader:
        for batch in loader:
            epoch = 0 if len(epochs[0]) < ROWS else 1
            epochs[epoch] += batch["id"].tolist()
    assert [sorted(ids) for ids in epochs] == [list(range(ROWS))] * 2
    assert epochs[0] != epochs[1]
    assert epochs[0] != list(range(ROWS))


def test_infinite_epochs(converter: SparkDatasetConverter):
    with converter.make_torch_dataloader(batch_size=40, workers_count=0) as loader:
        seen: Counter[int] = Counter()
        for number, batch in enumerate(loader):
            seen.update(batch["id"].tolist())
            if number == 8:  # three epochs of 40 + 40 + 23
                break
    assert set(seen.values()) == {3}
    assert len(seen) == ROWS


@pytest.mark.parametrize("workers", [0, 2])
def test_shards_split_rows_disjointly(converter: SparkDatasetConverter, workers: int):
    shards = [
        torch_ids(converter, batch_size=8, num_epochs=1, workers_count=workers,
                  cur_shard=shard, shard_count=3)
        for shard in range(3)
    ]  # fmt: skip
    assert sorted(itertools.chain(*shards)) == list(range(ROWS))  # each row once over the shards
    assert all(len(ids) >= 8 * 4 for ids in shards)


def test_even_batches_keep_the_repeats(converter: SparkDatasetConverter):
    shards = [
        torch_ids(converter, batch_size=8, num_epochs=1, workers_count=0, cur_shard=shard,
                  shard_count=3, even_batches=True)
        for shard in range(3)
    ]  # fmt: skip
    assert [len(ids) for ids in shards] == [35, 35, 35]  # 103 rows over 3 ranks: 2 repeated
    assert set(itertools.chain(*shards)) == set(range(ROWS))


def test_reused_by_another_process(spark: Any, parquet: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    spark.conf.set(PARENT_CACHE_DIR_URL_CONF, f"file://{cache}")
    try:
        first = make_spark_converter(spark.read.parquet(str(parquet)))
    finally:
        spark.conf.unset(PARENT_CACHE_DIR_URL_CONF)
    index = Path(first.cache_dir_url) / "index.json"
    written = index.stat().st_mtime_ns
    script = f"""
import os, sys
os.environ.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
from pyspark.sql import SparkSession
from shardstream.loader import make_spark_converter
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.session.timeZone", "UTC")  # as the fixture's: part of the key
         .config("{SHARDSTREAM_CACHE_DIR_URL_CONF}", {str(cache)!r}).getOrCreate())
converter = make_spark_converter(spark.read.parquet({str(parquet)!r}))
print("URL", converter.cache_dir_url, len(converter))
spark.stop()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False,
        cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"URL {first.cache_dir_url} {ROWS}" in done.stdout
    assert index.stat().st_mtime_ns == written  # reused, not rewritten
    assert run_folders(cache) == [Path(first.cache_dir_url)]


def test_rebuilt_when_a_source_file_changes(spark: Any, parquet: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    first = make_spark_converter(spark.read.parquet(str(parquet)), parent_cache_dir_url=str(cache))
    again = make_spark_converter(spark.read.parquet(str(parquet)), parent_cache_dir_url=str(cache))
    assert again.cache_dir_url == first.cache_dir_url
    import pyarrow.parquet as pq

    victim = sorted(parquet.glob("*.parquet"))[0]
    table = pq.read_table(victim)
    pq.write_table(table.slice(0, table.num_rows - 1), victim)  # one row fewer, same schema
    (victim.parent / f".{victim.name}.crc").unlink()  # Hadoop's checksum of the old bytes
    changed = make_spark_converter(
        spark.read.parquet(str(parquet)), parent_cache_dir_url=str(cache)
    )
    assert changed.cache_dir_url != first.cache_dir_url
    assert len(changed) == ROWS - 1
    assert len(run_folders(cache)) == 2


def test_plan_and_options_change_the_key(spark: Any, parquet: Path, tmp_path: Path):
    df = spark.read.parquet(str(parquet))
    urls = {
        make_spark_converter(df, parent_cache_dir_url=str(tmp_path)).cache_dir_url,
        make_spark_converter(
            df.filter("id < 50"), parent_cache_dir_url=str(tmp_path)
        ).cache_dir_url,
        make_spark_converter(
            df, parent_cache_dir_url=str(tmp_path), compression_codec="gzip"
        ).cache_dir_url,
        make_spark_converter(df, parent_cache_dir_url=str(tmp_path), dtype="float64").cache_dir_url,
    }
    assert len(urls) == 4


def test_in_memory_rows_are_keyed_by_content(spark: Any, tmp_path: Path):
    one = spark.createDataFrame([(1, 2.0)], "a long, b double")
    two = spark.createDataFrame([(1, 3.0)], "a long, b double")
    first = make_spark_converter(one, parent_cache_dir_url=str(tmp_path))
    assert (
        make_spark_converter(two, parent_cache_dir_url=str(tmp_path)).cache_dir_url
        != first.cache_dir_url
    )


def test_conf_keys_and_the_error_without_one(spark: Any, parquet: Path, tmp_path: Path):
    df = spark.read.parquet(str(parquet))
    with pytest.raises(ConfigurationError) as caught:
        make_spark_converter(df)
    for name in ("parent_cache_dir_url", PARENT_CACHE_DIR_URL_CONF, SHARDSTREAM_CACHE_DIR_URL_CONF):
        assert name in str(caught.value)
    for key, folder in (
        (SHARDSTREAM_CACHE_DIR_URL_CONF, "ours"),
        (PARENT_CACHE_DIR_URL_CONF, "ps"),
    ):
        spark.conf.set(key, str(tmp_path / folder))
    try:  # Petastorm's key wins over ours; the argument over both
        assert make_spark_converter(df).cache_dir_url.startswith(str(tmp_path / "ps"))
        spark.conf.unset(PARENT_CACHE_DIR_URL_CONF)
        assert make_spark_converter(df).cache_dir_url.startswith(str(tmp_path / "ours"))
        explicit = make_spark_converter(
            df, parent_cache_dir_url=str(tmp_path / "arg")
        ).cache_dir_url
        assert explicit.startswith(str(tmp_path / "arg"))
    finally:
        spark.conf.unset(PARENT_CACHE_DIR_URL_CONF)
        spark.conf.unset(SHARDSTREAM_CACHE_DIR_URL_CONF)


def test_delete(spark: Any, parquet: Path, tmp_path: Path):
    df = spark.read.parquet(str(parquet))
    converter = make_spark_converter(df, parent_cache_dir_url=str(tmp_path / "cache"))
    key = Path(converter.cache_dir_url).parent
    converter.delete()
    assert not key.exists()
    rebuilt = make_spark_converter(df, parent_cache_dir_url=str(tmp_path / "cache"))
    assert Path(rebuilt.cache_dir_url).parent == key
    assert len(rebuilt) == ROWS


def test_racing_creators_share_one_copy(
    spark: Any, parquet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    df = spark.read.parquet(str(parquet))
    results: list[Any] = [None, None]
    barrier = threading.Barrier(2, timeout=60)
    looked = threading.local()
    read_marker = spark_cache._read_marker

    def racing_read(key_url: str) -> Any:  # both creators look before either publishes
        if not getattr(looked, "once", False):
            looked.once = True
            barrier.wait()
        return read_marker(key_url)

    monkeypatch.setattr(spark_cache, "_read_marker", racing_read)

    def create(slot: int) -> None:
        results[slot] = cache_dataframe(df, str(tmp_path))

    threads = [threading.Thread(target=create, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results[0].url == results[1].url
    assert sorted(result.created for result in results) == [False, True]
    assert run_folders(tmp_path) == [Path(results[0].url)]  # the loser removed its copy


def test_tf_dataset_yields_the_same_rows(converter: SparkDatasetConverter):
    with converter.make_tf_dataset(batch_size=10, num_epochs=1) as dataset:
        batches = list(dataset.as_numpy_iterator())
    ids = np.concatenate([batch.id for batch in batches])
    assert sorted(ids.tolist()) == list(range(ROWS))
    assert sorted(len(batch.id) for batch in batches) == [3] + [10] * 10
    for batch in batches:
        assert batch.x.dtype == np.float32
        assert batch.v.shape[1:] == (2,)
        assert [name.decode() for name in batch.name] == [f"row-{i}" for i in batch.id]
    assert sorted(torch_ids(converter, batch_size=10, num_epochs=1, workers_count=0)) == sorted(
        ids.tolist()
    )


def test_tf_dataset_shards_and_epochs(converter: SparkDatasetConverter):
    ids: list[int] = []
    for shard in range(2):
        with converter.make_tf_dataset(
            batch_size=7, num_epochs=2, cur_shard=shard, shard_count=2, shuffling_queue_capacity=1
        ) as dataset:
            ids += [int(i) for batch in dataset.as_numpy_iterator() for i in batch.id]
    assert Counter(ids) == dict.fromkeys(range(ROWS), 2)


@pytest.mark.s3
def test_cache_on_an_object_store(spark: Any, s3_env: S3Server, parquet: Path, tmp_path: Path):
    # Python workers take their environment from the SparkContext (spark.executorEnv.*).
    names = ["S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_EC2_METADATA_DISABLED", "AWS_CONFIG_FILE",
             "AWS_SHARED_CREDENTIALS_FILE"]  # fmt: skip
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update({name: os.environ[name] for name in names})
    parent = s3_env.url("converter-cache")
    try:
        df = spark.read.parquet(str(parquet))
        converter = make_spark_converter(df, parent_cache_dir_url=parent)
        again = make_spark_converter(df, parent_cache_dir_url=parent)
    finally:
        environment.clear()
        environment.update(saved)
    assert converter.cache_dir_url.startswith(f"{parent}/")
    assert again.cache_dir_url == converter.cache_dir_url
    assert len(again) == ROWS
    local = str(tmp_path / "local")
    ids = torch_ids(converter, batch_size=10, num_epochs=1, workers_count=0, local=local)
    assert sorted(ids) == list(range(ROWS))
    with pytest.raises(ConfigurationError, match="never deletes"):
        converter.delete()


def test_hadoop_stats_list_each_folder_once(
    spark: Any, parquet: Path, monkeypatch: pytest.MonkeyPatch
):
    files = sorted(parquet.glob("*.parquet"))
    expected = {f"file:{f}": (f.stat().st_size, f.stat().st_mtime_ns // 1_000_000) for f in files}

    def no_single_stat(*args: Any) -> Any:
        raise AssertionError("the folder's listing should have answered")

    monkeypatch.setattr(spark_cache_key, "_hadoop_stat", no_single_stat)
    assert spark_cache_key.hadoop_stats(spark, sorted(expected)) == expected
    monkeypatch.undo()  # a URL spelled otherwise than the listing's: asked about alone
    spelled = {f"file://{f}": (f.stat().st_size, f.stat().st_mtime_ns // 1_000_000) for f in files}
    assert spark_cache_key.hadoop_stats(spark, sorted(spelled)) == spelled


def test_leaving_the_block_stops_an_epoch_midway(converter: SparkDatasetConverter):
    with converter.make_torch_dataloader(batch_size=10, workers_count=2) as loader:
        batches = iter(loader)
        assert len(next(batches)["id"]) == 10
    assert loader._running == []  # the DataLoader's workers were told to stop
    assert next(batches, None) is None  # and no new epoch starts


def test_ranks_from_the_launchers_variables(
    converter: SparkDatasetConverter, monkeypatch: pytest.MonkeyPatch
):
    shards = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        shards.append(torch_ids(converter, batch_size=10, num_epochs=1, workers_count=0))
    assert not set(shards[0]) & set(shards[1])
    assert sorted(itertools.chain(*shards)) == list(range(ROWS))


def test_explicit_shards_ignore_the_launchers_variables(
    converter: SparkDatasetConverter, monkeypatch: pytest.MonkeyPatch
):
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)  # a launcher's, which Petastorm never reads
    whole = torch_ids(converter, batch_size=10, num_epochs=1, workers_count=0,
                      cur_shard=0, shard_count=1)  # fmt: skip
    assert sorted(whole) == list(range(ROWS))
    thirds = [torch_ids(converter, batch_size=10, num_epochs=1, workers_count=0,
                        cur_shard=shard, shard_count=3) for shard in range(3)]  # fmt: skip
    assert sorted(itertools.chain(*thirds)) == list(range(ROWS))
    with pytest.raises(ConfigurationError, match="do not name a shard"):
        torch_ids(converter, batch_size=10, cur_shard=3, shard_count=3)


def test_a_path_is_not_a_dataframe(spark: Any, parquet: Path, tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"spark\.read\.parquet"):
        make_spark_converter(str(parquet), parent_cache_dir_url=str(tmp_path))


def test_a_copy_deleted_by_hand_is_written_again(spark: Any, parquet: Path, tmp_path: Path):
    df = spark.read.parquet(str(parquet))
    first = make_spark_converter(df, parent_cache_dir_url=str(tmp_path))
    shutil.rmtree(first.cache_dir_url)  # the marker stays behind
    again = make_spark_converter(df, parent_cache_dir_url=str(tmp_path))
    assert again.cache_dir_url != first.cache_dir_url
    assert sorted(torch_ids(again, batch_size=50, num_epochs=1, workers_count=0)) == list(
        range(ROWS)
    )
    assert (
        make_spark_converter(df, parent_cache_dir_url=str(tmp_path)).cache_dir_url
        == again.cache_dir_url
    )


def test_replica_groups_read_the_same_rows(converter: SparkDatasetConverter):
    ranks = [
        torch_ids(converter, batch_size=8, num_epochs=1, workers_count=0, cur_shard=rank,
                  shard_count=4, replication=2)
        for rank in range(4)
    ]  # fmt: skip
    assert ranks[0] == ranks[1]
    assert ranks[2] == ranks[3]
    assert sorted(ranks[0] + ranks[2]) == list(range(ROWS))
