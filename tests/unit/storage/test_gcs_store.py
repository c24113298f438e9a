"""GCSStore without a server: URL parsing, configuration, and that construction does no I/O."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardstream import config
from shardstream.errors import ConfigurationError, StorageError
from shardstream.storage import GCSStore, open_store
from shardstream.storage.gcs import parse_gcs_url


@pytest.fixture(autouse=True)
def no_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("gs://bucket", ("gs", "bucket", "")),
        ("gs://bucket/", ("gs", "bucket", "")),
        ("gs://my-bucket/some/prefix/", ("gs", "my-bucket", "some/prefix")),
        ("GS://b.with.dots/p", ("gs", "b.with.dots", "p")),
        ("gcs://bucket_1/p", ("gcs", "bucket_1", "p")),
    ],
)
def test_parse_gcs_url(url: str, expected: tuple[str, str, str]):
    assert parse_gcs_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "gs://",
        "gs:///prefix",
        "s3://b/p",
        "gs://bkt/p?x=1",
        "gs://bkt/p#f",
        "gs://Bucket/p",
        "gs://ab",
    ],
)
def test_bad_urls(url: str):
    with pytest.raises(ConfigurationError, match="gs://"):
        GCSStore(url)


def test_open_store_gives_a_gcs_store_without_io():
    store = open_store("gs://bucket/some/prefix/")
    assert isinstance(store, GCSStore)
    assert (store.bucket, store.prefix, store.endpoint_url) == ("bucket", "some/prefix", None)
    assert store.url("shard.00000.mds") == "gs://bucket/some/prefix/shard.00000.mds"
    assert store.url("") == "gs://bucket/some/prefix"
    assert store._fs is None  # nothing imported, looked up or connected yet
    assert isinstance(open_store("gcs://bucket/p"), GCSStore)


def test_options_pass_through_open_store():
    store = open_store("gs://bkt/p", endpoint_url="http://127.0.0.1:1", project="proj")
    assert isinstance(store, GCSStore)
    assert (store.endpoint_url, store.project) == ("http://127.0.0.1:1", "proj")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"STORAGE_EMULATOR_HOST": "  "}, None),
        ({"STORAGE_EMULATOR_HOST": "default"}, None),
        ({"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"}, "http://127.0.0.1:4443"),
        ({"STORAGE_EMULATOR_HOST": "https://gcs.local:9/"}, "https://gcs.local:9"),
    ],
)
def test_gcs_emulator_host(environ: dict[str, str], expected: str | None):
    assert config.gcs_emulator_host(environ) == expected


def test_the_endpoint_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9")
    assert GCSStore("gs://bkt/p").endpoint_url == "http://127.0.0.1:9"
    assert GCSStore("gs://bkt/p", endpoint_url="127.0.0.1:8").endpoint_url == "http://127.0.0.1:8"


def test_credential_method():
    # Anonymous against an emulator, Application Default Credentials against Google, and a
    # given token always wins.
    assert GCSStore("gs://bkt/p", endpoint_url="http://127.0.0.1:1").credential_method == "anon"
    assert GCSStore("gs://bkt/p").credential_method == "google_default"
    assert GCSStore("gs://bkt/p", token="/keys/sa.json").credential_method == "token"  # noqa: S106
    store = GCSStore("gs://bkt/p", token="google_default", endpoint_url="http://127.0.0.1:1")  # noqa: S106
    assert store.credential_method == "google_default"


def test_prepare_gcsfs_import_sets_the_variable_only_when_unset():
    environ: dict[str, str] = {}
    config.prepare_gcsfs_import(environ)
    assert environ == {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    environ = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "true"}
    config.prepare_gcsfs_import(environ)
    assert environ == {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "true"}


def test_the_store_imports_gcsfs_with_the_experimental_filesystem_off():
    # In a fresh interpreter, so that no earlier import of gcsfs decides the outcome.
    code = (
        "from shardstream.storage import GCSStore\n"
        "fs = GCSStore('gs://bkt/p', endpoint_url='http://127.0.0.1:9')._filesystem()\n"
        "import os; print(os.environ['GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'],"
        " type(fs).__name__, type(fs).__mro__[1].__name__)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, check=True
    )
    # gcsfs's plain filesystem, with one attempt per request.
    assert result.stdout.split() == ["false", "SingleAttemptGCSFileSystem", "GCSFileSystem"]


def test_secrets_stay_out_of_repr_urls_and_scrubbed_text():
    raw = "ya29.a-raw-access-token"
    store = GCSStore("gs://bkt/p", token=raw)
    assert raw not in repr(store)
    assert raw not in store.url("x")
    assert store._scrub(f"401 for token {raw}") == "401 for token ***"
    info = {"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEv", "client_email": "a@b"}
    keyed = GCSStore("gs://bkt/p", token=info)
    assert "MIIEv" not in keyed._scrub(f"bad key {info}")


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    with pytest.raises(ConfigurationError, match="relative"):
        GCSStore("gs://bkt/p", endpoint_url="http://127.0.0.1:1").get_bytes(key)


@pytest.mark.parametrize(("connect", "read"), [(0, 60), (10, -1)])
def test_timeouts_must_be_positive(connect: float, read: float):
    with pytest.raises(ConfigurationError, match="must be positive"):
        GCSStore("gs://bkt/p", connect_timeout=connect, read_timeout=read)


def test_an_sdk_error_holding_a_secret_is_neither_shown_nor_chained():
    raw = "ya29.a-raw-access-token"
    store = GCSStore("gs://bkt/p", token=raw, endpoint_url="http://127.0.0.1:1")
    with pytest.raises(StorageError, match="gs://bkt/p/k") as info, store._boundary("reading", "k"):
        raise OSError(f"the server did not like {raw}")
    assert raw not in str(info.value)
    assert info.value.__cause__ is None  # a traceback would print the original message
    with pytest.raises(StorageError) as plain, store._boundary("reading", "k"):
        raise OSError("connection reset")
    assert isinstance(plain.value.__cause__, OSError)  # kept for debugging when harmless
