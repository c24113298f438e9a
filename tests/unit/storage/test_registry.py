from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardstream.errors import ConfigurationError, UnsupportedURLError
from shardstream.storage import LocalStore, is_remote, local_path, open_store


@pytest.mark.parametrize(
    ("url", "remote"),
    [
        ("s3://bucket/key", True),
        ("S3://bucket/key", True),
        ("gs://bucket/key", True),
        ("oci://bucket@ns/key", True),
        ("dbfs:/Volumes/x", True),
        ("file:///data/ds", False),
        ("FILE:///data/ds", False),
        ("/data/ds", False),
        ("relative/ds", False),
        ("~/ds", False),
        ("C:\\data\\ds", False),
        ("c:/data/ds", False),
    ],
)
def test_is_remote(url: str, remote: bool):
    assert is_remote(url) is remote


def test_local_path_of_file_urls_and_paths(tmp_path: Path):
    assert local_path(f"file://{tmp_path}/ds") == f"{tmp_path}/ds"
    assert local_path(f"{tmp_path}/ds") == f"{tmp_path}/ds"
    assert local_path("relative/ds") == "relative/ds"


def test_local_path_expands_the_home_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert local_path("~/ds") == os.path.join(str(tmp_path), "ds")


@pytest.mark.parametrize("prefix", ["", "file://"])
def test_open_store_gives_a_local_store(tmp_path: Path, prefix: str):
    store = open_store(f"{prefix}{tmp_path}/remote")
    assert isinstance(store, LocalStore)
    assert store.root == f"{tmp_path}/remote"
    source = tmp_path / "f"
    source.write_bytes(b"x")
    store.put_file(str(source), "a/f")
    assert (tmp_path / "remote" / "a" / "f").read_bytes() == b"x"


@pytest.mark.parametrize(
    ("url", "scheme"), [("hdfs://nn/ds", "hdfs"), ("FTP://h/ds", "ftp"), ("wasb://c/ds", "wasb")]
)
def test_open_store_refuses_unsupported_schemes(url: str, scheme: str):
    with pytest.raises(
        UnsupportedURLError, match=rf"cannot publish to {url!r}.*'{scheme}://'"
    ) as info:
        open_store(url)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/ds", {"connect_timeout": 2.5, "read_timeout": 2.5}),
        ("gs://bucket/ds", {"connect_timeout": 2.5, "read_timeout": 2.5}),
        ("azure://container/ds", {"connect_timeout": 2.5, "read_timeout": 2.5}),
        ("oci://bucket@ns/ds", {"timeouts": (2.5, 2.5)}),
        ("dbfs:/Volumes/c/s/v/ds", {"read_timeout": 2.5}),
        ("https://example.com/ds", {"timeout": 2.5}),
    ],
)
def test_open_store_gives_every_backend_the_timeout(url: str, expected: dict[str, object]):
    store = open_store(url, timeout=2.5)
    assert {name: getattr(store, name) for name in expected} == expected


def test_open_store_caps_the_connect_timeout_and_lets_explicit_options_win():
    store = open_store("s3://bucket/ds", timeout=120, read_timeout=7)
    assert (store.connect_timeout, store.read_timeout) == (10.0, 7)  # type: ignore[attr-defined]


def test_open_store_ignores_the_timeout_for_a_local_folder(tmp_path: Path):
    assert isinstance(open_store(str(tmp_path), timeout=5), LocalStore)


@pytest.mark.parametrize("timeout", [0, -1.0, True, "5"])
def test_open_store_refuses_a_timeout_that_is_not_a_positive_number(timeout: object):
    with pytest.raises(ConfigurationError, match=r"s3://bucket/ds.*timeout=.*positive"):
        open_store("s3://bucket/ds", timeout=timeout)  # type: ignore[arg-type]
