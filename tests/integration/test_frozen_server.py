"""Every request of every backend gives up on a frozen server within its timeout.

A job with ``download_timeout=T`` and ``download_retry=R`` asks a server that stopped answering
(the index check at start-up, a listing, a HEAD, a GET, an upload) and must fail within
``T * (R + 1)`` seconds plus the backoff between attempts, with the URL in the message, never
after the SDK's own minute. SeaweedFS (S3), fake-gcs-server (GCS) and Azurite (Azure) are frozen
with SIGSTOP, as a hung machine is: the kernel still accepts connections, nothing answers. The
in-process fakes (OCI, Databricks, HTTP) are reached through a proxy whose every request stalls.
The requests of one test run at once, so a backend costs about one frozen period per ``R``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import StorageError, UploadError
from shardstream.storage import AzureStore, DownloadOptions, ObjectStore, download_file, open_store

from .faults import FaultProxy
from .http_server import StaticServer
from .servers_gcs_azure import AzureServer

TIMEOUT = 1.0
#: Thread start-up, a fresh store's SDK client (the index check and the writer open their own)
#: and a busy machine. Loose on purpose: the point is to give up long before the SDK's own
#: minute, not how soon after the deadline.
SLACK = 15.0
KEY = "shard.00000.mds"
_WARM: set[str] = set()  # the backends whose requests ran once, unfrozen


@dataclass
class Frozen:
    """A backend's dataset root, and how to freeze its server for the length of a block."""

    name: str
    url: str
    freeze: Callable[[], contextlib.AbstractContextManager[None]]
    writable: bool = True  # HTTP has no listing and no upload


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    assert pid > 0, "the server fixture does not say its process"
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def _proxied(upstream_port: int) -> Iterator[tuple[str, Callable[[], None]]]:
    """A proxy to the in-process fake, and a call that makes its every later request stall."""
    with FaultProxy(upstream_port) as proxy:
        yield proxy.endpoint, lambda: proxy.inject("stall", count=1 << 30, stall_seconds=600)


def _frozen_by_proxy(name: str, stall: Callable[[], None], url: str) -> Frozen:
    @contextlib.contextmanager
    def freeze() -> Iterator[None]:
        stall()  # the proxy closes at the end of the test, which ends the stalls
        yield

    return Frozen(name, url, freeze)


BACKENDS = [
    pytest.param("s3", marks=pytest.mark.s3),
    pytest.param("gcs", marks=pytest.mark.gcs),
    pytest.param("azure", marks=pytest.mark.azure),
    "oci",
    "databricks",
    "http",
]


@pytest.fixture(params=BACKENDS)
def frozen(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Frozen]:
    name = request.param
    if name in ("s3", "gcs", "azure"):
        server = request.getfixturevalue(f"{name}_env")
        yield Frozen(name, server.url("frozen"), lambda: _stopped(server.pid))
        return
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)  # urllib would go through it
    if name == "oci":
        account = request.getfixturevalue("oci_env")
        port = int(account.endpoint.rsplit(":", 1)[1])
        with _proxied(port) as (endpoint, stall):
            monkeypatch.setenv("OCI_ENDPOINT_URL", endpoint)
            yield _frozen_by_proxy(name, stall, account.url("frozen"))
    elif name == "databricks":
        workspace = request.getfixturevalue("databricks_env")
        port = int(workspace.host.rsplit(":", 1)[1])
        with _proxied(port) as (endpoint, stall):
            monkeypatch.setenv("DATABRICKS_HOST", endpoint)
            yield _frozen_by_proxy(name, stall, workspace.url("frozen"))
    else:
        web: StaticServer = request.getfixturevalue("http_server")
        folder = f"frozen-{uuid.uuid4().hex[:8]}"
        os.makedirs(os.path.join(web.root, folder))
        with _proxied(web.port) as (endpoint, stall):
            frozen = _frozen_by_proxy(name, stall, f"{endpoint}/{folder}")
            frozen.writable = False
            yield frozen


@dataclass
class Outcome:
    """How one request ended: its duration and what it raised (``None``: it returned)."""

    seconds: float | None = None  # None: still waiting when the test gave up
    error: BaseException | None = None


