"""Smoke test of the epoch-plan benchmark on a small epoch, both libraries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import run_benchmark


@pytest.mark.interop
def test_small_sampling_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "sampling.json"
    completed = run_benchmark(
        "sampling_bench.py", "--samples", "200000", "--out", str(out), timeout=300
    )
    assert "target < 2 s" in completed.stdout
    result = json.loads(out.read_text())
    # 200,000 samples over 512 workers with device batches of 32: the measured worker's are
    # whole (the epoch's one short step falls to another worker).
    assert result["shardstream"]["worker_samples"] % 32 == 0
    assert result["shardstream"]["worker_samples"] > 0
    assert result["reference"]["seconds"] > 0
    # The same epoch (98 global batches of 2,048, the last short) for one worker of smaller
    # jobs: one worker of 1 x 1 x 1 reads it all, each sample once; one of 8 x 1 x 1 an eighth.
    shares = {shape: run["worker_samples"] for shape, run in result["topologies"].items()}
    assert shares == {"8x8x8": result["shardstream"]["worker_samples"],
                      "8x1x1": 200_000 // 8, "1x1x1": 200_000}  # fmt: skip
    assert "one worker of 1 nodes x 1 ranks x 1 workers" in completed.stdout
