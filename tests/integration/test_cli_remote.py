"""The ``shardstream`` command on a dataset in S3 (SeaweedFS on 127.0.0.1, auth enforced)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from tests.cli_run import run, write

from shardstream import LocalDataset, MDSWriter
from shardstream.cli.main import EXIT_FAILED
from shardstream.storage import open_store

from .conftest import S3Server

pytestmark = pytest.mark.s3


def env_of(server: S3Server) -> dict[str, str]:
    keys = (
        "S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_EC2_METADATA_DISABLED",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    )
    return {key: os.environ[key] for key in keys}


def test_inspect_head_validate_a_remote_dataset(s3_env: S3Server, tmp_path: Path):
    url = s3_env.url("cli-remote")
    write(url, 60, compression="zstd", hashes=["xxh64"])
    env = env_of(s3_env)
    summary = json.loads(run("inspect", url, "--json", env=env).stdout)
    assert summary["samples"] == 60
    assert summary["shards"] > 1
    head = run("head", url, "-n", "2", env=env).stdout
    assert "id: 1" in head
    cache = tmp_path / "cache"
    out = run("validate", url, "-q", "--cache", str(cache), env=env).stdout
    assert out.startswith("OK: ")
    assert "60 samples decoded" in out
    assert sorted(p.name for p in cache.glob("shard.*")) == sorted(
        e["raw_data"]["basename"] + ".zstd"
        for e in json.loads(open_store(url).get_bytes("index.json"))["shards"]
    )
    # Without --cache the downloads go to a temporary folder that is gone afterwards.
    assert run("validate", url, "-q", env=env).stdout.startswith("OK: ")


def test_a_kept_cache_serves_no_file_of_a_dataset_since_rewritten(s3_env: S3Server, tmp_path: Path):
    # Same names and sizes, and a byte-identical index.json: only the objects' ETags differ.
    url, cache, env = s3_env.url("cli-rewritten"), tmp_path / "cache", env_of(s3_env)

    def labelled(label: str) -> None:
        # Written locally (the reference's names) and copied up file by file, as the reference
        # or a sync tool does: shardstream's own writer names each write's shards anew.
        columns, folder = {"id": "int", "text": "str"}, tmp_path / label
        with MDSWriter(out=str(folder), columns=columns, size_limit=400) as writer:
            for i in range(30):
                writer.write({"id": i, "text": f"{label}-{i:04d}"})
        store = open_store(url)
        for name in sorted(os.listdir(folder)):
            store.put_file(str(folder / name), name)

    labelled("aaa")
    first = run("head", url, "-n", "30", "--cache", str(cache), env=env).stdout
    assert "aaa-0029" in first
    assert list(cache.glob("shard.*"))  # kept
    index = open_store(url).get_bytes("index.json")
    labelled("bbb")  # every object overwritten in place
    assert open_store(url).get_bytes("index.json") == index
    again = run("head", url, "-n", "30", "--cache", str(cache), env=env).stdout
    assert "aaa-" not in again
    assert "bbb-0029" in again


def test_a_remote_parquet_folder_and_a_root_of_splits(s3_env: S3Server, tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    url = s3_env.url("cli-parquet")
    store = open_store(url)
    for part in range(2):
        path = tmp_path / f"{part}.parquet"
        pq.write_table(pa.table({"k": list(range(part * 10, part * 10 + 10))}), path,
                       row_group_size=4)  # fmt: skip
        store.put_file(str(path), f"data/{part}.parquet")
    env = env_of(s3_env)
    summary = json.loads(run("inspect", url, "--split", "data", "--json", env=env).stdout)
    assert (summary["samples"], summary["shards"]) == (20, 6)
    assert "k: 11" in run("head", url, "--split", "data", "-n", "12", "-q", env=env).stdout
    out = run("validate", url, "--split", "data", "-q", env=env).stdout
    assert out.startswith("OK: 6 shards")
    assert "20 samples decoded" in out
    write(f"{url}/train", 3)  # now the root holds a split with an index too
    done = run("inspect", url, "--split", "trian", env=env, check=EXIT_FAILED)
    assert "did you mean --split train?" in done.stderr


def test_wrong_credentials_exit_3_without_the_secret(s3_env: S3Server):
    url = s3_env.url("cli-remote-creds")
    write(url, 3)
    env = {**env_of(s3_env), "AWS_SECRET_ACCESS_KEY": "not-the-secret-xyz"}
    done = run("inspect", url, env=env, check=EXIT_FAILED)
    assert "not-the-secret-xyz" not in done.stderr + done.stdout
    assert url in done.stderr or "s3://" in done.stderr
    assert "AWS_SECRET_ACCESS_KEY" in done.stderr


def test_merge_remote_partitions(s3_env: S3Server, tmp_path: Path):
    root = s3_env.url("cli-merge")
    write(f"{root}/part-1", 4)
    write(f"{root}/part-0", 3, start=100)
    run("merge", root, env=env_of(s3_env))
    store = open_store(root)
    copy = tmp_path / "copy"
    for key in store.list():
        (copy / key).parent.mkdir(parents=True, exist_ok=True)
        (copy / key).write_bytes(store.get_bytes(key))
    assert [s["id"] for s in LocalDataset(copy)] == [100, 101, 102, 0, 1, 2, 3]


def test_convert_with_spark_to_s3(s3_env: S3Server, tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "events"
    source.mkdir()
    pq.write_table(pa.table({"k": list(range(25)), "s": [f"v{i}" for i in range(25)]}),
                   source / "part-0.parquet")  # fmt: skip
    url = s3_env.url("cli-spark")
    env = {**env_of(s3_env), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_DRIVER_PYTHON": sys.executable}  # fmt: skip
    done = run("convert", str(source), url, "--from", "spark", "--spark-master", "local[1]",
               "-q", env=env)  # fmt: skip
    assert "wrote 25 samples" in done.stdout
    summary = json.loads(run("inspect", url, "--json", env=env).stdout)
    assert summary["samples"] == 25


def test_progress_of_uploads_and_downloads(s3_env: S3Server, tmp_path: Path):
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": "x" * 500}) + "\n" for i in range(400)))
    url = s3_env.url("cli-progress")
    env = env_of(s3_env)
    done = run("convert", str(source), url, "--size-limit", "20kb", env=env)
    assert "wrote 400 samples" in done.stdout
    stored = sum(
        entry["raw_data"]["bytes"]
        for entry in json.loads(open_store(url).get_bytes("index.json"))["shards"]
    )
    assert "uploaded" in done.stderr  # the bar of bytes published, beside the bar of rows
    assert "uploaded" not in run("convert", str(source), url + "-q", "-q", env=env).stderr
    checked = run("validate", url, env=env)
    assert checked.stdout.startswith("OK: ")
    assert "downloaded" in checked.stderr
    assert stored > 20_000  # several shards, so the bars had something to count
    assert "downloaded" not in run("validate", url, "-q", env=env).stderr


def test_a_remote_delta_table_is_read_at_its_latest_version(s3_env: S3Server, tmp_path: Path):
    import pyarrow as pa

    deltalake = pytest.importorskip("deltalake")
    table = tmp_path / "table"
    deltalake.write_deltalake(str(table), pa.table({"a": [1, 2, 3]}))
    deltalake.write_deltalake(str(table), pa.table({"a": [7, 8]}), mode="overwrite")
    url = s3_env.url("cli-delta")
    store = open_store(url)
    for path in sorted(table.rglob("*")):
        if path.is_file():
            store.put_file(str(path), path.relative_to(table).as_posix())
    env = env_of(s3_env)
    summary = json.loads(run("inspect", url, "--json", env=env).stdout)
    assert (summary["format"], summary["version"], summary["samples"]) == ("delta", 1, 2)
    assert "Delta table, version 1" in run("inspect", url, env=env).stdout
    head = run("head", url, "-q", env=env).stdout
    assert "a: 7" in head
    assert "a: 1" not in head
