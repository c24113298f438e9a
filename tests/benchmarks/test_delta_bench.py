"""The Delta benchmark's smoke test: it runs, and every epoch and resume it timed was checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.suite_rows import rows_from

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "delta_bench.py"


def test_quick_benchmark_runs_and_checks_pass(tmp_path: Path):
    out = tmp_path / "delta.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rows", "2000", "--no-spark", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["checks_passed"] is True
    assert set(report["results"]) == {"delta", "parquet", "mds"}
    for result in report["results"].values():
        assert result["checks_passed"] is True
        assert result["resume_checks_passed"] is True
        assert result["rows_per_s"] > 0
        assert 0 < result["first_batch_s"] < result["epoch_s"]
    assert "correctness: PASS" in done.stdout
    rows = rows_from("delta", report)
    assert [row.metric for row in rows] == [
        "Delta iteration, workers 0", "Delta first batch", "Delta resume, first batch",
    ]  # fmt: skip
    assert all(row.checks_passed for row in rows)
