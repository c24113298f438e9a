"""The obstore transport against real servers: SeaweedFS (S3), fake-gcs-server and Azurite."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage import AzureStore, GCSStore, S3Store, obstore_client
from shardstream.storage.base import ObjectInfo
from shardstream.storage.obstore_client import ObstoreClient

from .conftest import S3Server
from .faults import FaultProxy
from .http_server import StaticServer
from .servers_gcs_azure import AzureServer, GCSServer

Factory = Callable[[], ObstoreClient]


def _s3(server: S3Server, endpoint: str | None = None) -> ObstoreClient:
    return s3_client(server.url("obstore"), endpoint_url=endpoint or server.endpoint,
                     key=server.key, secret=server.secret)  # fmt: skip


def s3_client(url: str, **options: Any) -> ObstoreClient:
    """The obstore store of an ``S3Store`` made with ``options`` (its checks and defaults)."""
    return ObstoreClient.of_s3_store(S3Store(url, **options))


def azure_client(url: str, **options: Any) -> ObstoreClient:
    """The obstore store of an ``AzureStore`` made with ``options``."""
    return ObstoreClient.of_azure_store(AzureStore(url, **options))


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def make_client(request: pytest.FixtureRequest) -> Factory:
    """A fresh, empty root on each kind of server."""
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_env")
        return lambda: _s3(server)
    if request.param == "gcs":
        gcs: GCSServer = request.getfixturevalue("gcs_server")
        return lambda: ObstoreClient.gcs(gcs.url("obstore"), endpoint_url=gcs.endpoint)
    azure: AzureServer = request.getfixturevalue("azure_server")
    return lambda: azure_client(azure.url("obstore"),
                                       connection_string=azure.connection_string)  # fmt: skip


def _put(client: ObstoreClient, tmp_path: Path, key: str, data: bytes) -> None:
    """Write through the client; on fake-gcs-server, through gcsfs instead.

    object_store uploads by GCS's XML API (``PUT /bucket/object``), which fake-gcs-server does
    not serve (it answers "invalid uploadType"): the GCS rows test reads, listings and deletes
    of objects written by the GCS backend, and ``test_gcs_emulator_refuses_xml_uploads`` pins
    the gap.
    """
    source = tmp_path / f"src-{uuid.uuid4().hex[:8]}"
    source.write_bytes(data)
    if client.root.startswith("gs://"):
        GCSStore(client.root, endpoint_url=client.endpoint, token="anon").put_file(  # noqa: S106
            str(source), key
        )
        return
    client.put_file(str(source), key)


def test_write_read_head_remove_round_trip(make_client: Factory, tmp_path: Path) -> None:
    client = make_client()
    data = os.urandom(10_000)
    _put(client, tmp_path, "d/x.bin", data)
    assert client.get_bytes("d/x.bin") == data
    assert client.get_range("d/x.bin", 100, 1100) == data[100:1100]
    assert client.get_range("d/x.bin", 9_000, 10_000) == data[9_000:]
    assert client.get_range("d/x.bin", 9_999, 10_000) == data[-1:]
    info = client.info("d/x.bin")
    assert info.size == len(data)
    assert info.etag
    assert '"' not in info.etag
    _put(client, tmp_path, "d/x.bin", b"new")  # a new version: a new tag
    assert client.info("d/x.bin").etag != info.etag
    client.delete("d/x.bin")
    with pytest.raises(ObjectNotFoundError, match=r"d/x\.bin"):
        client.info("d/x.bin")
    client.delete("d/x.bin")  # already gone: no error


def test_range_edges(make_client: Factory, tmp_path: Path) -> None:
    client = make_client()
    _put(client, tmp_path, "r.bin", b"0123456789")
    assert client.get_range("r.bin", 10, 10) == b""
    assert client.get_range("r.bin", 3, 3) == b""
    # Before the refused ranges: fake-gcs-server drops the connection after its 416 answers,
    # and the client (its retries off, as callers retry) would send on the dropped one.
    assert client.get_range("r.bin", 9, 10) == b"9"
    with pytest.raises(StorageError, match=r"r\.bin") as past:
        client.get_range("r.bin", 5, 11)
    assert not isinstance(past.value, ObjectNotFoundError)
    with pytest.raises(StorageError, match=r"r\.bin"):
        client.get_range("r.bin", 20, 30)
    with pytest.raises(ConfigurationError):
        client.get_range("r.bin", 5, 4)
    with pytest.raises(ConfigurationError):
        client.get_range("r.bin", -1, 4)
    with pytest.raises(ConfigurationError):
        client.get_range("../r.bin", 0, 1)


def test_missing_object_names_the_full_url(make_client: Factory) -> None:
    client = make_client()
    for call in (lambda: client.get_range("none.bin", 0, 4), lambda: client.info("none.bin"),
                 lambda: client.get_bytes("none.bin")):  # fmt: skip
        with pytest.raises(ObjectNotFoundError) as caught:
            call()
        assert client.url("none.bin") in str(caught.value)


def test_listing_pages_with_prefix_and_start_after(
    make_client: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client()
    keys = [f"p/{n:02d}.bin" for n in range(7)] + ["p/sub/x.bin", "pq.bin", "a.bin", "q/z.bin"]
    for number, key in enumerate(keys):
        _put(client, tmp_path, key, bytes(number + 1))
    monkeypatch.setattr(obstore_client, "PAGE_KEYS", 3)
    pages, token = 0, None
    listed: dict[str, ObjectInfo] = {}
    while True:
        page, token = client.list_page("p", None, token)
        assert len(page) <= 3
        assert not set(page) & set(listed)
        listed.update(page)
        pages += 1
        if token is None:
            break
    assert sorted(listed) == sorted(k for k in keys if k.startswith("p"))
    assert pages >= 3
    for number, key in enumerate(keys):
        if key in listed:
            assert listed[key].size == number + 1
            assert listed[key].etag == client.info(key).etag
    after, token = {}, None
    while True:
        page, token = client.list_page("p/", "p/04.bin", token)
        after.update(page)
        if token is None:
            break
    assert sorted(after) == ["p/05.bin", "p/06.bin", "p/sub/x.bin"]
    assert client.list_page("nothing/", None, None) == ({}, None)
    whole, token = {}, None
    while True:
        page, token = client.list_page("", None, token)
        whole.update(page)
        if token is None:
            break
    assert sorted(whole) == sorted(keys)


def test_large_file_goes_up_whole(make_client: Factory, tmp_path: Path) -> None:
    """Over obstore's multipart threshold: one object, every byte in place."""
    client = make_client()
    data = os.urandom(6 * 1024 * 1024 + 123)
    _put(client, tmp_path, "big.bin", data)
    assert client.info("big.bin").size == len(data)
    assert client.get_bytes("big.bin") == data


