"""DatabricksVolumeStore and MDSWriter against a local Files API server (fake_databricks.py).

No emulator of the Databricks Files API exists, so the server is a small fake on 127.0.0.1 that
implements the documented calls the store makes (``/api/2.0/fs/files`` GET with Range, HEAD and
PUT; ``/api/2.0/fs/directories`` PUT and paged GET) and checks the bearer token as the service
does (401 for an unknown token, 403 for a write with a read-only one). A guard fails any test
that connects elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import MDSWriter
from shardstream.errors import (
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
    UnsupportedURLError,
    UploadError,
)
from shardstream.storage import DatabricksVolumeStore, open_store

from .fake_databricks import PAGE_SIZE, VOLUME, DatabricksWorkspace


def write(out: Any, n: int, **kwargs: Any) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))


def put(store: DatabricksVolumeStore, tmp_path: Path, key: str, data: bytes) -> None:
    source = tmp_path / "upload.bin"
    source.write_bytes(data)
    store.put_file(str(source), key)


def calls(workspace: DatabricksWorkspace, method: str, api: str, root: str = "") -> list[str]:
    """The paths of the requests the fake has seen for one method and API (under ``root``).

    The fake serves the whole test session, so other tests' requests are in its log too.
    """
    base = f"/api/2.0/fs/{api}{root}/" if root else f"/api/2.0/fs/{api}/"
    return [
        urlsplit(path).path
        for m, path, _ in workspace.server.requests
        if m == method and path.startswith(base)
    ]


def test_round_trip_range_info_and_overwrite(databricks_env: DatabricksWorkspace, tmp_path: Path):
    store = DatabricksVolumeStore(databricks_env.url("roundtrip"))
    data = os.urandom(70_000)
    put(store, tmp_path, "deep/er/a.bin", data)
    assert store.get_bytes("deep/er/a.bin") == data
    assert store.get_range("deep/er/a.bin", 0, 1) == data[:1]
    assert store.get_range("deep/er/a.bin", 1000, 5000) == data[1000:5000]
    assert store.get_range("deep/er/a.bin", 69_999, 70_000) == data[-1:]
    assert store.info("deep/er/a.bin").size == len(data)
    assert store.exists("deep/er/a.bin")
    assert not store.exists("deep/er")  # a folder is not a file
    put(store, tmp_path, "deep/er/a.bin", b"replaced")
    assert store.get_bytes("deep/er/a.bin") == b"replaced"
    # The documented calls: the folder made once (mkdir -p), then PUT ?overwrite=true.
    assert calls(databricks_env, "PUT", "directories", store.root) == [
        f"/api/2.0/fs/directories{store.root}/deep/er"
    ]
    uploads = [
        p
        for m, p, _ in databricks_env.server.requests
        if m == "PUT" and p.startswith(f"/api/2.0/fs/files{store.root}/")
    ]
    assert uploads
    assert all(p.endswith("/deep/er/a.bin?overwrite=true") for p in uploads)
    ranged = [h for m, _, h in databricks_env.server.requests if m == "GET" and "Range" in h]
    assert {h["Range"] for h in ranged} >= {"bytes=1000-4999", "bytes=0-0"}


@pytest.mark.parametrize(("start", "end"), [(60, 101), (100, 101), (200, 300), (101, 101)])
def test_ranges_past_the_end_fail(
    databricks_env: DatabricksWorkspace, tmp_path: Path, start: int, end: int
):
    store = DatabricksVolumeStore(databricks_env.url("range"))
    put(store, tmp_path, "f", bytes(100))
    with pytest.raises(StorageError, match=r"runs past the end of the file \(100 bytes\)") as info:
        store.get_range("f", start, end)
    assert store.url("f") in str(info.value)


def test_list_walks_folders_page_by_page(databricks_env: DatabricksWorkspace, tmp_path: Path):
    url = databricks_env.url("list")
    store = DatabricksVolumeStore(url)
    keys = [f"shard.{i:05}.mds" for i in range(3 * PAGE_SIZE + 1)]
    keys += ["sub/x", "sub/y", "sub/deeper/z", "other/w", "index.json"]
    for key in keys:
        put(store, tmp_path, key, key.encode())
    put(DatabricksVolumeStore(url + "-sibling"), tmp_path, "shard.99999.mds", b"other")
    before = len(calls(databricks_env, "GET", "directories"))
    assert store.list() == sorted(keys)
    listed = calls(databricks_env, "GET", "directories")[before:]
    assert listed.count(f"/api/2.0/fs/directories{store.root}") == 5  # 13 entries, 3 a page
    assert store.list("sub/") == ["sub/deeper/z", "sub/x", "sub/y"]
    assert store.list("sub/deeper/") == ["sub/deeper/z"]
    assert store.list("shard.0000") == keys[:10]
    assert store.list("nothing") == []
    # A prefix inside one folder lists that folder only, not its siblings.
    before = len(calls(databricks_env, "GET", "directories"))
    store.list("sub/x")
    walked = set(calls(databricks_env, "GET", "directories")[before:])
    assert walked == {
        f"/api/2.0/fs/directories{store.root}",
        f"/api/2.0/fs/directories{store.root}/sub",
    }
    assert DatabricksVolumeStore(databricks_env.url("empty")).list() == []


def test_missing_files_and_volumes(databricks_env: DatabricksWorkspace):
    store = DatabricksVolumeStore(databricks_env.url("missing"))
    assert not store.exists("nope")
    for call in (store.get_bytes, store.info, lambda key: store.get_range(key, 0, 1)):
        with pytest.raises(ObjectNotFoundError, match=r"dbfs:/Volumes/.*/nope") as info:
            call("nope")
        assert isinstance(info.value, FileNotFoundError)
    other = DatabricksVolumeStore("dbfs:/Volumes/main/default/no_such_volume/ds")
    with pytest.raises(ObjectNotFoundError, match="NOT_FOUND"):
        other.get_bytes("x")


@pytest.mark.parametrize("kind", ["wrong", "read-only"])
def test_a_refused_token_names_the_url_and_where_tokens_come_from(
    databricks_env: DatabricksWorkspace, tmp_path: Path, kind: str
):
    token = "dapi-wrong-" + databricks_env.token[::-1]
    if kind == "read-only":
        token = databricks_env.read_only_token
    url = databricks_env.url("denied")
    store = DatabricksVolumeStore(url, host=databricks_env.host, token=token)
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(CredentialsError) as info:
        store.put_file(str(source), "f")
    message = str(info.value)
    assert f"{url}/f" in message
    assert ("401" if kind == "wrong" else "403 PERMISSION_DENIED") in message
    for text in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "TorchDistributor"):
        assert text in message
    for secret in (token, databricks_env.token):
        assert secret not in message
        assert secret not in repr(info.value.__cause__) + repr(info.value.__context__)
    assert not any(path.startswith(url[len("dbfs:") :]) for path in databricks_env.server.files)
    if kind == "read-only":
        assert store.exists("f") is False  # reading is allowed with that token


def test_missing_credentials_say_where_they_come_from(
    databricks_env: DatabricksWorkspace, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("DATABRICKS_TOKEN")
    store = DatabricksVolumeStore(databricks_env.url("notoken"))
    before = len(databricks_env.server.requests)
    with pytest.raises(CredentialsError, match="no Databricks token") as info:
        store.get_bytes("f")
    assert store.url("") in str(info.value)
    assert "TorchDistributor" in str(info.value)
    monkeypatch.delenv("DATABRICKS_HOST")
    with pytest.raises(CredentialsError, match="no Databricks host and token"):
        store.list()
    assert len(databricks_env.server.requests) == before  # nothing was sent without a token


def test_arguments_win_over_the_environment(
    databricks_env: DatabricksWorkspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-not-the-token")
    monkeypatch.setenv("DATABRICKS_HOST", "http://127.0.0.1:9")
    store = DatabricksVolumeStore(
        databricks_env.url("args"), host=databricks_env.host, token=databricks_env.token
    )
    put(store, tmp_path, "f", b"ok")
    assert store.get_bytes("f") == b"ok"


def test_an_unreachable_host_is_a_storage_error(databricks_env: DatabricksWorkspace):
    store = DatabricksVolumeStore(databricks_env.url("down"), host="http://127.0.0.1:9")
    with pytest.raises(StorageError, match=r"dbfs:/Volumes/.*/f failed at http://127\.0\.0\.1:9"):
        store.get_bytes("f")


def test_other_dbfs_paths_are_refused(databricks_env: DatabricksWorkspace):
    with pytest.raises(UnsupportedURLError, match="Unity Catalog volumes"):
        open_store("dbfs:/mnt/data/ds")


def test_writer_publishes_to_a_volume_and_reads_back(
    databricks_env: DatabricksWorkspace, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    url = databricks_env.url("writer")
    write(url, 20)
    store = open_store(url)
    assert isinstance(store, DatabricksVolumeStore)
    keys = store.list()
    index = json.loads(store.get_bytes("index.json"))
    shards = {shard["raw_data"]["basename"] for shard in index["shards"]}
    assert len(shards) > 1
    assert set(keys) == {*shards, "index.json"}
    copy = tmp_path / "copy"
    copy.mkdir()
    for key in keys:
        (copy / key).write_bytes(store.get_bytes(key))
    check_dataset(copy, 20)
    assert databricks_env.token not in caplog.text
    assert VOLUME in caplog.text  # the requests were logged, without the token


def test_a_refused_token_fails_the_writer_without_leaking(
    databricks_env: DatabricksWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    wrong = "dapi-wrong-" + databricks_env.token[::-1]
    monkeypatch.setenv("DATABRICKS_TOKEN", wrong)
    url = databricks_env.url("writer-denied")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UploadError, match="DATABRICKS_TOKEN") as info:
        write(url, 3, retry=1)
    assert isinstance(info.value.__cause__, CredentialsError)
    assert url in str(info.value)
    for text in (str(info.value), caplog.text):
        assert wrong not in text
        assert databricks_env.token not in text


def test_uploads_and_reads_from_many_threads(databricks_env: DatabricksWorkspace, tmp_path: Path):
    store = DatabricksVolumeStore(databricks_env.url("threads"))
    payloads = {f"part/{i:02}": os.urandom(1000 + i) for i in range(16)}
    for key, data in payloads.items():
        (tmp_path / key.replace("/", "-")).write_bytes(data)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda k: store.put_file(str(tmp_path / k.replace("/", "-")), k), payloads))
        read = dict(zip(payloads, pool.map(store.get_bytes, payloads), strict=True))
    assert read == payloads
    assert store.list("part/") == sorted(payloads)
