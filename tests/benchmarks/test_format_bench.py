"""Smoke test of the MDS format benchmark: ``benchmarks/format_bench.py --quick`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import run_benchmark

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
    out = tmp_path / "format.json"
    completed = run_benchmark("format_bench.py", "--quick", "--out", str(out))
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
        # The copy floor (no library, the bound on a read that returns copies) is measured for
        # bytes payloads and compared with the reference.
        floor = workload["shardstream"]["copy_floor_samples_per_s"]
        assert floor["best"] > 0
        assert comparison["ratios"]["copy_floor"] > 0
        for metric in ("read", "write"):
            assert isinstance(report["targets"][f"{name}/{metric}"]["met"], bool)