def _run_together(calls: dict[str, Callable[[], object]], limit: float) -> dict[str, Outcome]:
    """Start every call at once in a daemon thread; wait for them up to ``limit`` seconds."""
    outcomes = {name: Outcome() for name in calls}

    def run(name: str, call: Callable[[], object]) -> None:
        started = time.monotonic()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcomes[name].error = exc
        outcomes[name].seconds = time.monotonic() - started

    threads = [
        threading.Thread(target=run, args=item, daemon=True, name=f"frozen-{item[0]}")
        for item in calls.items()
    ]
    deadline = time.monotonic() + limit
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return outcomes


def _backoff_bound(retry: int) -> float:
    """The most the backoff between ``retry + 1`` attempts can add (see retry.backoff_delays)."""
    return 0.5 * float(2**retry - 1)


@pytest.mark.parametrize("retry", [0, 1])
def test_a_frozen_server_fails_every_request_within_timeout_times_attempts(
    frozen: Frozen, retry: int, tmp_path: Path
):
    options = DownloadOptions(retry=retry, timeout=TIMEOUT)

    def store() -> ObjectStore:  # opened as a StreamingDataset opens its remote
        return open_store(frozen.url, timeout=TIMEOUT)

    def index_check() -> None:
        StreamingDataset(
            remote=frozen.url,
            local=str(tmp_path / "cache"),
            download_timeout=TIMEOUT,
            download_retry=retry,
        ).prepare()

    def head_then_get() -> None:  # the size unknown: a HEAD first
        download_file(store(), KEY, str(tmp_path / "head" / KEY), options)

    def get() -> None:  # the size known from the index: one GET
        dest = str(tmp_path / "get" / KEY)
        download_file(store(), KEY, dest, options, expected_size=1000)

    def upload() -> None:
        out = (str(tmp_path / "written"), f"{frozen.url}/written")
        with MDSWriter(out=out, columns={"x": "int"}, retry=retry, timeout=TIMEOUT) as writer:
            writer.write({"x": 1})

    # (the request, the attempts it makes: a listing is one request, not retried by the store)
    calls: dict[str, tuple[Callable[[], object], int]] = {
        "index check": (index_check, retry + 1),
        "HEAD": (head_then_get, retry + 1),
        "GET": (get, retry + 1),
    }
    if frozen.writable:
        calls["listing"] = (lambda: store().list(), 1)
        calls["upload"] = (upload, retry + 1)
    if frozen.name not in _WARM:  # imports and SDK set-up, once a session: not network waits
        _run_together({name: call for name, (call, _) in calls.items()}, 60)
        _WARM.add(frozen.name)
    most = TIMEOUT * (retry + 1) + _backoff_bound(retry)
    with frozen.freeze():
        outcomes = _run_together({name: call for name, (call, _) in calls.items()}, most + SLACK)
    report = {name: (o.seconds, repr(o.error)[:300]) for name, o in outcomes.items()}
    for name, (_, attempts) in calls.items():
        outcome = outcomes[name]
        assert outcome.seconds is not None, (
            f"{name}: still waiting after {most + SLACK} s: {report}"
        )
        assert isinstance(outcome.error, (StorageError, UploadError)), f"{name}: {report}"
        assert frozen.url in str(outcome.error), f"{name}: the URL is not named: {report}"
        # Each attempt waited out its timeout: the retries were made, not skipped (a lower
        # bound, which load only lengthens); and the request gave up (the bound above).
        assert TIMEOUT * attempts * 0.95 <= outcome.seconds <= most + SLACK, f"{name}: {report}"


@pytest.mark.azure
def test_an_azure_listing_is_one_request_not_a_head_first(azure_env: AzureServer, tmp_path: Path):
    """Without a HEAD first (adlfs asks if the folder is a blob): one timeout when frozen."""
    upstream = urlsplit(azure_env.endpoint)
    with FaultProxy(int(upstream.port or 80)) as proxy:
        endpoint = f"{proxy.endpoint}{upstream.path}"
        connection = azure_env.connection_string.replace(azure_env.endpoint, endpoint)
        store = AzureStore(azure_env.url("listing"), connection_string=connection)
        (tmp_path / "f").write_bytes(b"x")
        store.put_file(str(tmp_path / "f"), "a/f")
        proxy.reset_counts()
        assert store.list() == ["a/f"]
        assert proxy.count("HEAD") == 0
        assert proxy.count("GET") == 1
