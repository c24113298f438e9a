"""Bytes downloaded per node, measured: simulated nodes reading one shuffled epoch, py1e and py1s.

    .venv/bin/python benchmarks/node_bytes_bench.py [--quick] [--out results/node_bytes.json]

One dataset (``--samples`` samples of ``--size`` bytes in shards of ``--shard-bytes``) is read by
``--nodes`` simulated nodes at once, for each library (shardstream in ``.venv``,
mosaicml-streaming in ``.venv-ref``), each shuffle algorithm and each cache limit. A node is one
process (``node_bytes_worker.py``: one rank, ``--workers`` DataLoader workers, its own cache
folder), started with the launcher's variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1; mosaicml-streaming joins a gloo group through them).
The local folder stands for the remote: every shard file copied into a node's cache is one
download, counted by wrapping the library's download function (index files excluded).

Reported per node: bytes and shard downloads, and their multiple of the minimum, the bytes of
the distinct shards the node's samples come from (each downloaded once). Every run checks each
sample's bytes against its label and that the nodes together delivered every sample exactly
once, apart from the few repeats that even out the ranks. A peer's run whose nodes fail or
outlast ``--timeout`` is recorded as ``{"failed": why}`` and the benchmark goes on; a
shardstream run that does so ends it with an error.

``--limit-shards``: cache limits as a number of shards (0: no limit). Both libraries share the
sampling parameters given here (``num_canonical_nodes``, seed, block size: their default when
not given), so they read the same samples per node; what differs is the order within a node's
reading and how the cache evicts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchmarks.report import format_table, machine, worker_env  # noqa: E402

WORKER = HERE / "node_bytes_worker.py"
WRITER = HERE / "streaming_worker.py"
LIBS = {"shardstream": "shardstream", "reference": "streaming"}


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def shard_table(data: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Each shard's first sample id (plus the total at the end) and its file's bytes."""
    with open(os.path.join(data, "index.json"), encoding="utf-8") as handle:
        shards = json.load(handle)["shards"]
    counts = np.array([shard["samples"] for shard in shards], np.int64)
    sizes = np.array([shard["raw_data"]["bytes"] for shard in shards], np.int64)
    return np.concatenate([[0], np.cumsum(counts)]), sizes


class NodesFailed(Exception):
    """The nodes of one run did not all finish: one failed or ran past the time allowed."""


def wait_for_nodes(processes: list[subprocess.Popen[bytes]], timeout: float) -> str | None:
    """Wait until every node exits; say why not as soon as one fails or time runs out."""
    deadline = time.monotonic() + timeout
    while any(process.poll() is None for process in processes):
        codes = [process.poll() for process in processes]
        if any(code not in (None, 0) for code in codes):
            return f"a node failed (exits {codes})"
        if time.monotonic() > deadline:
            return f"a node ran past {timeout} s"
        time.sleep(0.2)
    codes = [process.poll() for process in processes]
    return None if all(code == 0 for code in codes) else f"a node failed (exits {codes})"


