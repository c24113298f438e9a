"""A local Spark Connect server for the test run, and a client session on it per module.

The server (``connect_server.py``) runs in a process of its own for the whole run, on a free
127.0.0.1 port with a token of its own. Each module that uses ``connect_spark`` gets a client
session, and Connect mode only while it runs: pyspark's functions (``F.col``...) build Connect
columns while ``SPARK_CONNECT_MODE_ENABLED`` is set, which classic tests must not see.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["connect_server_fixture", "connect_spark_fixture"]

_SERVER = Path(__file__).with_name("connect_server.py")
_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
_START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session", name="connect_url")
def connect_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://`` URL (with its token) of a Connect server started for this run."""
    scratch = tmp_path_factory.mktemp("spark-connect")
    port, token = _free_port(), uuid.uuid4().hex
    env = {key: value for key, value in os.environ.items() if key not in _CONNECT_ENV}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               SPARK_CONNECT_AUTHENTICATE_TOKEN=token)  # fmt: skip
    log = (scratch / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, str(_SERVER), str(port), str(scratch / "local")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = _read_line(server, _START_TIMEOUT_S)
        if line.strip() != "ready":
            log.flush()
            tail = (scratch / "server.log").read_text()[-3000:]
            pytest.fail(f"the Connect server did not start ({line!r}):\n{tail}")
        yield f"sc://localhost:{port}/;token={token}"
    finally:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()
        log.close()


def _read_line(server: subprocess.Popen[str], timeout: float) -> str:
    """The server's first line of output, or ``""`` when it exits or is too slow."""
    import selectors

    assert server.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(server.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return ""
    return server.stdout.readline()


@pytest.fixture(scope="module", name="connect_spark")
def connect_spark_fixture(connect_url: str) -> Iterator[Any]:
    """A Spark Connect client session, in Connect mode for this module only."""
    saved = {name: os.environ.get(name) for name in _CONNECT_ENV}
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(connect_url).create()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
    try:
        yield spark
    finally:
        spark.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
