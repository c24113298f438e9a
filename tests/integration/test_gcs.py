"""GCSStore and MDSWriter against a real GCS emulator (fake-gcs-server on 127.0.0.1).

fake-gcs-server does not check credentials, so refused credentials are exercised where Google
refuses them: at the token endpoint. A service-account key file names its token endpoint; the
tests point it at a loopback server that answers as Google does for a revoked or wrong key.
"""

from __future__ import annotations

import http.server
import json
import logging
import multiprocessing
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
    UploadError,
)
from shardstream.storage import (
    DownloadOptions,
    GCSStore,
    download_file,
    fetch_listing,
    open_store,
    store_base,
)
from shardstream.storage import gcs as gcs_module

from . import servers_gcs_azure
from .faults import FaultProxy
from .servers_gcs_azure import HOST, GCSServer

pytestmark = pytest.mark.gcs


def write(out: Any, n: int, **kwargs: Any) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))


def download(store: GCSStore, folder: Path) -> list[str]:
    keys = store.list()
    for key in keys:
        target = folder / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.get_bytes(key))
    return keys


def test_round_trip_ranges_info_and_list(gcs_env: GCSServer, tmp_path: Path):
    store = open_store(gcs_env.url("roundtrip"))  # endpoint from STORAGE_EMULATOR_HOST
    assert isinstance(store, GCSStore)
    assert store.endpoint_url == gcs_env.endpoint
    assert store.credential_method == "anon"
    data = os.urandom(6 * 2**20 + 3)  # over gcsfs's 5 MiB: a resumable upload
    source = tmp_path / "f.bin"
    source.write_bytes(data)
    store.put_file(str(source), "big.bin")
    store.put_file(str(source), "sub/dir/b.bin")
    assert store.get_bytes("big.bin") == data
    assert store.get_range("big.bin", 5 * 2**20, 5 * 2**20 + 17) == data[5 * 2**20 :][:17]
    assert store.get_range("sub/dir/b.bin", len(data) - 3, len(data)) == data[-3:]
    info = store.info("big.bin")
    assert info.size == len(data)
    assert info.etag is not None
    assert info.etag.isdigit()  # the object's generation
    assert store.list() == ["big.bin", "sub/dir/b.bin"]
    assert store.list("sub/d") == ["sub/dir/b.bin"]
    assert store.exists("sub/dir/b.bin")
    assert not store.exists("sub/dir")  # a prefix, not an object
    source.write_bytes(b"replaced")
    store.put_file(str(source), "big.bin")
    assert store.get_bytes("big.bin") == b"replaced"
    assert store.info("big.bin").etag not in (None, info.etag)


def test_missing_objects_and_buckets(gcs_env: GCSServer, tmp_path: Path):
    store = gcs_env.store("missing")
    with pytest.raises(ObjectNotFoundError, match=r"gs://.*/missing-.*/nope\.bin") as info:
        store.get_bytes("nope.bin")
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ObjectNotFoundError):
        store.info("nope.bin")
    with pytest.raises(ObjectNotFoundError):
        store.get_range("nope.bin", 0, 1)
    assert not store.exists("nope.bin")
    assert store.list() == []
    elsewhere = GCSStore("gs://no-such-bucket/x", endpoint_url=gcs_env.endpoint, token="anon")  # noqa: S106
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(StorageError, match=r"gs://no-such-bucket/x/f"):
        elsewhere.put_file(str(source), "f")
    with pytest.raises(ObjectNotFoundError, match="gs://no-such-bucket/x/f"):
        elsewhere.get_bytes("f")


def test_a_range_past_the_end_names_the_url(gcs_env: GCSServer, tmp_path: Path):
    store = gcs_env.store("range")
    source = tmp_path / "f"
    source.write_bytes(b"0123456789")
    store.put_file(str(source), "f")
    with pytest.raises(StorageError, match=r"runs past the end") as info:
        store.get_range("f", 5, 11)
    assert store.url("f") in str(info.value)
    with pytest.raises(StorageError, match=store.url("f")):
        store.get_range("f", 10, 11)
    with pytest.raises(ConfigurationError, match="byte range"):
        store.get_range("f", 3, 2)