def run_nodes(
    python: str, lib: str, args: argparse.Namespace, data: str, work: str, algo: str,
    limit: int | None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Start every node at once; each node's result with its ledger of downloads."""
    port = free_port()
    processes = []
    for node in range(args.nodes):
        folder = os.path.join(work, f"{lib}-{algo}-{limit or 0}-node{node}")
        os.makedirs(folder)
        paths = {name: os.path.join(folder, name) for name in ("cache", "ledger", "result")}
        command = [
            python, str(WORKER), "--lib", LIBS[lib], "--data", data, "--cache", paths["cache"],
            "--ledger", paths["ledger"], "--result", paths["result"],
            "--samples", str(args.samples), "--size", str(args.size), "--seed", str(args.seed),
            "--algo", algo, "--ncn", str(args.ncn), "--batch-size", str(args.batch_size),
            "--workers", str(args.workers),
        ]  # fmt: skip
        if limit:
            command += ["--cache-limit", str(limit)]
        if args.block_size:
            command += ["--block-size", str(args.block_size)]
        tmpdir = os.path.join(folder, "tmp")  # mosaicml-streaming's lock files land here
        os.makedirs(tmpdir)
        env = worker_env(
            RANK=str(node), WORLD_SIZE=str(args.nodes), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYTHONHASHSEED="0", TMPDIR=tmpdir,
        )  # fmt: skip
        log = open(os.path.join(folder, "log"), "w", encoding="utf-8")  # noqa: SIM115
        # A session of its own: a node killed below takes its DataLoader workers with it.
        node_process = subprocess.Popen(
            command, env=env, stdout=log, stderr=log, start_new_session=True
        )
        processes.append((node_process, log, paths))
    failed = wait_for_nodes([process for process, _, _ in processes], args.timeout)
    for process, log, _ in processes:
        if process.poll() is None:  # one node failed: the others would wait in a barrier
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()
    if failed is not None:
        logs = "\n".join(
            f"--- node {node} ---\n{Path(entry[1].name).read_text(encoding='utf-8')[-3000:]}"
            for node, entry in enumerate(processes)
        )
        raise NodesFailed(f"{lib} {algo}: {failed}:\n{logs}")
    results = []
    for _, _, paths in processes:
        if not os.path.exists(paths["result"]):
            raise SystemExit(f"{lib} {algo}: a node exited 0 without its result {paths['result']}")
        with open(paths["result"], encoding="utf-8") as handle:
            result = json.load(handle)
        ledger = Path(paths["ledger"])
        lines = ledger.read_text().split() if ledger.exists() else []
        result["downloads"] = [(lines[i + 1], int(lines[i + 2])) for i in range(0, len(lines), 3)]
        results.append(result)
    return results


def summarize(
    nodes: list[dict[str, Any]], starts: np.ndarray[Any, Any], sizes: np.ndarray[Any, Any],
    samples: int,
) -> dict[str, Any]:  # fmt: skip
    """Per node: downloads, bytes, the minimum; over nodes: the exactly-once check."""
    per_node = []
    every = []
    for node in nodes:
        labels = np.asarray(node.pop("labels"), np.int64)
        every.append(labels)
        shards = np.unique(np.searchsorted(starts, labels, side="right") - 1)
        downloads = node.pop("downloads")
        per_node.append({
            "rank": node["rank"],
            "samples": int(labels.size),
            "seconds": node["seconds"],
            "downloads": len(downloads),
            "bytes": sum(size for _, size in downloads),
            "distinct_shards_read": int(shards.size),
            "minimum_bytes": int(sizes[shards].sum()),
            "sample_failures": node["sample_failures"],
        })  # fmt: skip
    seen = np.concatenate(every)
    counts = np.bincount(seen, minlength=samples)
    padding = int(seen.size - samples)
    checks = {
        "samples_seen": int(seen.size),
        "missing_labels": int((counts == 0).sum()),
        "repeated_labels": int((counts > 1).sum()),
        "sample_failures": sum(node["sample_failures"] for node in per_node),
    }
    checks["passed"] = (
        checks["missing_labels"] == 0
        and 0 <= padding < len(nodes) * 1024
        and checks["repeated_labels"] <= padding
        and checks["sample_failures"] == 0
    )
    mean_bytes = float(np.mean([node["bytes"] for node in per_node]))
    mean_minimum = float(np.mean([node["minimum_bytes"] for node in per_node]))
    return {
        "nodes": per_node,
        "bytes_per_node": mean_bytes,
        "minimum_bytes_per_node": mean_minimum,
        "multiple_of_minimum": mean_bytes / mean_minimum if mean_minimum else None,
        "downloads_per_node": float(np.mean([node["downloads"] for node in per_node])),
        "seconds": max(node["seconds"] for node in per_node),
        "version": nodes[0]["version"],
        "checks": checks,
        "checks_passed": checks["passed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--shard-bytes", type=int, default=1 << 18)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per node")
    parser.add_argument("--ncn", type=int, default=8, help="num_canonical_nodes")
    parser.add_argument("--block-size", type=int, help="shuffle_block_size (default: the libs')")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--algos", default="py1e,py1s")
    parser.add_argument("--limit-shards", default="0,16", help="cache limits in shards; 0: none")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--libs", default="shardstream,reference")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per node")
    parser.add_argument("--quick", action="store_true", help="10,000 samples")
    parser.add_argument("--out", default=str(HERE / "results" / "node_bytes.json"))
    args = parser.parse_args()
    if args.quick:
        args.samples = min(args.samples, 10_000)
    pythons = {
        "shardstream": sys.executable,
        "reference": os.environ.get("SHARDSTREAM_REF_PYTHON")
        or str(REPO / ".venv-ref" / "bin" / "python"),
    }
    libs = args.libs.split(",")
    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="node-bytes-")
    try:
        data = os.path.join(work, "data")
        subprocess.run(
            [sys.executable, str(WRITER), "write", "--lib", "shardstream", "--out", data,
             "--samples", str(args.samples), "--size", str(args.size), "--jitter", "0",
             "--seed", str(args.seed), "--size-limit", str(args.shard_bytes),
             "--result", os.path.join(work, "write.json")],
            check=True, capture_output=True, env=worker_env(),
        )  # fmt: skip
        starts, sizes = shard_table(data)
        largest = int(sizes.max())
        print(f"[node-bytes] {args.samples:,} samples of {args.size} bytes in {len(sizes)} shards "
              f"of up to {largest:,} bytes; {args.nodes} nodes x 1 rank x {args.workers} workers, "
              f"NCN {args.ncn}", flush=True)  # fmt: skip
        runs: dict[str, Any] = {}
        for shards in [int(n) for n in args.limit_shards.split(",")]:
            limit = shards * largest if shards else None
            for algo in args.algos.split(","):
                key = f"{algo}, {'no cache limit' if not limit else f'cache limit {shards} shards'}"
                runs[key] = {"algo": algo, "limit_shards": shards, "cache_limit": limit}
                for lib in libs:
                    try:
                        nodes = run_nodes(pythons[lib], lib, args, data, work, algo, limit)
                    except NodesFailed as failure:
                        if lib == "shardstream":
                            raise SystemExit(str(failure)) from None
                        # A peer that hangs or fails is a finding of the run, not its end.
                        runs[key][lib] = {"failed": str(failure).splitlines()[0].rstrip(":")}
                        print(f"  {key}, {lib}: FAILED, {runs[key][lib]['failed']}", flush=True)
                        continue
                    result = summarize(nodes, starts, sizes, args.samples)
                    runs[key][lib] = result
                    verdict = "PASS" if result["checks_passed"] else "FAIL"
                    print(f"  {key}, {lib}: {result['bytes_per_node'] / 2**20:.1f} MiB per node "
                          f"({result['multiple_of_minimum']:.2f}x the minimum, "
                          f"{result['downloads_per_node']:.0f} downloads), "
                          f"{result['seconds']:.1f} s, checks {verdict}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = ["case", "library", "MiB/node", "x minimum", "downloads/node", "s", "checks"]
    table = [header]
    for key, run in runs.items():
        for lib in libs:
            result = run[lib]
            if "failed" in result:
                table.append([key, lib, "-", "-", "-", "-", "did not finish"])
                continue
            table.append([key, lib, f"{result['bytes_per_node'] / 2**20:.1f}",
                          f"{result['multiple_of_minimum']:.2f}",
                          f"{result['downloads_per_node']:.0f}", f"{result['seconds']:.1f}",
                          "PASS" if result["checks_passed"] else "FAIL"])  # fmt: skip
    print(format_table(table))
    report = {
        "benchmark": "node_bytes",
        "machine": machine(),
        "params": {key: value for key, value in vars(args).items() if key != "out"},
        "shards": len(sizes),
        "largest_shard_bytes": largest,
        "runs": runs,
        "wall_seconds": time.perf_counter() - started,
        # Every run that finished delivered each sample once; peers that did not are in "runs".
        "checks_passed": all(
            run[lib]["checks_passed"]
            for run in runs.values()
            for lib in libs
            if "failed" not in run[lib]
        ),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
