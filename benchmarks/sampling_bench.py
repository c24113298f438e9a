"""Epoch-plan cost: one shardstream worker's plan beside the reference's full-epoch generation.

Default case (issue: "100M samples in 10,000 shards on 8 nodes x 8 ranks x 8 workers, < 2 s"):
    .venv/bin/python benchmarks/sampling_bench.py [--samples N] [--out results/sampling.json]
Each library runs in its own process (the reference in .venv-ref); time and peak RSS are
measured inside it, imports excluded.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--algo", default="py1e")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sampling.json"))
    args = parser.parse_args()
    ref_python = os.environ.get(
        "SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python")
    )
    extra = ["--samples", str(args.samples), "--algo", args.algo]
    ours = run(sys.executable, "shardstream", extra, timeout=600)
    ref = run(ref_python, "streaming", extra, timeout=1200)
    print(f"epoch plan, {args.samples:,} samples, 10,000 shards, 8 nodes x 8 ranks x 8 workers, "
          f"NCN 8, {args.algo}")  # fmt: skip
    print(f"  shardstream, one worker's plan:  {ours['seconds']:7.2f} s  "
          f"peak RSS {ours['peak_rss_mib']:8.0f} MiB  "
          f"({ours['worker_samples']:,} samples)")  # fmt: skip
    print(f"  reference, the whole epoch:      {ref['seconds']:7.2f} s  "
          f"peak RSS {ref['peak_rss_mib']:8.0f} MiB")  # fmt: skip
    print(f"  ratio (reference / shardstream): {ref['seconds'] / ours['seconds']:.1f}x time, "
          f"{ref['peak_rss_mib'] / ours['peak_rss_mib']:.1f}x peak RSS")  # fmt: skip
    print(f"  target < 2 s: {'MET' if ours['seconds'] < 2 else 'MISSED'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    summary = {"shardstream": ours, "reference": ref, "samples": args.samples, "algo": args.algo}
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
