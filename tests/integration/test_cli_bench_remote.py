"""``shardstream bench`` on a dataset in S3 (SeaweedFS on 127.0.0.1): what a user's link moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli_run import run, write

from shardstream.storage import open_store

from .conftest import S3Server
from .test_cli_remote import env_of

pytestmark = pytest.mark.s3


def test_bench_a_remote_dataset_reports_bytes_moved_and_first_batch(
    s3_env: S3Server, tmp_path: Path
) -> None:
    url = s3_env.url("cli-bench")
    write(url, 90, compression="zstd")
    raw_index = open_store(url).get_bytes("index.json")
    stored = sum(entry["zip_data"]["bytes"] for entry in json.loads(raw_index)["shards"])
    remote_bytes = stored + len(raw_index)  # the bytes that cross the network: compressed
    cache = tmp_path / "cache"
    done = run("bench", url, "--batch-size", "8", "--epochs", "2", "--cache", str(cache),
               "--download-concurrency", "4", "--json", "-q", env=env_of(s3_env))  # fmt: skip
    result = json.loads(done.stdout)
    assert result["remote"] is True
    cold, warm = result["passes"]
    assert cold["samples"] == warm["samples"] == 90
    assert cold["first_batch_s"] > 0
    assert cold["samples_per_s"] > 0
    # The first pass filled the empty cache: every shard and the index crossed the network
    # (the cache keeps the shards decompressed, which are more bytes).
    assert cold["bytes_downloaded"] == remote_bytes
    assert cold["download_mb_per_s"] == pytest.approx(remote_bytes / cold["seconds"] / 1e6)
    assert warm["bytes_downloaded"] == 0  # the second pass read the cache
    text = run("bench", url, "--batch-size", "8", "--link-mbps", "100", "-q",
               env=env_of(s3_env)).stdout  # fmt: skip
    assert "downloaded" in text
    assert "MB/s" in text
    assert "first batch" in text
    assert "of a 100 Mbit/s link" in text  # the share of the user's link, in words too
    # A link the user names: each pass reports the share of it that crossed the network.
    rated = json.loads(run("bench", url, "--batch-size", "8", "--epochs", "2", "--cache",
                           str(tmp_path / "rated"), "--link-mbps", "100", "--json", "-q",
                           env=env_of(s3_env)).stdout)  # fmt: skip
    cold, warm = rated["passes"]
    assert rated["link_mbps"] == 100
    assert cold["fraction_of_link"] == pytest.approx(cold["download_mb_per_s"] * 8 / 100)
    assert cold["fraction_of_link"] > 0
    assert warm["fraction_of_link"] == 0  # the second pass read the cache: none of the link
