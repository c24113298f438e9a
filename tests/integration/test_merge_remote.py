"""merge_index's remote forms against a real S3-compatible server (SeaweedFS, auth enforced).

A remote root, a list of ``s3://`` index URLs, and a ``(local, remote)`` pair whose local folder
lacks the partition indexes: each merged index must read back as the whole dataset.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardstream import LocalDataset, MDSWriter, merge_index
from shardstream.storage import open_store

from .conftest import S3Server

pytestmark = pytest.mark.s3


def write_parts(url: str) -> None:
    """Partitions ``0`` (ids 0-4) and ``1`` (ids 5-7) under ``url``."""
    for part, ids in (("0", range(5)), ("1", range(5, 8))):
        with MDSWriter(out=f"{url}/{part}", columns={"id": "int"}, size_limit=100) as writer:
            for i in ids:
                writer.write({"id": i})


def read_ids(url: str, folder: Path) -> list[int]:
    store = open_store(url)
    for key in store.list():
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_bytes(store.get_bytes(key))
    with LocalDataset(folder) as dataset:
        return [int(dataset[i]["id"]) for i in range(len(dataset))]


def test_a_remote_root_is_merged_in_place(s3_env: S3Server, tmp_path: Path):
    url = s3_env.url("merge-root")
    write_parts(url)
    shards = merge_index(url, keep_local=True, download_timeout=10)
    assert len(json.loads(open_store(url).get_bytes("index.json"))["shards"]) == shards
    assert read_ids(url, tmp_path / "copy") == list(range(8))


def test_listed_remote_indexes_and_a_pair_root(s3_env: S3Server, tmp_path: Path):
    url = s3_env.url("merge-list")
    write_parts(url)
    local = tmp_path / "local"  # holds no partition index: both come from S3
    merge_index([f"{url}/1/index.json", f"{url}/0/index.json"], (str(local), url))
    assert (local / "index.json").read_bytes() == open_store(url).get_bytes("index.json")
    assert read_ids(url, tmp_path / "copy") == [5, 6, 7, 0, 1, 2, 3, 4]
