"""Smoke test of the Spark -> MDS benchmark: ``spark_bench.py --quick`` end to end.

Both libraries convert the same small DataFrame in their own local Spark sessions; only
correctness facts are asserted, never speed. The tabular workload only: the image one adds about
a minute of CI, differs only in the few lines that generate its columns, and shardstream's own
Spark tests convert binary columns (the full benchmark runs it). The reference venv needs pyspark
(``scripts/setup-ref-venv --spark``, which ``scripts/test`` runs).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.benchmarks import REPO, run_benchmark

WORKLOADS = {"tabular": 20_000}
COMPRESSIONS = ("none", "zstd")


def require_reference_pyspark() -> None:
    python = os.environ.get("SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python"))
    if not os.path.exists(python):
        return  # run_benchmark fails with its own message
    probe = subprocess.run(
        [python, "-c", "import pyspark, pyarrow, pandas"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.fail(
            f"{python} cannot import pyspark, pyarrow and pandas; run "
            f"scripts/setup-ref-venv --spark"
        )


@pytest.mark.interop
@pytest.mark.slow
def test_quick_benchmark_runs_and_checks_pass(tmp_path: Path) -> None:
    require_reference_pyspark()
    out = tmp_path / "spark.json"
    completed = run_benchmark(
        "spark_bench.py", "--quick", "--workload", "tabular", "--out", str(out), timeout=900
    )
    assert "same samples: yes" in completed.stdout
    assert "target tabular/none" in completed.stdout

    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["checks_passed"] is True
    assert {"cpu_count", "platform", "load_average_at_start"} <= set(report["machine"])
    assert report["versions"]["reference"]["version"] == "0.13.0"
    assert (
        report["versions"]["shardstream"]["pyspark"] == report["versions"]["reference"]["pyspark"]
    )
    assert set(report["load_average"]) == {"shardstream", "reference"}
    assert set(report["workloads"]) == set(WORKLOADS)
    for name, rows in WORKLOADS.items():
        workload = report["workloads"][name]
        checks = workload["checks"]
        assert checks["same_input_data"] is True
        assert checks["passed"] is True
        for side in ("shardstream", "reference"):
            result = workload[side]
            assert result["data_digest"]["rows"] == rows
            assert result["spark_floor_seconds"] > 0
            for compression in COMPRESSIONS:
                run = result["runs"][compression]
                assert run["seconds"]["best"] > 0
                assert run["cpu_seconds"]["best"] > 0
                assert run["bytes"] > 0
                assert run["shard_files"] >= 1
        for compression in COMPRESSIONS:
            check = checks["compressions"][compression]
            assert check["same_samples"] is True
            for side in ("shardstream", "reference"):
                assert check[side]["samples"] == rows
                assert check[side]["missing_ids"] == 0
                assert check[side]["repeated_ids"] == 0
                assert check[side]["passed"] is True
            assert workload["comparison"][compression]["ratio"] > 0
            assert workload["comparison"][compression]["cpu_ratio"] > 0
            assert isinstance(report["targets"][f"{name}/{compression}"]["met"], bool)
