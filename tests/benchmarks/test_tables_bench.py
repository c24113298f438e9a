"""The tables benchmark's smoke test: it runs, and each epoch it timed was checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.suite_rows import rows_from

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "tables_bench.py"


def test_quick_benchmark_runs_and_checks_pass(tmp_path: Path):
    out = tmp_path / "tables.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rows", "3000", "--row-group", "500", "--repeats", "2",
         "--batch", "64", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["checks_passed"] is True
    assert report["rows"] == 3000
    assert set(report["results"]) == {
        f"{table}/{kind}/64" for table in ("numeric", "text") for kind in ("delta", "parquet")
    }
    for result in report["results"].values():
        assert set(result) == {"floor", "unshuffled", "shuffled"}
        for method in result.values():
            assert method["checks_passed"] is True
            assert method["epochs"] == 2
            assert method["rows_per_s"] > 0
            assert method["cpu_s"] >= 0
        assert result["floor"]["ratio_to_floor"] == 1.0
    assert "correctness: PASS" in done.stdout
    rows = rows_from("tables", report)
    assert len(rows) == 8
    assert {row.metric for row in rows} == {
        "table iteration, unshuffled", "table iteration, shuffled"
    }  # fmt: skip
    assert all(row.checks_passed for row in rows)
    assert all(row.ratio is not None and row.ratio > 0 for row in rows)
