"""AzureStore and MDSWriter against a real Azure Blob emulator (Azurite on 127.0.0.1).

Azurite emulates the Blob service only: ADLS Gen2's hierarchical namespace (the ``dfs``
endpoint) has no emulator. AzureStore reaches Gen2 accounts through the same Blob API, so these
tests cover the requests it sends to both; the ``abfss://container@account.dfs...`` URL form is
checked here (it must name the same blobs as ``azure://``) and in the unit tests.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import (
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
    UploadError,
)
from shardstream.storage import (
    AzureStore,
    DownloadOptions,
    download_file,
    fetch_listing,
    open_store,
)
from shardstream.storage.obstore_client import ObstoreClient

from .faults import FaultProxy
from .servers_gcs_azure import AzureServer

pytestmark = pytest.mark.azure

WRONG_KEY = "d3Jvbmcta2V5LWZvci10ZXN0cy0wMTIzNDU2Nzg5YWJjZGVmMDEyMzQ1Njc4OWFiY2RlZg=="


def write(out: Any, n: int, **kwargs: Any) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))


def download(store: AzureStore, folder: Path) -> list[str]:
    keys = store.list()
    for key in keys:
        target = folder / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.get_bytes(key))
    return keys


def test_round_trip_ranges_info_and_list(azure_env: AzureServer, tmp_path: Path):
    store = open_store(azure_env.url("roundtrip"))  # credentials from the connection string
    assert isinstance(store, AzureStore)
    assert store.credential_source == "AZURE_STORAGE_CONNECTION_STRING"
    data = os.urandom(300_001)
    source = tmp_path / "f.bin"
    source.write_bytes(data)
    store.put_file(str(source), "a.bin")
    store.put_file(str(source), "sub/dir/b.bin")
    assert store.get_bytes("a.bin") == data
    assert store.get_range("a.bin", 1000, 1017) == data[1000:1017]
    assert store.get_range("sub/dir/b.bin", len(data) - 3, len(data)) == data[-3:]
    info = store.info("a.bin")
    assert info.size == len(data)
    assert info.etag
    assert store.list() == ["a.bin", "sub/dir/b.bin"]
    assert store.list("sub/d") == ["sub/dir/b.bin"]
    assert store.exists("sub/dir/b.bin")
    assert not store.exists("sub/dir")  # a prefix, not an object
    source.write_bytes(b"replaced")
    store.put_file(str(source), "a.bin")
    assert store.get_bytes("a.bin") == b"replaced"
    assert store.info("a.bin").etag not in (None, info.etag)


def test_a_large_file_is_committed_as_one_block_list(azure_env: AzureServer, tmp_path: Path):
    data = os.urandom(5 * 2**20 + 11)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    store = AzureStore(
        azure_env.url("blocks"),
        connection_string=azure_env.connection_string,
        # Small blocks: the SDK stages several and commits them with one Put Block List.
        client_options={"max_single_put_size": 2**20, "max_block_size": 2**20},
    )
    store.put_file(str(source), "big.bin")
    assert store.info("big.bin").size == len(data)
    assert store.get_bytes("big.bin") == data
    from azure.storage.blob import BlobClient

    blob = BlobClient.from_connection_string(
        azure_env.connection_string, azure_env.container, store._path("big.bin").split("/", 1)[1]
    )
    with blob:
        committed = blob.get_block_list("committed")[0]
    assert len(committed) == 6  # five blocks of 1 MiB and the rest


def test_one_attempt_per_request_shardstream_retries(azure_env: AzureServer, tmp_path: Path):
    # The SDK's own retries are off: a 503 reaches the caller after one request, and
    # download_file's retry=2 means at most three requests.
    upstream = int(azure_env.endpoint.split(":")[2].split("/")[0])
    source = tmp_path / "f"
    source.write_bytes(b"through the proxy")
    with FaultProxy(upstream) as proxy:
        endpoint = f"{proxy.endpoint}/{azure_env.account}"
        store = AzureStore(
            azure_env.url("faults"),
            account_name=azure_env.account,
            account_key=azure_env.key,
            endpoint_url=endpoint,
        )
        store.put_file(str(source), "f")
        proxy.inject("status503", count=1, method="GET", path_contains="/f")
        with pytest.raises(StorageError, match=r"503|Service Unavailable|SlowDown") as info:
            store.get_bytes("f")
        assert not isinstance(info.value, (ObjectNotFoundError, CredentialsError))
        assert store.url("f") in str(info.value)
        assert proxy.count("GET", "/f") == 1
        proxy.reset_counts()
        proxy.inject("status503", count=2, method="GET", path_contains="/f")
        dest = tmp_path / "copy"
        assert download_file(store, "f", str(dest), DownloadOptions(retry=2)) == 17
        assert dest.read_bytes() == b"through the proxy"
        assert proxy.count("GET", "/f") == 3


def test_every_url_form_names_the_same_blobs(azure_env: AzureServer, tmp_path: Path):
    prefix = azure_env.url("forms").split("/", 3)[3]
    container = azure_env.container
    source = tmp_path / "f"
    source.write_bytes(b"one dataset")
    account = azure_env.account
    forms = [
        f"azure://{container}/{prefix}",
        f"az://{container}/{prefix}/",
        f"abfs://{container}/{prefix}",
        f"abfss://{container}@{account}.dfs.core.windows.net/{prefix}",
        f"abfs://{container}@{account}.blob.core.windows.net/{prefix}",
    ]
    stores = [
        AzureStore(
            url,
            account_name=account,
            account_key=azure_env.key,
            endpoint_url=azure_env.endpoint,  # Azurite instead of the URL's host
        )
        for url in forms
    ]
    stores[0].put_file(str(source), "index.json")
    for store in stores:
        assert store.get_bytes("index.json") == b"one dataset"
        assert store.list() == ["index.json"]
    stores[-1].put_file(str(source), "shard.00000.mds")
    assert stores[0].list() == ["index.json", "shard.00000.mds"]


def test_missing_blobs_and_containers(azure_env: AzureServer, tmp_path: Path):
    store = azure_env.store("missing")
    with pytest.raises(ObjectNotFoundError, match=r"azure://.*/missing-.*/nope\.bin") as info:
        store.get_bytes("nope.bin")
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ObjectNotFoundError):
        store.info("nope.bin")
    with pytest.raises(ObjectNotFoundError):
        store.get_range("nope.bin", 0, 1)
    assert not store.exists("nope.bin")
    assert store.list() == []
    elsewhere = AzureStore(
        "az://no-such-container/x", connection_string=azure_env.connection_string
    )
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(ObjectNotFoundError, match=r"az://no-such-container/x/f"):
        elsewhere.put_file(str(source), "f")
    with pytest.raises(ObjectNotFoundError, match=r"az://no-such-container/x/f"):
        elsewhere.get_bytes("f")


def test_a_range_past_the_end_names_the_url(azure_env: AzureServer, tmp_path: Path):
    store = azure_env.store("range")
    source = tmp_path / "f"
    source.write_bytes(b"0123456789")
    store.put_file(str(source), "f")
    with pytest.raises(StorageError, match="runs past the end") as info:
        store.get_range("f", 5, 11)
    assert store.url("f") in str(info.value)
    with pytest.raises(StorageError, match=store.url("f")) as info:
        store.get_range("f", 10, 11)
    assert not isinstance(info.value, ObjectNotFoundError)


def test_writer_publishes_to_azure(azure_env: AzureServer, tmp_path: Path):
    url = azure_env.url("writer")
    write(url, 20)
    store = open_store(url)
    assert isinstance(store, AzureStore)
    keys = download(store, tmp_path / "copy")
    index = json.loads(store.get_bytes("index.json"))
    shards = {shard["raw_data"]["basename"] for shard in index["shards"]}
    assert len(shards) > 2
    assert set(keys) == {*shards, "index.json"}
    check_dataset(tmp_path / "copy", 20)


def read_in_child(store: Any, key: str, queue: Any) -> None:
    queue.put(store.get_bytes(key))


# A fork while pytest's or the SDK's threads run is what DataLoader workers do too.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_worker_reads_through_a_store_its_parent_used(
    azure_env: AzureServer, tmp_path: Path
):
    store = azure_env.store("fork")
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


def test_streaming_dataset_reads_what_the_writer_published(azure_env: AzureServer, tmp_path: Path):
    url = azure_env.url("stream")
    write(url, 30, compression="zstd")
    dataset = StreamingDataset(remote=url, local=str(tmp_path / "cache"), batch_size=5)
    assert sorted(int(item["id"]) for item in dataset) == list(range(30))
    assert {path.name for path in (tmp_path / "cache").glob("*.mds*")}  # shards came down


def test_a_store_lists_only_its_own_prefix_not_a_longer_sibling(
    azure_env: AzureServer, tmp_path: Path
):
    source = tmp_path / "f"
    source.write_bytes(b"x")
    store = azure_env.store("sibling")
    longer = AzureStore(store.url("") + "2", connection_string=azure_env.connection_string)
    longer.put_file(str(source), "theirs.bin")
    longer.put_file(str(source), "deep/theirs.bin")
    store.put_file(str(source), "mine.bin")
    assert store.list() == ["mine.bin"]
    assert store.list("d") == []
    assert not store.exists("2/theirs.bin")
    assert longer.list() == ["deep/theirs.bin", "theirs.bin"]


# --- credentials ------------------------------------------------------------------------------


def test_a_wrong_key_is_a_credentials_error_without_the_key(
    azure_env: AzureServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    url = azure_env.url("denied")
    store = AzureStore(
        url, account_name=azure_env.account, account_key=WRONG_KEY, endpoint_url=azure_env.endpoint
    )
    source = tmp_path / "f"
    source.write_bytes(b"x")
    caplog.set_level(logging.DEBUG)
    calls: list[Callable[[], object]] = [
        lambda: store.put_file(str(source), "f"),
        lambda: store.get_bytes("f"),
        lambda: store.info("f"),
        lambda: store.list(),
    ]
    for call in calls:
        with pytest.raises(CredentialsError) as info:
            call()
        message = str(info.value)
        assert url in message
        assert "AZURE_STORAGE_ACCOUNT_KEY" in message
        assert "DefaultAzureCredential" in message
        assert "connection_string" in message
        for text in (message, caplog.text, repr(store)):
            assert WRONG_KEY not in text
            assert azure_env.key not in text
        assert isinstance(info.value, StorageError)


def test_a_wrong_connection_string_from_the_environment_fails_the_writer(
    azure_env: AzureServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    wrong = azure_env.connection_string.replace(azure_env.key, WRONG_KEY)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
    url = azure_env.url("denied-env")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UploadError, match="AZURE_STORAGE_CONNECTION_STRING") as info:
        write(url, 3, retry=1)
    assert isinstance(info.value.__cause__, CredentialsError)
    assert url in str(info.value)
    for text in (str(info.value), caplog.text):
        assert WRONG_KEY not in text
        assert wrong not in text


def test_a_key_from_the_environment_signs_the_requests(
    azure_env: AzureServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", azure_env.account)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", azure_env.key)
    store = AzureStore(azure_env.url("env-key"), endpoint_url=azure_env.endpoint)
    assert store.credential_source == "AZURE_STORAGE_ACCOUNT_KEY"
    source = tmp_path / "f"
    source.write_bytes(b"signed")
    store.put_file(str(source), "f")
    assert store.get_bytes("f") == b"signed"
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", WRONG_KEY)
    refused = AzureStore(store.url(""), endpoint_url=azure_env.endpoint)
    with pytest.raises(CredentialsError, match="from AZURE_STORAGE_ACCOUNT_KEY") as info:
        refused.get_bytes("f")
    assert WRONG_KEY not in str(info.value)


@pytest.mark.parametrize("fault", ["html200", "short200"])
def test_a_wrong_200_listing_or_body_is_a_transfer_error(
    azure_env: AzureServer, tmp_path: Path, fault: Any
):
    """A gateway's page or a short body: retried and reported as a transfer error."""
    upstream = urlsplit(azure_env.endpoint)
    source = tmp_path / "f"
    source.write_bytes(b"through the proxy")
    with FaultProxy(int(upstream.port or 80)) as proxy:
        endpoint = f"{proxy.endpoint}{upstream.path}"
        connection = azure_env.connection_string.replace(azure_env.endpoint, endpoint)
        store = AzureStore(azure_env.url("wrong"), connection_string=connection)
        store.put_file(str(source), "f")
        proxy.inject(fault, count=2, method="GET", path_contains="comp=list")
        with pytest.raises(StorageError) as info:
            fetch_listing(store, "", DownloadOptions(retry=1))
        assert not isinstance(info.value, ObjectNotFoundError)
        assert "transfer error" in str(info.value)
        assert store.url("") in str(info.value)
        proxy.inject(fault, count=2, method="GET", path_contains="/f")
        dest = tmp_path / "copy"
        assert download_file(store, "f", str(dest), DownloadOptions(retry=2), expected_size=17)
        assert dest.read_bytes() == b"through the proxy"


