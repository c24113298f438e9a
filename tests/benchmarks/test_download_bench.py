"""Smoke test of the download benchmark: ``benchmarks/download_bench.py --quick`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "benchmarks" / "download_bench.py"
WORKLOADS = {"16x64MiB", "256x1MiB"}
ROWS = {"reference", "shardstream", "shardstream, 4 shards at a time"}


@pytest.mark.interop
@pytest.mark.s3
def test_quick_download_benchmark_runs_and_every_file_is_right(tmp_path: Path) -> None:
    python = os.environ.get("SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"the benchmark needs the reference venv, and {python} is missing; run "
            f"scripts/setup-ref-venv or set SHARDSTREAM_REF_PYTHON to a python with "
            f"mosaicml-streaming==0.13.0"
        )
    out = tmp_path / "download.json"
    completed = subprocess.run(
        [sys.executable, str(DRIVER), "--quick", "--repeats", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
        env=dict(os.environ, SHARDSTREAM_REF_PYTHON=python),
    )
    assert completed.returncode == 0, f"{completed.stdout}\n{completed.stderr}"
    assert "MB/s (best)" in completed.stdout
    assert "correctness (sizes and sha256 of every file): PASS" in completed.stdout

    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["checks_passed"] is True
    assert report["versions"]["reference"] == "0.13.0"
    assert set(report["workloads"]) == WORKLOADS
    for name, workload in report["workloads"].items():
        assert set(workload["sides"]) == ROWS
        for row, side in workload["sides"].items():
            assert side["checks"] == {"passed": True, "failures": []}, (name, row)
            assert side["shards"] == workload["params"]["shards"]
            assert side["bytes"] == workload["params"]["shards"] * workload["params"]["size"]
            assert len(side["seconds"]["all"]) == 1
            assert side["mb_per_s"]["best"] > 0
        assert workload["ratios"]["reference"] == pytest.approx(1.0)
        assert isinstance(report["targets"][name]["met"], bool)
