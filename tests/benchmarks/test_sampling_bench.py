"""Smoke test of the epoch-plan benchmark on a small epoch, both libraries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.interop
def test_small_sampling_benchmark_runs(tmp_path: Path) -> None:
    python = os.environ.get("SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.fail(f"the benchmark needs the reference venv, and {python} is missing")
    out = tmp_path / "sampling.json"
    completed = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "sampling_bench.py"),
         "--samples", "200000", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "target < 2 s" in completed.stdout
    result = json.loads(out.read_text())
    # 200,000 samples over 512 workers with device batches of 32: whole batches of 32 each.
    assert result["shardstream"]["worker_samples"] % 32 == 0
    assert result["shardstream"]["worker_samples"] > 0
    assert result["reference"]["seconds"] > 0