def test_writer_publishes_to_gcs(gcs_env: GCSServer, tmp_path: Path):
    url = gcs_env.url("writer")
    write(url, 20)
    store = open_store(url)
    assert isinstance(store, GCSStore)
    keys = download(store, tmp_path / "copy")
    assert "index.json" in keys
    index = json.loads(store.get_bytes("index.json"))
    assert {shard["raw_data"]["basename"] for shard in index["shards"]} == set(keys) - {
        "index.json"
    }
    assert len(keys) > 3  # several shards
    check_dataset(tmp_path / "copy", 20)


def read_in_child(store: Any, key: str, queue: Any) -> None:
    queue.put(store.get_bytes(key))


# A fork while pytest's or the SDK's threads run is what DataLoader workers do too.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_worker_reads_through_a_store_its_parent_used(gcs_env: GCSServer, tmp_path: Path):
    store = gcs_env.store("fork")
    source = tmp_path / "f"
    source.write_bytes(b"from the parent")
    store.put_file(str(source), "f")  # the parent's client and event loop now exist
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=read_in_child, args=(store, "f", queue))
    child.start()
    try:
        assert queue.get(timeout=60) == b"from the parent"
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert store.get_bytes("f") == b"from the parent"  # the parent's client still works


def test_one_attempt_per_request_shardstream_retries(gcs_env: GCSServer, tmp_path: Path):
    # gcsfs's own retries are off: a 503 reaches the caller after one request, and
    # download_file's retry=2 means at most three requests.
    upstream = int(gcs_env.endpoint.rsplit(":", 1)[1])
    source = tmp_path / "f"
    source.write_bytes(b"through the proxy")
    with FaultProxy(upstream) as proxy:
        store = GCSStore(gcs_env.url("faults"), endpoint_url=proxy.endpoint, token="anon")  # noqa: S106
        store.put_file(str(source), "f")
        proxy.inject("status503", count=1, method="GET", path_contains="alt=media")
        with pytest.raises(StorageError, match="503") as info:
            store.get_bytes("f")
        assert not isinstance(info.value, (ObjectNotFoundError, CredentialsError))
        assert store.url("f") in str(info.value)
        assert proxy.count("GET", "alt=media") == 1
        proxy.reset_counts()
        proxy.inject("status503", count=2, method="GET", path_contains="alt=media")
        dest = tmp_path / "copy"
        assert download_file(store, "f", str(dest), DownloadOptions(retry=2)) == 17
        assert dest.read_bytes() == b"through the proxy"
        assert proxy.count("GET", "alt=media") == 3


def test_streaming_dataset_reads_what_the_writer_published(gcs_env: GCSServer, tmp_path: Path):
    url = gcs_env.url("stream")
    write(url, 30, compression="zstd")
    dataset = StreamingDataset(remote=url, local=str(tmp_path / "cache"), batch_size=5)
    assert sorted(int(item["id"]) for item in dataset) == list(range(30))
    assert {path.name for path in (tmp_path / "cache").glob("*.mds*")}  # shards came down


def test_a_store_lists_only_its_own_prefix_not_a_longer_sibling(gcs_env: GCSServer, tmp_path: Path):
    source = tmp_path / "f"
    source.write_bytes(b"x")
    store = gcs_env.store("sibling")
    longer = GCSStore(store.url("") + "2", endpoint_url=gcs_env.endpoint, token="anon")  # noqa: S106
    longer.put_file(str(source), "theirs.bin")
    longer.put_file(str(source), "deep/theirs.bin")
    store.put_file(str(source), "mine.bin")
    assert store.list() == ["mine.bin"]
    assert store.list("d") == []
    assert not store.exists("2/theirs.bin")
    assert longer.list() == ["deep/theirs.bin", "theirs.bin"]


# --- credentials ------------------------------------------------------------------------------


class RefusingTokenEndpoint(http.server.BaseHTTPRequestHandler):
    """Answers every token request as Google does for a key it does not accept."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def token_endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer((HOST, 0), RefusingTokenEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def service_account_key(tmp_path: Path, token_uri: str) -> tuple[Path, str]:
    """A service-account key file with a fresh RSA key; returns the file and the private key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "shardstream-test",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": "writer@shardstream-test.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }
    path = tmp_path / "key.json"
    path.write_text(json.dumps(info))
    return path, pem


def secret_part(pem: str) -> str:
    """A stretch of the key's base64 body: what a leak of the key would show."""
    return pem.splitlines()[5]