def test_writing_a_missing_local_file_is_the_callers_error(
    make_client: Factory, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        make_client().put_file(str(tmp_path / "absent"), "k.bin")


@pytest.mark.s3
def test_s3_refused_credentials_say_what_to_set(s3_env: S3Server) -> None:
    client = s3_client(s3_env.url("refused"), endpoint_url=s3_env.endpoint,
                              key=s3_env.key, secret="not-the-secret-0123")  # noqa: S106  # fmt: skip
    for call in (lambda: client.get_range("k.bin", 0, 1), lambda: client.info("k.bin"),
                 lambda: client.list_page("", None, None)):  # fmt: skip
        with pytest.raises(CredentialsError) as caught:
            call()
        text = str(caught.value)
        assert "AWS_ACCESS_KEY_ID" in text
        assert "S3_ENDPOINT_URL" in text
        assert "not-the-secret-0123" not in text
        assert s3_env.endpoint in text


@pytest.mark.s3
def test_s3_credentials_from_the_environment(s3_env: S3Server, tmp_path: Path) -> None:
    client = s3_client(s3_env.url("env"))  # endpoint and keys from s3_env's variables
    _put(client, tmp_path, "k.bin", b"abc")
    assert client.get_range("k.bin", 1, 3) == b"bc"


@pytest.mark.s3
def test_s3_requests_are_counted_and_not_retried(s3_env: S3Server, tmp_path: Path) -> None:
    """One GET a read, none for an empty range, one page a listing page, no hidden retries."""
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        client = _s3(s3_env, proxy.endpoint)
        _put(client, tmp_path, "k.bin", b"0123456789")
        proxy.reset_counts()
        client.get_range("k.bin", 2, 5)
        client.get_range("k.bin", 4, 4)
        assert proxy.count("GET", "k.bin") == 1
        client.list_page("", None, None)
        assert proxy.count("GET", "list-type=2") == 1
        proxy.inject("status503", count=1, method="GET", path_contains="k.bin")
        with pytest.raises(StorageError, match=r"k\.bin") as caught:
            client.get_range("k.bin", 0, 3)
        assert not isinstance(caught.value, (ObjectNotFoundError, CredentialsError))
        assert proxy.count("GET", "k.bin") == 2  # the failed GET, once
        assert client.get_range("k.bin", 0, 3) == b"012"


@pytest.mark.azure
def test_azure_refused_key_says_what_to_set(azure_server: AzureServer) -> None:
    wrong = "d3Jvbmcta2V5LW5vdC1hLXNlY3JldA=="
    client = azure_client(azure_server.url("refused"), account_name=azure_server.account,
                                 account_key=wrong, endpoint_url=azure_server.endpoint)  # fmt: skip
    with pytest.raises(CredentialsError) as caught:
        client.info("k.bin")
    assert "AZURE_STORAGE_CONNECTION_STRING" in str(caught.value)
    assert wrong not in str(caught.value)


def test_http_reads_and_refuses_writes(http_server: StaticServer, tmp_path: Path) -> None:
    folder = f"root-{uuid.uuid4().hex[:8]}"
    os.makedirs(os.path.join(http_server.root, folder))
    Path(http_server.root, folder, "k.bin").write_bytes(b"0123456789")
    client = ObstoreClient.http(f"{http_server.url}/{folder}")
    assert client.get_range("k.bin", 2, 6) == b"2345"
    assert client.info("k.bin").size == 10
    with pytest.raises(ObjectNotFoundError, match=folder):
        client.get_range("none.bin", 0, 1)
    with pytest.raises(UnsupportedURLError):
        client.list_page("", None, None)
    with pytest.raises(UnsupportedURLError):
        client.put_file(str(tmp_path), "k.bin")


def test_constructors_do_no_io_and_check_arguments() -> None:
    # Nothing listens on port 9: a constructor that connected would fail here.
    s3_client("s3://b/p", endpoint_url="http://127.0.0.1:9", key="k", secret="s")  # noqa: S106
    ObstoreClient.gcs("gs://bucket/p", endpoint_url="http://127.0.0.1:9")
    ObstoreClient.http("http://127.0.0.1:9/x")
    with pytest.raises(ConfigurationError):
        s3_client("gs://b/p")
    with pytest.raises(ConfigurationError):
        s3_client("s3://b/p", key="k")
    with pytest.raises(ConfigurationError):
        ObstoreClient.gcs("s3://b")
    with pytest.raises(ConfigurationError):
        ObstoreClient.http("ftp://x")


@pytest.mark.gcs
def test_gcs_emulator_refuses_xml_uploads(gcs_server: GCSServer, tmp_path: Path) -> None:
    """The one gap against fake-gcs-server: a write fails loudly, naming the URL, not silently."""
    client = ObstoreClient.gcs(gcs_server.url("xml"), endpoint_url=gcs_server.endpoint)
    source = tmp_path / "f.bin"
    source.write_bytes(b"abc")
    with pytest.raises(StorageError, match=r"gs://.*/k\.bin"):
        client.put_file(str(source), "k.bin")
    with pytest.raises(ObjectNotFoundError):
        client.info("k.bin")


@pytest.mark.s3
def test_s3store_reads_through_obstore_by_default_and_botocore_when_asked(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With obstore installed, S3Store reads never build the botocore client unless asked."""
    monkeypatch.delenv("SHARDSTREAM_S3_CLIENT", raising=False)
    url = s3_env.url("switch")
    store = S3Store(url)
    source = tmp_path / "f.bin"
    source.write_bytes(b"0123456789")
    store.put_file(str(source), "k.bin")  # writes stay on s3fs
    assert store.get_range("k.bin", 2, 5) == b"234"
    assert store.get_bytes("k.bin") == b"0123456789"
    assert store.get_bytes_info("k.bin")[1] == store.info("k.bin")
    assert store.get_range("k.bin", 3, 3) == b""
    with pytest.raises(StorageError, match=r"k\.bin"):
        store.get_range("k.bin", 5, 11)
    with pytest.raises(ObjectNotFoundError, match=r"s3://.*/none\.bin"):
        store.get_range("none.bin", 0, 1)
    assert store._client is None  # the botocore client of reads: never made
    assert isinstance(store._obstore, ObstoreClient)
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "boto")
    with pytest.raises(ConfigurationError, match="SHARDSTREAM_S3_CLIENT"):
        S3Store(url)
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "botocore")
    escape = S3Store(url)
    assert escape.get_range("k.bin", 0, 3) == b"012"
    assert escape.info("k.bin").size == 10
    assert escape._client is not None  # the old path, whole
    assert escape._obstore is None


@pytest.mark.s3
def test_listing_pages_share_one_stream_and_resume_from_a_token(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of one listing cost the server's pages, not one listing each.

    A token held by no client (another process's) resumes after its key.
    """
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        client = _s3(s3_env, proxy.endpoint)
        keys = [f"{n:02d}.bin" for n in range(8)]
        for key in keys:
            _put(client, tmp_path, key, b"x")
        monkeypatch.setattr(obstore_client, "PAGE_KEYS", 3)
        proxy.reset_counts()
        first, token = client.list_page("", None, None)
        assert sorted(first) == keys[:3]
        assert token is not None
        other = s3_client(client.root, endpoint_url=proxy.endpoint, key=s3_env.key,
                                 secret=s3_env.secret)  # fmt: skip
        resumed, _ = other.list_page("", None, token)
        assert sorted(resumed) == keys[3:6]
        listed = dict(first)
        while token is not None:
            page, token = client.list_page("", None, token)
            listed.update(page)
        assert sorted(listed) == keys
        # One ListObjectsV2 for the whole of client's listing, one for other's page, and one
        # from client's last key, which tells the listing's end from a page that was lost.
        assert proxy.count("GET", "list-type=2") == 3


def _read_in_child(read: Callable[[], bytes], answers: Any) -> None:
    try:
        answers.put(read())
    except ConfigurationError as exc:
        answers.put(str(exc))


def _in_fork(read: Callable[[], bytes]) -> object:
    """What ``read`` gives in a forked child (bounded: a hung child fails the test)."""
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_read_in_child, args=(read, answers))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
        pytest.fail("the forked child hung")
    return answers.get(timeout=5)


@pytest.mark.s3
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_fork_of_an_obstore_user_refuses_instead_of_hanging(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime of obstore does not survive fork: a forked child that used it would hang.

    After this process's first request through obstore, a forked child's ObstoreClient raises
    an error that says what to do, and S3Store's switched reads fall back to botocore there.
    """
    client = _s3(s3_env)
    _put(client, tmp_path, "k.bin", b"abcdef")
    assert client.get_range("k.bin", 3, 6) == b"def"
    refused = _in_fork(lambda: client.get_range("k.bin", 0, 3))
    assert isinstance(refused, str)
    assert "multiprocessing_context" in refused
    assert "SHARDSTREAM_S3_CLIENT=botocore" in refused
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "obstore")
    store = S3Store(client.root)
    assert store.get_range("k.bin", 0, 2) == b"ab"  # the parent reads through obstore
    assert _in_fork(lambda: store.get_range("k.bin", 0, 3)) == b"abc"  # the child, botocore
    assert client.get_range("k.bin", 0, 1) == b"a"  # the parent's client still works


@pytest.mark.azure
def test_azure_sas_token_never_shows_in_errors(azure_server: AzureServer) -> None:
    sas = "sv=2023-01-03&ss=b&srt=sco&sp=r&se=2030-01-01T00:00:00Z&sig=bm90LWEtcmVhbC1zaWc%3D"
    client = azure_client(azure_server.url("sas"), account_name=azure_server.account,
                                 sas_token=sas, endpoint_url=azure_server.endpoint)  # fmt: skip
    with pytest.raises((CredentialsError, StorageError)) as caught:
        client.get_range("k.bin", 0, 1)
    text = str(caught.value)
    assert "bm90LWEtcmVhbC1zaWc" not in text
    assert client.url("k.bin") in text


@pytest.mark.s3
def test_s3_writes_one_put_or_one_multipart_upload(s3_env: S3Server, tmp_path: Path) -> None:
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        client = _s3(s3_env, proxy.endpoint)
        _put(client, tmp_path, "small.bin", b"x" * 1000)
        assert proxy.count("PUT", "small.bin") == 1
        assert proxy.count("POST") == 0
        proxy.reset_counts()
        data = os.urandom(11 * 1024 * 1024)  # three parts of obstore's 5 MiB
        _put(client, tmp_path, "large.bin", data)
        assert proxy.count("POST", "uploads") == 1  # one upload made
        assert proxy.count("PUT", "large.bin") == 3  # its parts
        assert proxy.count("POST", "uploadId") == 1  # completed once, which publishes it
        assert client.get_bytes("large.bin") == data


_LEAVES_TO_CHILDREN = """
import os, sys
from shardstream.storage import S3Store, obstore_client
obstore_client.leave_to_forked_children()
url, endpoint, key, secret = sys.argv[1:5]
store = S3Store(url, endpoint_url=endpoint, key=key, secret=secret)
parent = store.get_range("k.bin", 0, 2).decode(), type(store._fast_reader()).__name__
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    data = store.get_range("k.bin", 0, 3).decode()
    os.write(write, f"{data} {type(store._fast_reader()).__name__}".encode())
    os._exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    child = pipe.read()
os.waitpid(pid, 0)
print(*parent, child)
"""


@pytest.mark.s3
def test_a_process_that_leaves_obstore_to_its_children_lets_them_read_through_it(
    s3_env: S3Server, tmp_path: Path
) -> None:
    """A process about to fork readers reads through the plain client, its children obstore.

    In a fresh interpreter (this one may have started obstore's runtime already): its own read
    goes through the standard library's client, so the runtime is never started there, and a
    child forked after it reads through obstore rather than hang or fall back.
    """
    client = _s3(s3_env)
    _put(client, tmp_path, "k.bin", b"abcdef")
    answer = subprocess.run(
        [sys.executable, "-c", _LEAVES_TO_CHILDREN, client.root, s3_env.endpoint, s3_env.key,
         s3_env.secret],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert answer.stdout.split() == ["ab", "PlainS3Client", "abc", "ObstoreClient"]
