"""DatabricksVolumeStore without a server: URL parsing, credentials, and no I/O when opened."""

from __future__ import annotations

import secrets

import pytest

from shardstream import config
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage import DatabricksVolumeStore, LocalStore, is_remote, open_store
from shardstream.storage.databricks import parse_volume_url

TOKEN = "dapi" + secrets.token_hex(8)  # made up, never sent anywhere


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("dbfs:/Volumes/cat/sch/vol", "/Volumes/cat/sch/vol"),
        ("dbfs:/Volumes/cat/sch/vol/", "/Volumes/cat/sch/vol"),
        ("dbfs:/Volumes/cat/sch/vol/data/ds", "/Volumes/cat/sch/vol/data/ds"),
        ("dbfs:///Volumes/cat/sch/vol/ds", "/Volumes/cat/sch/vol/ds"),
        ("DBFS:/Volumes/cat/sch/vol/ds", "/Volumes/cat/sch/vol/ds"),
    ],
)
def test_parse_volume_url(url: str, root: str):
    assert parse_volume_url(url) == root
    assert is_remote(url)


@pytest.mark.parametrize("url", ["dbfs:/mnt/data/ds", "dbfs:/FileStore/ds", "dbfs:/", "dbfs:/tmp"])
def test_other_dbfs_paths_are_unsupported(url: str):
    with pytest.raises(UnsupportedURLError, match="Unity Catalog volumes") as info:
        open_store(url)
    assert isinstance(info.value, ValueError)
    assert url in str(info.value)


@pytest.mark.parametrize(
    "url",
    ["dbfs:/Volumes/cat/sch", "dbfs:/Volumes", "dbfs://Volumes/c/s/v", "dbfs:/Volumes/c/s/v/../x",
     "dbfs:/Volumes/c/s/v?x=1", "s3://b/Volumes/c/s/v"],
)  # fmt: skip
def test_bad_volume_urls(url: str):
    with pytest.raises(ConfigurationError, match="dbfs"):
        DatabricksVolumeStore(url)


def test_the_fuse_mount_is_a_local_path(tmp_path):
    assert not is_remote("/Volumes/cat/sch/vol/ds")
    assert not is_remote("/dbfs/mnt/ds")
    assert isinstance(open_store("/Volumes/cat/sch/vol/ds"), LocalStore)


def test_open_store_gives_a_volume_store_without_io(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DATABRICKS_HOST", raising=False)
    monkeypatch.delenv("DATABRICKS_TOKEN", raising=False)
    store = open_store("dbfs:/Volumes/cat/sch/vol/ds/")  # no credentials needed to open
    assert isinstance(store, DatabricksVolumeStore)
    assert store.url("shard.00000.mds") == "dbfs:/Volumes/cat/sch/vol/ds/shard.00000.mds"
    assert store.url("") == "dbfs:/Volumes/cat/sch/vol/ds"
    with pytest.raises(CredentialsError, match="DATABRICKS_HOST and DATABRICKS_TOKEN"):
        store.get_bytes("index.json")


def test_the_token_stays_out_of_repr_and_urls():
    token = TOKEN
    store = DatabricksVolumeStore(
        "dbfs:/Volumes/c/s/v/ds", host="https://adb-1.2.azuredatabricks.net", token=token
    )
    assert token not in repr(store)
    assert token not in store.url("x")
    assert store._scrub(f"echo {token} back") == "echo *** back"


@pytest.mark.parametrize("host", ["ftp://h", "not a url", "https://", "https://h?x=1"])
def test_bad_hosts(host: str):
    with pytest.raises(ConfigurationError, match="workspace URL"):
        DatabricksVolumeStore("dbfs:/Volumes/c/s/v", host=host, token=TOKEN)


@pytest.mark.parametrize(
    ("environ", "host", "token"),
    [
        ({}, None, None),
        ({"DATABRICKS_HOST": " ", "DATABRICKS_TOKEN": ""}, None, None),
        ({"DATABRICKS_HOST": "adb-1.2.azuredatabricks.net", "DATABRICKS_TOKEN": "t"},
         "https://adb-1.2.azuredatabricks.net", "t"),
        ({"DATABRICKS_HOST": "http://127.0.0.1:5"}, "http://127.0.0.1:5", None),
    ],
)  # fmt: skip
def test_databricks_environment(environ: dict[str, str], host: str | None, token: str | None):
    assert config.databricks_host(environ) == host
    assert config.databricks_token(environ) == token


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    store = DatabricksVolumeStore("dbfs:/Volumes/c/s/v", host="http://127.0.0.1:1", token=TOKEN)
    with pytest.raises(ConfigurationError, match="relative"):
        store.get_bytes(key)


@pytest.mark.parametrize("seconds", [0, -1.0])
def test_timeouts_must_be_positive(seconds: float):
    with pytest.raises(ConfigurationError, match="read_timeout"):
        DatabricksVolumeStore("dbfs:/Volumes/c/s/v", read_timeout=seconds)


def test_files_over_five_gib_are_refused_before_any_request(tmp_path):
    source = tmp_path / "huge"
    with open(source, "wb") as handle:
        handle.truncate(5 * 1024**3 + 1)  # sparse: no real disk space
    store = DatabricksVolumeStore("dbfs:/Volumes/c/s/v", host="http://127.0.0.1:1", token=TOKEN)
    with pytest.raises(StorageError, match="5 GiB"):
        store.put_file(str(source), "huge")
