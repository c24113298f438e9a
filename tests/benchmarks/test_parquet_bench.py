"""The Parquet-beside-MDS benchmark's smoke test: it runs, and every epoch it timed was checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "parquet_bench.py"


def test_quick_benchmark_runs_and_checks_pass(tmp_path: Path):
    out = tmp_path / "parquet.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--rows", "3000", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["checks_passed"] is True
    assert set(report["results"]) == {
        f"{kind} ({codec}), workers={w}"
        for kind in ("parquet", "mds") for codec in ("none", "zstd") for w in (0, 2)
    }  # fmt: skip
    for result in report["results"].values():
        assert result["rows"] == 3000
        assert result["best_samples_per_s"] > 0
    assert "parquet/mds" in done.stdout
