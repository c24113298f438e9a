"""S3Store without a server: URL parsing, configuration, and that construction does no I/O."""

from __future__ import annotations

import pytest

from shardstream import config
from shardstream.errors import ConfigurationError
from shardstream.storage import S3Store, open_store


def test_open_store_gives_an_s3_store_without_io(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    store = open_store("s3://bucket/some/prefix/")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url) == ("bucket", "some/prefix", None)
    assert store.url("shard.00000.mds") == "s3://bucket/some/prefix/shard.00000.mds"
    assert store._fs is None  # nothing connected yet


def test_bucket_root_urls():
    store = S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")
    assert store.url("index.json") == "s3://bucket/index.json"
    assert store.url("") == "s3://bucket"


def test_endpoint_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9")
    assert S3Store("s3://b/p").endpoint_url == "http://127.0.0.1:9"
    assert S3Store("s3://b/p", endpoint_url="http://127.0.0.1:8").endpoint_url == (
        "http://127.0.0.1:8"
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"S3_ENDPOINT_URL": "  "}, None),
        ({"S3_ENDPOINT_URL": "http://h:1"}, "http://h:1"),
    ],
)
def test_s3_endpoint_url(environ: dict[str, str], expected: str | None):
    assert config.s3_endpoint_url(environ) == expected


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "gs://b/p", "s3://b/p?x=1"])
def test_bad_urls(url: str):
    with pytest.raises(ConfigurationError, match="s3://"):
        S3Store(url)


def test_key_and_secret_go_together():
    with pytest.raises(ConfigurationError, match="both key and secret"):
        S3Store("s3://b/p", key="k")


def test_repr_and_urls_hide_the_secret():
    hush = "a-test-secret"
    store = S3Store("s3://b/p", endpoint_url="http://127.0.0.1:1", key="k", secret=hush)
    assert hush not in repr(store)
    assert hush not in store.url("x")


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    with pytest.raises(ConfigurationError, match="relative"):
        S3Store("s3://b/p", endpoint_url="http://127.0.0.1:1").get_bytes(key)
