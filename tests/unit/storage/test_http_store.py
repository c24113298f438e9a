"""HTTPStore without a server: URLs, refusals, and that construction does no I/O."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.errors import ConfigurationError, UnsupportedURLError
from shardstream.storage import HTTPStore, open_store


@pytest.mark.parametrize("scheme", ["http", "https", "HTTPS"])
def test_open_store_gives_an_http_store(scheme: str):
    store = open_store(f"{scheme}://127.0.0.1:1/data/set/", timeout=3)
    assert isinstance(store, HTTPStore)
    assert store.timeout == 3
    assert store.url("shard.00000.mds") == f"{scheme}://127.0.0.1:1/data/set/shard.00000.mds"
    assert store.url("a b/c%d") == f"{scheme}://127.0.0.1:1/data/set/a%20b/c%25d"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("ftp://host/x", "http"),
        ("http:///nohost", "http"),
        ("https://user:pw@host/x", "user name or password"),
        ("https://host/x?sig=abc", "query"),
        ("https://host/x#frag", "query"),
    ],
)
def test_bad_urls_are_refused(url: str, match: str):
    with pytest.raises(ConfigurationError, match=match) as info:
        HTTPStore(url)
    assert "pw" not in str(info.value) or "user:pw" not in str(info.value)


def test_timeout_must_be_positive():
    with pytest.raises(ConfigurationError, match="timeout"):
        HTTPStore("https://host/x", timeout=0)


def test_headers_stay_out_of_repr_and_urls():
    store = HTTPStore("https://host/x", headers={"Authorization": "Bearer hush-hush"})
    assert "hush-hush" not in repr(store)
    assert "hush-hush" not in store.url("k")


def test_http_is_read_only_and_cannot_list(tmp_path: Path):
    store = HTTPStore("http://127.0.0.1:1/ds")
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(UnsupportedURLError, match=r"http://127.0.0.1:1/ds/f.*read-only"):
        store.put_file(str(source), "f")
    with pytest.raises(UnsupportedURLError, match="HTTP has no listing"):
        store.list()


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    with pytest.raises(ConfigurationError, match="relative"):
        HTTPStore("http://127.0.0.1:1/ds").get_bytes(key)
