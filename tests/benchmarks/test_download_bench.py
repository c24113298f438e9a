"""Smoke test of the download benchmark: ``benchmarks/download_bench.py --quick`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import run_benchmark

WORKLOADS = {"16x64MiB", "256x1MiB"}
ROWS = {"reference", "shardstream", "shardstream, 4 shards at a time"}


@pytest.mark.interop
@pytest.mark.s3
def test_quick_download_benchmark_runs_and_every_file_is_right(tmp_path: Path) -> None:
    out = tmp_path / "download.json"
    completed = run_benchmark("download_bench.py", "--quick", "--repeats", "1", "--out", str(out))
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
