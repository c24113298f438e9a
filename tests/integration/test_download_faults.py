"""download_file and fetch_bytes against real servers behind a fault-injecting proxy.

SeaweedFS (S3, auth enforced) and a static HTTP server, each reached through
:class:`tests.integration.faults.FaultProxy` on 127.0.0.1, which fails, resets, stalls or
truncates the next requests on demand and counts every request.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shardstream import MDSWriter
from shardstream.cache.index_sync import sync_index
from shardstream.errors import (
    CredentialsError,
    DownloadTimeoutError,
    ObjectNotFoundError,
    StorageError,
)
from shardstream.storage import (
    DownloadOptions,
    HTTPStore,
    ObjectStore,
    S3Store,
    download_file,
    fetch_bytes,
)
from shardstream.storage import download as download_module

from .conftest import S3Server
from .faults import FaultProxy
from .http_server import StaticServer

BACKENDS = [pytest.param("s3", marks=pytest.mark.s3), "http"]


@dataclass
class Faulty:
    """A store reached through a fault proxy, and a way to put objects behind its back."""

    store: ObjectStore
    proxy: FaultProxy
    put: Callable[[str, bytes], None]


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry at once (the delays themselves are tested elsewhere), so the tests stay fast."""
    monkeypatch.setattr(download_module, "backoff_delays", lambda retries, rng: [0.0] * retries)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "downloads"
    folder.mkdir()
    return folder


