"""Rewriting a dataset on S3 (SeaweedFS) is all or nothing, however the rewrite ends.

A rewrite that fails, or whose writer is killed, leaves readers the old dataset whole; the
next successful write deletes what the dead one left, in the store and in the temporary
folder of the killed writer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.writer_samples import COLUMNS, sample

from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import DatasetExistsError, UploadError
from shardstream.storage import S3Store

from .conftest import S3Server
from .faults import FaultProxy

pytestmark = pytest.mark.s3

KILLED_WRITER = """
import sys, time
from tests.writer_samples import COLUMNS, sample
from shardstream import MDSWriter

with MDSWriter(out=sys.argv[1], columns=COLUMNS, size_limit=300, exist_ok=True,
               max_workers=1) as writer:
    for i in range(1000, 1040):
        writer.write(sample(i))
    time.sleep(120)  # killed here: every shard written, some uploaded, no index.json
"""


def write(url: str, first: int, n: int, **kwargs: Any) -> None:
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(first, first + n):
            writer.write(sample(i))


def read_ids(url: str, cache: Path) -> list[int]:
    """What a reader of ``url`` gets, through shardstream's cache at ``cache``."""
    dataset = StreamingDataset(remote=url, local=str(cache), batch_size=1)
    return sorted(int(item["id"]) for item in dataset)


def index_shards(store: S3Store) -> set[str]:
    index = json.loads(store.get_bytes("index.json"))
    return {(shard["zip_data"] or shard["raw_data"])["basename"] for shard in index["shards"]}


@pytest.fixture
def proxy(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as fault_proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", fault_proxy.endpoint)
        yield fault_proxy


def test_exist_ok_false_refuses_a_store_holding_a_dataset(s3_env: S3Server, tmp_path: Path):
    url = s3_env.url("refused")
    write(url, 0, 20)
    before = S3Store(url).list()
    with pytest.raises(DatasetExistsError, match=rf"{url} is not empty.*exist_ok=True"):
        write(url, 100, 5)
    assert S3Store(url).list() == before
    assert read_ids(url, tmp_path / "cache") == list(range(20))


def test_a_rewrite_whose_uploads_keep_failing_leaves_the_old_dataset(
    s3_env: S3Server, proxy: FaultProxy, tmp_path: Path
):
    url = s3_env.url("rewrite-fails")
    write(url, 0, 40)
    assert read_ids(url, tmp_path / "before") == list(range(40))
    # Shards 0 and 1 of the rewrite are uploaded; shard 2 fails on every attempt.
    proxy.inject("status500", count=1000, method="PUT", path_contains=".00002.mds")
    with pytest.raises(UploadError, match=r"\.00002\.mds"):
        write(url, 1000, 40, exist_ok=True, retry=1, max_workers=1)
    assert proxy.count("PUT", "index.json") == 1  # the first write's only
    assert read_ids(url, tmp_path / "after") == list(range(40))


def test_a_killed_rewrite_leaves_the_old_dataset_and_the_next_write_cleans_up(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url = s3_env.url("rewrite-killed")
    write(url, 0, 40)
    store = S3Store(url)
    old = store.list_info()
    assert read_ids(url, tmp_path / "cache") == list(range(40))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", KILLED_WRITER, url], cwd=root, env=env) as child:
        try:
            deadline = time.monotonic() + 60
            while len(set(store.list_info().items()) - set(old.items())) < 3:  # 3 uploaded
                assert child.poll() is None, "the writer ended before it was killed"
                assert time.monotonic() < deadline, "the writer uploaded nothing"
                time.sleep(0.05)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(10)
    assert store.info("index.json") == old["index.json"]
    assert [p.name.startswith("shardstream-write-") for p in scratch.iterdir()] == [True]
    # Readers, even one whose cache holds the old index, get the old dataset whole.
    assert read_ids(url, tmp_path / "cache") == list(range(40))
    assert read_ids(url, tmp_path / "fresh") == list(range(40))

    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    write(url, 2000, 10, exist_ok=True)
    assert set(store.list()) == {*index_shards(store), "index.json"}  # nothing earlier left
    assert list(scratch.iterdir()) == []  # the killed writer's temporary folder too
    assert read_ids(url, tmp_path / "cache") == list(range(2000, 2010))


def test_a_failed_rewrite_leaves_files_only_the_next_write_deletes(
    s3_env: S3Server, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
):
    url = s3_env.url("rewrite-leftovers")
    write(url, 0, 10)
    proxy.inject("status500", count=1000, method="PUT", path_contains=".00001.mds")
    with pytest.raises(UploadError):
        write(url, 100, 20, exist_ok=True, retry=0, max_workers=1)
    store = S3Store(url, endpoint_url=s3_env.endpoint)  # behind the proxy
    leftovers = set(store.list()) - index_shards(store) - {"index.json"}
    assert leftovers  # the failed write's first shard
    s3_env.filesystem().pipe(f"{url.removeprefix('s3://')}/notes.txt", b"the user's")
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_env.endpoint)  # no more faults
    write(url, 200, 10, exist_ok=True)
    assert set(store.list()) == {*index_shards(store), "index.json", "notes.txt"}
