"""Epoch-plan cost: one shardstream worker's plan beside the reference's full-epoch generation.

Default case (the target: "100M samples in 10,000 shards on 8 nodes x 8 ranks x 8 workers, < 2 s"):
    .venv/bin/python benchmarks/sampling_bench.py [--samples N] [--out results/sampling.json]
The same data and global batch (2,048) are then planned for one worker of smaller jobs (8 x 1 x 1:
a worker reads a whole canonical node; 1 x 1 x 1: the whole epoch), to show that a worker's
memory follows its own share. Each run is its own process (the reference in .venv-ref); time
and peak RSS are measured inside it, imports excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("sampling_worker.py")


def run(python: str, lib: str, extra: list[str], timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        command = [python, str(WORKER), "--lib", lib, "--result", result, *extra]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        if completed.returncode != 0:
            raise SystemExit(f"{lib} worker failed:\n{completed.stdout}\n{completed.stderr}")
        with open(result) as handle:
            data: dict[str, Any] = json.load(handle)
            return data


def shape_label(shape: str) -> str:
    nodes, ranks, workers = shape.split("x")
    return f"{nodes} nodes x {ranks} ranks x {workers} workers"


def timing(result: dict[str, Any]) -> str:
    """Wall time, CPU time (the same on an idle machine) and peak RSS."""
    return (f"{result['seconds']:7.2f} s (CPU {result['cpu_seconds']:6.2f} s)  "
            f"peak RSS {result['peak_rss_mib']:6.0f} MiB")  # fmt: skip


def worker_args(args: argparse.Namespace, shape: str) -> list[str]:
    """The worker's arguments for one worker of a ``nodes x ranks x workers`` job."""
    nodes, ranks, workers = (int(part) for part in shape.split("x"))
    batch = args.global_batch // (nodes * ranks)
    return ["--samples", str(args.samples), "--algo", args.algo, "--nodes", str(nodes),
            "--ranks", str(ranks), "--workers", str(workers), "--batch", str(batch)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--algo", default="py1e")
    parser.add_argument("--global-batch", type=int, default=2048)
    parser.add_argument(
        "--topologies",
        default="8x8x8,8x1x1,1x1x1",
        help="nodes x ranks x workers of each job; the first is the target case",
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sampling.json"))
    args = parser.parse_args()
    ref_python = os.environ.get(
        "SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python")
    )
    shapes = args.topologies.split(",")
    ours = {shape: run(sys.executable, "shardstream", worker_args(args, shape), timeout=600)
            for shape in shapes}  # fmt: skip
    ref = run(ref_python, "streaming", worker_args(args, shapes[0]), timeout=1200)
    first = ours[shapes[0]]
    print(f"epoch plan, {args.samples:,} samples, 10,000 shards, NCN 8, {args.algo}, "
          f"global batch {args.global_batch:,}")  # fmt: skip
    for shape in shapes:
        result = ours[shape]
        print(f"  shardstream, one worker of {shape_label(shape) + ':':34} {timing(result)}  "
              f"({result['worker_samples']:,} samples)")  # fmt: skip
    print(f"  reference, the whole epoch ({shape_label(shapes[0])}):{timing(ref)}")
    print(f"  ratio (reference / shardstream, {shapes[0]}): "
          f"{ref['seconds'] / first['seconds']:.1f}x time, "
          f"{ref['peak_rss_mib'] / first['peak_rss_mib']:.1f}x peak RSS")  # fmt: skip
    print(f"  target < 2 s: {'MET' if first['seconds'] < 2 else 'MISSED'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    summary = {"shardstream": first, "topologies": ours, "reference": ref,
               "samples": args.samples, "algo": args.algo}  # fmt: skip
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