def test_a_refused_service_account_key_is_a_credentials_error(
    gcs_env: GCSServer, token_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path, pem = service_account_key(tmp_path, token_endpoint)
    url = gcs_env.url("refused")
    store = GCSStore(url, token=str(path), endpoint_url=gcs_env.endpoint)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(CredentialsError) as info:
        store.get_bytes("index.json")
    message = str(info.value)
    assert url + "/index.json" in message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message
    assert "gcloud auth application-default login" in message
    assert "invalid_grant" in message  # what the token endpoint said
    for text in (message, caplog.text, repr(store)):
        assert secret_part(pem) not in text
    assert isinstance(info.value, OSError)


def test_a_refused_key_from_the_environment_fails_the_writer(
    gcs_env: GCSServer,
    token_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    loopback_only: None,
):
    # Application Default Credentials, as on a user's machine: no emulator, a key file in
    # GOOGLE_APPLICATION_CREDENTIALS. The token endpoint (on loopback) refuses the key before any
    # request could leave for Google, and loopback_only fails the test if one tried.
    path, pem = service_account_key(tmp_path, token_endpoint)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    url = gcs_env.url("refused-env")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UploadError, match="GOOGLE_APPLICATION_CREDENTIALS") as info:
        write(url, 3, retry=1)
    assert isinstance(info.value.__cause__, CredentialsError)
    assert url in str(info.value)
    for text in (str(info.value), caplog.text):
        assert secret_part(pem) not in text


def test_missing_application_default_credentials_say_where_they_come_from(
    gcs_env: GCSServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, loopback_only: None
):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    store = GCSStore(gcs_env.url("adc"), token="google_default")  # noqa: S106
    with pytest.raises(CredentialsError, match="GOOGLE_APPLICATION_CREDENTIALS") as info:
        store.exists("index.json")
    assert store.url("index.json") in str(info.value)
    assert "no-such-key.json" in str(info.value)


def test_a_server_that_cannot_start_fails_loudly_with_its_log(tmp_path: Path):
    command = ["sh", "-c", "echo 'listen tcp 127.0.0.1: address already in use'; exit 3"]

    def never_ready() -> None:
        raise ConnectionRefusedError("nothing listens")

    with pytest.raises(pytest.fail.Exception, match="address already in use") as info:
        servers_gcs_azure._start("a server", command, tmp_path / "server.log", never_ready)
    assert "a server did not start (exit 3" in str(info.value)


@pytest.mark.parametrize("fault", ["html200", "short200"])
def test_a_wrong_200_listing_or_body_is_a_transfer_error(
    gcs_env: GCSServer, tmp_path: Path, fault: Any
):
    """A gateway's page or a short body: retried and reported as a transfer error."""
    upstream = int(gcs_env.endpoint.rsplit(":", 1)[1])
    source = tmp_path / "f"
    source.write_bytes(b"through the proxy")
    with FaultProxy(upstream) as proxy:
        store = GCSStore(gcs_env.url("wrong"), endpoint_url=proxy.endpoint, token="anon")  # noqa: S106
        store.put_file(str(source), "f")
        proxy.inject(fault, count=2, method="GET")
        with pytest.raises(StorageError) as info:
            fetch_listing(store, "", DownloadOptions(retry=1))
        assert not isinstance(info.value, ObjectNotFoundError)
        assert "transfer error" in str(info.value)
        assert store.url("") in str(info.value)
        proxy.inject(fault, count=2, method="GET", path_contains="alt=media")
        dest = tmp_path / "copy"
        assert download_file(store, "f", str(dest), DownloadOptions(retry=2), expected_size=17)
        assert dest.read_bytes() == b"through the proxy"


def test_a_split_listing_is_exactly_the_serial_one(
    gcs_env: GCSServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = gcs_env.store("split")
    keys = [f"shard.{k:03}.mds" for k in range(40)] + ["index.json", "n/deep/x.bin", "z/ü.bin"]
    source = tmp_path / "f"
    for number, key in enumerate(keys):
        source.write_bytes(b"x" * number)
        store.put_file(str(source), key)
    monkeypatch.setattr(gcs_module, "_PAGE_KEYS", 4)  # ranges of several pages
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 5)
    serial = store.list_info()
    assert list(serial) == sorted(keys)
    assert serial["shard.007.mds"].size == 7
    for splits in (keys[::7], [*keys[3::5], "a", "shard.0", "zz"], keys):
        split = store.list_info(split_at=splits)
        assert split == serial
        assert list(split) == list(serial)
    assert store.list_info("shard.01", split_at=keys) == {
        key: info for key, info in serial.items() if key.startswith("shard.01")
    }