def test_reads_go_through_obstore_unless_its_credentials_or_the_switch_say_otherwise(
    azure_env: AzureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Reads go through obstore for the credentials it takes; adlfs for the rest, or if asked."""
    monkeypatch.delenv("SHARDSTREAM_AZURE_CLIENT", raising=False)
    url = azure_env.url("client")
    writer = AzureStore(url, connection_string=azure_env.connection_string)
    source = tmp_path / "f"
    source.write_bytes(b"0123456789")
    writer.put_file(str(source), "k.bin")
    fast = AzureStore(url)  # the connection string from the environment
    assert fast.get_range("k.bin", 2, 5) == b"234"
    assert fast.info("k.bin") == writer.info("k.bin")  # the same tag under both clients
    assert isinstance(fast._obstore, ObstoreClient)
    assert fast._fs is None  # adlfs never made for reading
    keyed = AzureStore(url, account_name=azure_env.account, account_key=azure_env.key,
                       endpoint_url=azure_env.endpoint)  # fmt: skip
    assert keyed.get_bytes("k.bin") == b"0123456789"
    assert isinstance(keyed._obstore, ObstoreClient)
    options = AzureStore(url, client_options={"retry_total": 0})  # the SDK's own settings
    assert options.get_range("k.bin", 0, 1) == b"0"
    assert options._obstore is False
    monkeypatch.setenv("SHARDSTREAM_AZURE_CLIENT", "adlfs")
    asked = AzureStore(url)
    assert asked.get_range("k.bin", 0, 2) == b"01"
    assert asked._obstore is False
    assert asked._fs is not None
