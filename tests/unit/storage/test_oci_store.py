"""OCIStore without a server: URL parsing, configuration, and that construction does no I/O."""

from __future__ import annotations

import pytest

from shardstream import config
from shardstream.errors import ConfigurationError
from shardstream.storage import OCIStore, is_remote, open_store
from shardstream.storage.oci import parse_oci_url


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("oci://bucket@ns", ("bucket", "ns", "")),
        ("oci://bucket@ns/", ("bucket", "ns", "")),
        ("oci://bucket@ns/some/prefix/", ("bucket", "ns", "some/prefix")),
        ("OCI://b-1@my-tenancy/p", ("b-1", "my-tenancy", "p")),
    ],
)
def test_parse_oci_url(url: str, parts: tuple[str, str, str]):
    assert parse_oci_url(url) == parts
    assert is_remote(url)


@pytest.mark.parametrize(
    "url",
    ["oci://bucket/prefix", "oci://@ns/p", "oci://bucket@/p", "oci://b@n@m/p", "s3://b@n/p",
     "oci:/b@n/p", "oci://b@n/p?x=1"],
)  # fmt: skip
def test_bad_urls(url: str):
    with pytest.raises(ConfigurationError, match="oci://"):
        OCIStore(url)


def test_open_store_gives_an_oci_store_without_io(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("OCI_CONFIG_FILE", str(tmp_path / "does-not-exist"))
    monkeypatch.setenv("OCI_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("OCI_CLI_PROFILE", "TRAINING")
    store = open_store("oci://bucket@ns/some/prefix/")
    assert isinstance(store, OCIStore)
    assert (store.bucket, store.namespace, store.prefix) == ("bucket", "ns", "some/prefix")
    assert store.config_file == str(tmp_path / "does-not-exist")  # not read yet: no error
    assert (store.profile, store.endpoint_url) == ("TRAINING", "http://127.0.0.1:1")
    assert store._profile is None  # the config file is read on first use
    assert store.url("shard.00000.mds") == "oci://bucket@ns/some/prefix/shard.00000.mds"
    assert store.url("") == "oci://bucket@ns/some/prefix"
    assert OCIStore("oci://bucket@ns").url("index.json") == "oci://bucket@ns/index.json"


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OCI_ENDPOINT_URL", "http://127.0.0.1:1")
    store = OCIStore("oci://b@n", endpoint_url="http://127.0.0.1:2", config_file="~/c", profile="P")
    assert (store.endpoint_url, store.profile) == ("http://127.0.0.1:2", "P")
    assert not store.config_file.startswith("~")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ("~/.oci/config", "DEFAULT", None)),
        ({"OCI_CONFIG_FILE": " ", "OCI_CLI_PROFILE": "", "OCI_ENDPOINT_URL": ""},
         ("~/.oci/config", "DEFAULT", None)),
        ({"OCI_CONFIG_FILE": "/etc/oci", "OCI_CLI_PROFILE": "X", "OCI_ENDPOINT_URL": "http://h:1"},
         ("/etc/oci", "X", "http://h:1")),
    ],
)  # fmt: skip
def test_oci_environment(environ: dict[str, str], expected: tuple[str, str, str | None]):
    found = (
        config.oci_config_file(environ),
        config.oci_profile(environ),
        config.oci_endpoint_url(environ),
    )
    assert found == expected


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    with pytest.raises(ConfigurationError, match="relative"):
        OCIStore("oci://b@n/p", endpoint_url="http://127.0.0.1:1").get_bytes(key)


@pytest.mark.parametrize(("connect", "read"), [(0, 1), (1, 0), (-1, 5)])
def test_timeouts_must_be_positive(connect: float, read: float):
    with pytest.raises(ConfigurationError, match="positive"):
        OCIStore("oci://b@n", connect_timeout=connect, read_timeout=read)
    assert OCIStore("oci://b@n", connect_timeout=2, read_timeout=3).timeouts == (2.0, 3.0)
