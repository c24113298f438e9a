"""Smoke test of the machine-floors benchmark (no loader runs in it)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks import run_benchmark


def test_quick_floors_run_and_record_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "floors.json"
    completed = run_benchmark(
        "floors_bench.py", "--quick", "--repeats", "1", "--out", str(out), timeout=300
    )
    assert "read 100KiB, pread, held 256 a batch" in completed.stdout
    result = json.loads(out.read_text())
    for value in ("100KiB", "1KiB"):
        costs = result["read"][value]
        for key in ("pread_us", "mapped_us", "pread_batch_us", "mapped_batch_us"):
            assert costs[key]["best"] > 0, (value, key)
        uring = costs["uring_batch_us"]
        assert uring["best"] > 0 if "best" in uring else uring["unavailable"], (value, uring)
    assert result["files"]["crash_safe_us"]["best"] > 0
    assert result["plan"]["ms"]["best"] > 0
    assert set(result["dataloader"]) == {"0", "2"}
    assert isinstance(result["trim_threshold_raised"], bool)
