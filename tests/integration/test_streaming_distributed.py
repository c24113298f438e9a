"""Real multi-node streaming: torchrun processes (gloo, 127.0.0.1) reading from SeaweedFS.

Two "nodes" of two ranks each, two DataLoader workers per rank, each node with its own cache
folder, all started by torchrun as on a cluster. Checked against one process reading alone.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.conftest import S3Server
from tests.streaming_data import COLUMNS, global_batches

from shardstream import MDSWriter, StreamingDataset

pytestmark = [pytest.mark.s3, pytest.mark.slow]

SAMPLES = 500
DEVICE_BATCH = 4
NODES, RANKS_PER_NODE = 2, 2
GLOBAL_BATCH = DEVICE_BATCH * NODES * RANKS_PER_NODE
JOB = Path(__file__).with_name("streaming_job.py")
TORCHRUN_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def remote(s3_server: S3Server) -> str:
    url = s3_server.url("streaming")
    environ = {
        "S3_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": s3_server.key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret,
    }  # fmt: skip
    saved = {name: os.environ.get(name) for name in environ}
    os.environ.update(environ)
    try:
        with MDSWriter(out=url, columns=COLUMNS, size_limit=4096, compression="zstd") as writer:
            for sample in range(SAMPLES):
                writer.write({"id": sample, "payload": bytes([sample % 251]) * 60})
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun(
    s3_env: S3Server, remote: str, out: Path, cache: Path, *, nodes: int, per_node: int,
    batch: int, workers: int = 2, extra: tuple[str, ...] = (),
) -> list[subprocess.CompletedProcess[str]]:  # fmt: skip
    """Run the job on ``nodes`` torchrun launchers of ``per_node`` ranks; their results."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    environ["PYTHONPATH"] = os.pathsep.join([str(Path.cwd()), environ.get("PYTHONPATH", "")])
    launchers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nnodes={nodes}",
                f"--nproc_per_node={per_node}",
                f"--node_rank={node}",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                str(JOB),
                "--remote",
                remote,
                "--cache",
                str(cache),
                "--out",
                str(out),
                "--batch-size",
                str(batch),
                "--workers",
                str(workers),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environ,
        )
        for node in range(nodes)
    ]
    results = []
    for launcher in launchers:
        output, _ = launcher.communicate(timeout=TORCHRUN_TIMEOUT_S)
        results.append(subprocess.CompletedProcess(launcher.args, launcher.returncode, output))
    return results


def rank_ids(out: Path, world: int) -> list[list[int]]:
    """Each rank's yielded ids, in order."""
    return [
        [i for batch in json.loads((out / f"rank{rank}.json").read_text()) for i in batch]
        for rank in range(world)
    ]


def succeeded(results: list[subprocess.CompletedProcess[str]]) -> None:
    for result in results:
        assert result.returncode == 0, result.stdout[-4000:]


@pytest.fixture(scope="module")
def reference(remote: str, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory):
    """The global batches of one process reading alone (1 node x 1 rank x 1 worker)."""
    os.environ.update({"S3_ENDPOINT_URL": s3_server.endpoint,
                       "AWS_ACCESS_KEY_ID": s3_server.key,
                       "AWS_SECRET_ACCESS_KEY": s3_server.secret})  # fmt: skip
    try:
        ds = StreamingDataset(
            remote=remote, local=str(tmp_path_factory.mktemp("single")), batch_size=GLOBAL_BATCH,
            shuffle=True, num_canonical_nodes=2, shuffle_seed=17, rank=0, world_size=1,
        )  # fmt: skip
        return global_batches([[int(s["id"]) for s in ds]], GLOBAL_BATCH)
    finally:
        for name in ("S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            os.environ.pop(name, None)


def test_two_nodes_two_ranks_two_workers_read_each_sample_once(
    s3_env: S3Server, remote: str, reference: list[frozenset[int]], tmp_path: Path
):
    results = torchrun(s3_env, remote, tmp_path / "out", tmp_path / "cache",
                       nodes=NODES, per_node=RANKS_PER_NODE, batch=DEVICE_BATCH)  # fmt: skip
    succeeded(results)
    per_rank = rank_ids(tmp_path / "out", NODES * RANKS_PER_NODE)
    assert len({len(ids) for ids in per_rank}) == 1  # every rank got the same count
    counts = collections.Counter(i for ids in per_rank for i in ids)
    assert set(counts) == set(range(SAMPLES))
    ranks = NODES * RANKS_PER_NODE
    assert sum(counts.values()) == SAMPLES + (-SAMPLES % ranks)  # plus the repeats, if any
    assert global_batches(per_rank, DEVICE_BATCH) == reference
    for node in range(NODES):  # each node fetched every shard it read once, into its own cache
        cache = tmp_path / "cache" / f"node{node}"
        assert (cache / "index.json").exists()
        assert not list(cache.glob(".*.tmp-*"))


def test_stopped_mid_epoch_and_resumed_on_another_topology(
    s3_env: S3Server, remote: str, reference: list[frozenset[int]], tmp_path: Path
):
    stop = 6
    succeeded(torchrun(s3_env, remote, tmp_path / "first", tmp_path / "cache", nodes=NODES,
                       per_node=RANKS_PER_NODE, batch=DEVICE_BATCH,
                       extra=("--stop-after", str(stop))))  # fmt: skip
    first = rank_ids(tmp_path / "first", NODES * RANKS_PER_NODE)
    state = tmp_path / "first" / "state.json"
    assert json.loads(state.read_text())["sample_in_epoch"] == stop * GLOBAL_BATCH
    # Resume on one node of two ranks with one worker each: a device batch of 8 keeps G = 16.
    succeeded(torchrun(s3_env, remote, tmp_path / "second", tmp_path / "cache2", nodes=1,
                       per_node=2, batch=GLOBAL_BATCH // 2, workers=1,
                       extra=("--resume", str(state))))  # fmt: skip
    second = rank_ids(tmp_path / "second", 2)
    assert global_batches(first, DEVICE_BATCH) == reference[:stop]
    assert global_batches(second, GLOBAL_BATCH // 2) == reference[stop:]


def test_a_killed_worker_then_a_plain_restart_works(
    s3_env: S3Server, remote: str, reference: list[frozenset[int]], tmp_path: Path
):
    cache = tmp_path / "cache"
    crashed = torchrun(s3_env, remote, tmp_path / "crash", cache, nodes=1, per_node=2,
                       batch=GLOBAL_BATCH // 2, extra=("--kill-after", "5"))  # fmt: skip
    assert any(result.returncode != 0 for result in crashed)
    assert any("killed by signal" in result.stdout for result in crashed)
    # The same command again, with nothing cleaned up by hand.
    results = torchrun(s3_env, remote, tmp_path / "again", cache, nodes=1, per_node=2,
                       batch=GLOBAL_BATCH // 2)  # fmt: skip
    succeeded(results)
    assert global_batches(rank_ids(tmp_path / "again", 2), GLOBAL_BATCH // 2) == reference
