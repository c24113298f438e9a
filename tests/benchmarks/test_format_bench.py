"""Smoke test of the MDS format benchmark: ``benchmarks/format_bench.py --quick`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "benchmarks" / "format_bench.py"
WORKLOADS = ["small-1KiB", "large-100KiB"]
SIDE_KEYS = {
    "version",
    "write_seconds",
    "read_seconds",
    "read_samples_per_s",
    "checks",
    "files",
    "data_sha256",
    "import_seconds",
}


@pytest.mark.interop
def test_quick_benchmark_runs_and_checks_pass(tmp_path: Path) -> None:
    python = os.environ.get("SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"the benchmark needs the reference venv, and {python} is missing; run "
            f"scripts/setup-ref-venv or set SHARDSTREAM_REF_PYTHON to a python with "
            f"mosaicml-streaming==0.13.0"
        )
    out = tmp_path / "format.json"
    completed = subprocess.run(
        [sys.executable, str(DRIVER), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
        env=dict(os.environ, SHARDSTREAM_REF_PYTHON=python),
    )
    assert completed.returncode == 0, f"{completed.stdout}\n{completed.stderr}"
    assert "workload" in completed.stdout
    assert "byte-identical" in completed.stdout

    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert {"machine", "versions", "targets", "checks_passed", "table", "workloads"} <= set(report)
    assert {"cpu_count", "platform", "python"} <= set(report["machine"])
    assert report["versions"]["reference"] == "0.13.0"
    assert report["checks_passed"] is True
    assert set(report["workloads"]) == set(WORKLOADS)
    for name in WORKLOADS:
        workload = report["workloads"][name]
        for side in ("shardstream", "reference"):
            result = workload[side]
            assert set(result) >= SIDE_KEYS, side
            assert result["checks"]["passed"] is True, (name, side, result["checks"])
            assert result["checks"]["sample_failures"] == 0
            assert result["checks"]["data_digest_ok"] is True
            assert len(result["read_seconds"]["all"]) == 3
            assert result["read_samples_per_s"]["best"] > 0
            assert result["write_seconds"]["best"] > 0
        comparison = workload["comparison"]
        assert comparison["same_data"] is True
        assert comparison["checks_passed"] is True
        assert isinstance(comparison["shards_identical"], bool)
        assert {"read", "write", "read_median", "write_median"} <= set(comparison["ratios"])
        for metric in ("read", "write"):
            assert isinstance(report["targets"][f"{name}/{metric}"]["met"], bool)
