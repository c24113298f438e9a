"""Running the flowers example as a user would: its scripts as subprocesses, against SeaweedFS.

Shared by the ``test_flowers*.py`` modules: the environment a user would set for an S3 store
(here the local SeaweedFS), the example's paths, and the torchrun launch of two simulated nodes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.seaweedfs import S3Server

__all__ = [
    "EXAMPLE",
    "TRAIN_IDS",
    "VALIDATION_IDS",
    "environment",
    "rank_ids",
    "run",
    "torchrun",
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flowers"
IMAGES = 100
TRAIN_IDS = {i for i in range(IMAGES) if i % 10 != 9}
VALIDATION_IDS = {i for i in range(IMAGES) if i % 10 == 9}
TIMEOUT_S = 300


def environment(server: S3Server) -> dict[str, str]:
    """This process's environment with the store's endpoint and credentials, loopback only."""
    environ = {
        **os.environ,
        "S3_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": server.key,
        "AWS_SECRET_ACCESS_KEY": server.secret,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/nonexistent/shardstream-test-aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/shardstream-test-aws-creds",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        environ.pop(name, None)
    return environ


def run(script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``examples/flowers/<script>``; fail with its output's tail if it fails."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / script), *args],
        capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun(*args: str, env: dict[str, str], nodes: int = 2, per_node: int = 2) -> None:
    """``flowers_ddp.py`` on ``nodes`` torchrun launchers of ``per_node`` ranks each."""
    port = _free_port()
    command = [
        sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
        f"--nproc_per_node={per_node}", "--master_addr=127.0.0.1", f"--master_port={port}",
    ]  # fmt: skip
    script = [str(EXAMPLE / "flowers_ddp.py"), *args]
    launchers = [
        subprocess.Popen(
            [*command, f"--node_rank={node}", *script],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for node in range(nodes)
    ]
    outputs = [launcher.communicate(timeout=TIMEOUT_S)[0] for launcher in launchers]
    for launcher, output in zip(launchers, outputs, strict=True):
        assert launcher.returncode == 0, output[-4000:]


def rank_ids(folder: Path, ranks: int) -> list[dict[int, list[int]]]:
    """Each rank's sample ids per epoch, in the order it got them."""
    found: list[dict[int, list[int]]] = []
    for rank in range(ranks):
        raw: dict[str, Any] = json.loads((folder / f"ids-rank{rank}.json").read_text())
        found.append({int(epoch): ids for epoch, ids in raw.items()})
    return found