@pytest.fixture(params=BACKENDS)
def faulty(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Faulty]:
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_env")
        url = server.url("faults")
        direct = S3Store(url)
        port = int(server.endpoint.rsplit(":", 1)[1])
        with FaultProxy(port) as proxy:
            store = S3Store(url, endpoint_url=proxy.endpoint, read_timeout=5, connect_timeout=5)

            def put_s3(key: str, data: bytes) -> None:
                source = tmp_path / f"source-{uuid.uuid4().hex[:8]}"
                source.write_bytes(data)
                direct.put_file(str(source), key)

            yield Faulty(store, proxy, put_s3)
        return
    for name in ("http_proxy", "HTTP_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    web: StaticServer = request.getfixturevalue("http_server")
    folder = f"faults-{uuid.uuid4().hex[:8]}"
    os.makedirs(os.path.join(web.root, folder))
    with FaultProxy(web.port) as proxy:

        def put_http(key: str, data: bytes) -> None:
            path = os.path.join(web.root, folder, key)
            with open(path, "wb") as handle:
                handle.write(data)

        yield Faulty(HTTPStore(f"{proxy.endpoint}/{folder}", timeout=5), proxy, put_http)


def unique_key() -> str:
    return f"shard-{uuid.uuid4().hex[:8]}.mds"


# --- transient faults are retried -----------------------------------------------------------------


@pytest.mark.usefixtures("no_backoff")
@pytest.mark.parametrize("fault", ["status503", "status500", "reset", "truncate"])
def test_transient_faults_are_retried_until_the_download_succeeds(
    faulty: Faulty, out: Path, fault: Any
):
    key, data = unique_key(), os.urandom(40_000)
    faulty.put(key, data)
    faulty.proxy.inject(fault, count=2, method="GET", path_contains=key)
    dest = out / key
    assert download_file(faulty.store, key, str(dest), DownloadOptions(retry=2)) == len(data)
    assert dest.read_bytes() == data
    assert faulty.proxy.count("GET", key) == 3  # two faults, then the success
    assert faulty.proxy.count("HEAD", key) == 1
    assert os.listdir(out) == [key]


@pytest.mark.usefixtures("no_backoff")
@pytest.mark.parametrize("retry", [0, 1, 3])
def test_retry_counts_are_exact(faulty: Faulty, out: Path, retry: int):
    key = unique_key()
    faulty.put(key, b"x" * 1000)
    faulty.proxy.inject("status503", count=retry + 1, method="GET", path_contains=key)
    with pytest.raises(StorageError) as info:
        download_file(faulty.store, key, str(out / key), DownloadOptions(retry=retry))
    attempts = retry + 1
    assert faulty.proxy.count("GET", key) == attempts
    message = str(info.value)
    assert faulty.store.url(key) in message
    assert f"after {attempts} attempt" in message
    assert os.listdir(out) == []  # neither the file nor a temporary sibling
    # The faults are used up: the same call now succeeds with one more GET.
    download_file(faulty.store, key, str(out / key), DownloadOptions(retry=retry))
    assert faulty.proxy.count("GET", key) == attempts + 1


@pytest.mark.usefixtures("no_backoff")
def test_multipart_downloads_retry_only_the_failed_ranges(faulty: Faulty, out: Path):
    key, data = unique_key(), os.urandom(10_500)
    faulty.put(key, data)
    faulty.proxy.inject("status503", count=2, method="GET", path_contains=key)
    faulty.proxy.inject("reset", count=1, method="GET", path_contains=key)
    faulty.proxy.inject("truncate", count=1, method="GET", path_contains=key)
    options = DownloadOptions(retry=2, part_size=1_000, concurrency=4)
    dest = out / key
    assert download_file(faulty.store, key, str(dest), options, expected_size=len(data)) == 10_500
    assert dest.read_bytes() == data
    assert faulty.proxy.count("GET", key) == 11 + 4  # 11 ranges, 4 of them tried twice
    assert os.listdir(out) == [key]


@pytest.mark.usefixtures("no_backoff")
def test_fetch_bytes_retries_too(faulty: Faulty):
    key = unique_key()
    faulty.put(key, b'{"shards": []}')
    faulty.proxy.inject("reset", count=1, method="GET", path_contains=key)
    assert fetch_bytes(faulty.store, key, DownloadOptions(retry=1)) == b'{"shards": []}'
    assert faulty.proxy.count("GET", key) == 2


# --- timeouts -------------------------------------------------------------------------------------


def test_a_stall_past_the_timeout_fails_in_about_timeout_times_attempts(faulty: Faulty, out: Path):
    key = unique_key()
    faulty.put(key, b"y" * 5000)
    faulty.proxy.inject("stall", count=2, method="GET", path_contains=key, stall_seconds=20)
    options = DownloadOptions(retry=1, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(DownloadTimeoutError) as info:
        download_file(faulty.store, key, str(out / key), options)
    elapsed = time.monotonic() - started
    # Each attempt waited out its timeout (a lower bound: load only lengthens it), and the
    # download gave up long before either stall of 20 s ended (a loose upper bound: giving
    # up is the point, not how soon).
    assert 1.0 <= elapsed < 15.0
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, StorageError)
    assert faulty.store.url(key) in str(info.value)
    assert "after 2 attempts" in str(info.value)
    assert faulty.proxy.count("GET", key) == 2
    assert os.listdir(out) == []


@pytest.mark.usefixtures("no_backoff")
def test_a_stalled_request_is_abandoned_and_retried(faulty: Faulty, out: Path):
    key, data = unique_key(), os.urandom(3000)
    faulty.put(key, data)
    faulty.proxy.inject("stall", count=1, method="GET", path_contains=key, stall_seconds=20)
    started = time.monotonic()
    download_file(faulty.store, key, str(out / key), DownloadOptions(retry=1, timeout=0.5))
    assert faulty.proxy.count("GET", key) == 2  # the stalled GET, then its retry
    assert time.monotonic() - started < 15.0  # a loose bound: the stall was not waited out
    assert (out / key).read_bytes() == data
    assert os.listdir(out) == [key]


# --- truncation and atomicity ---------------------------------------------------------------------


@pytest.mark.parametrize("part_size", [1 << 20, 700])
def test_truncated_bodies_never_produce_a_file_under_the_final_name(
    faulty: Faulty, out: Path, part_size: int
):
    key = unique_key()
    faulty.put(key, os.urandom(6000))
    faulty.proxy.inject("truncate", count=1, method="GET", path_contains=key)
    dest = out / key
    with pytest.raises(StorageError) as info:
        download_file(faulty.store, key, str(dest), DownloadOptions(retry=0, part_size=part_size))
    assert not isinstance(info.value, DownloadTimeoutError)
    assert faulty.store.url(key) in str(info.value)
    assert not dest.exists()
    assert os.listdir(out) == []


# --- answers that do not change are not retried ---------------------------------------------------


def test_missing_objects_are_not_retried(
    faulty: Faulty, out: Path, monkeypatch: pytest.MonkeyPatch
):
    key = unique_key()
    with pytest.raises(ObjectNotFoundError) as info:
        download_file(faulty.store, key, str(out / key), DownloadOptions(retry=0))
    once = faulty.proxy.count(path_contains=key)
    assert once >= 1
    faulty.proxy.reset_counts()
    drawn: list[int] = []  # the backoff plans drawn: one per request that is to be retried

    def delays(retries: int, rng: object) -> list[float]:
        drawn.append(retries)
        return [0.0] * retries

    monkeypatch.setattr(download_module, "backoff_delays", delays)
    with pytest.raises(ObjectNotFoundError):
        download_file(faulty.store, key, str(out / key), DownloadOptions(retry=4))
    assert faulty.proxy.count(path_contains=key) == once  # retry=4 asked no more
    assert drawn == []  # and waited no backoff
    assert faulty.store.url(key) in str(info.value)
    faulty.proxy.reset_counts()
    with pytest.raises(ObjectNotFoundError):
        fetch_bytes(faulty.store, key, DownloadOptions(retry=4))
    assert faulty.proxy.count(path_contains=key) == 1  # one GET
    assert os.listdir(out) == []


@pytest.mark.s3
def test_refused_credentials_are_not_retried_and_stay_secret(
    s3_env: S3Server, out: Path, caplog: pytest.LogCaptureFixture
):
    wrong = "wrong-" + s3_env.secret[::-1]
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    caplog.set_level(logging.DEBUG, logger="shardstream")
    with FaultProxy(port) as proxy:
        url = s3_env.url("denied")
        store = S3Store(url, endpoint_url=proxy.endpoint, key=s3_env.key, secret=wrong)
        with pytest.raises(CredentialsError) as info:
            download_file(store, "shard.mds", str(out / "shard.mds"), DownloadOptions(retry=3))
        assert proxy.count() == 1
    assert url + "/shard.mds" in str(info.value)
    for text in (str(info.value), caplog.text):
        assert wrong not in text
        assert s3_env.secret not in text
    assert os.listdir(out) == []


@pytest.mark.usefixtures("no_backoff")
def test_retries_are_logged_with_the_url_and_the_cause(
    faulty: Faulty, out: Path, caplog: pytest.LogCaptureFixture
):
    key = unique_key()
    faulty.put(key, b"z" * 100)
    faulty.proxy.inject("status503", count=1, method="GET", path_contains=key)
    caplog.set_level(logging.WARNING, logger="shardstream.storage.download")
    download_file(faulty.store, key, str(out / key), DownloadOptions(retry=2))
    records = [r for r in caplog.records if r.name == "shardstream.storage.download"]
    assert len(records) == 1
    message = records[0].getMessage()
    assert faulty.store.url(key) in message
    assert "retry 1 of 2" in message


# --- a 200 OK that is not the object --------------------------------------------------------------


@pytest.mark.usefixtures("no_backoff")
@pytest.mark.parametrize("fault", ["html200", "short200"])
def test_a_wrong_200_body_is_a_transfer_error_retried_then_reported(
    faulty: Faulty, out: Path, fault: Any
):
    key, data = unique_key(), os.urandom(6000)
    faulty.put(key, data)
    # Retried: two wrong answers, then the object.
    faulty.proxy.inject(fault, count=2, method="GET", path_contains=key)
    dest = out / key
    options = DownloadOptions(retry=2)
    assert download_file(faulty.store, key, str(dest), options, expected_size=len(data)) == 6000
    assert dest.read_bytes() == data
    assert faulty.proxy.count("GET", key) == 3
    # Every attempt wrong: reported as a transfer error naming the URL, never as a changed
    # dataset (the store's HEAD says the object is the size the index says).
    faulty.proxy.reset_counts()
    faulty.proxy.inject(fault, count=3, method="GET", path_contains=key)
    other = out / "again"
    with pytest.raises(StorageError) as info:
        download_file(faulty.store, key, str(other), options, expected_size=len(data))
    message = str(info.value)
    assert type(info.value) is StorageError, message
    assert faulty.store.url(key) in message
    assert "transfer error" in message
    assert "after 3 attempts" in message
    assert "dataset changed" not in message
    assert faulty.proxy.count("GET", key) == 3
    assert not other.exists()
    assert sorted(os.listdir(out)) == [key]


def test_a_body_trickled_byte_by_byte_is_late_not_slow(faulty: Faulty, out: Path):
    key = unique_key()
    faulty.put(key, os.urandom(2000))
    faulty.proxy.inject("trickle", count=2, method="GET", path_contains=key, trickle_seconds=0.1)
    options = DownloadOptions(retry=1, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(DownloadTimeoutError) as info:
        download_file(faulty.store, key, str(out / key), options, expected_size=2000)
    # Each attempt's bytes keep coming (far within any socket timeout) but the whole body
    # would take 200 s: two attempts of 1 s and the backoff; the bound is loose on purpose.
    assert time.monotonic() - started < 30.0
    assert faulty.proxy.count("GET", key) == 2
    assert faulty.store.url(key) in str(info.value)
    assert os.listdir(out) == []


@pytest.mark.usefixtures("no_backoff")
def test_a_wrong_200_for_the_index_is_a_transfer_error_not_a_malformed_index(
    faulty: Faulty, tmp_path: Path
):
    written = tmp_path / "written"
    with MDSWriter(out=str(written), columns={"x": "int"}) as writer:
        for x in range(5):
            writer.write({"x": x})
    for name in os.listdir(written):
        faulty.put(name, (written / name).read_bytes())
    options = DownloadOptions(retry=1)
    # A gateway's page once: the index is fetched again and read.
    faulty.proxy.inject("html200", count=1, method="GET", path_contains="index.json")
    entries = sync_index(faulty.store, str(tmp_path / "a"), options)
    assert entries is not None
    assert sum(entry.samples for entry in entries) == 5
    # Every answer a gateway's page: a transfer error naming the URL, not a malformed index.
    faulty.proxy.inject("html200", count=10, method="GET", path_contains="index.json")
    with pytest.raises(StorageError) as info:
        sync_index(faulty.store, str(tmp_path / "b"), options)
    message = str(info.value)
    assert faulty.store.url("index.json") in message
    assert "transfer error" in message
    assert not (tmp_path / "b" / "index.json").exists()
