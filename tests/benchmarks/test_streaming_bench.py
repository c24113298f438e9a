"""Smoke test of the streaming benchmark: ``streaming_bench.py --quick`` end to end.

It runs shardstream and the reference (mosaicml-streaming) only: litdata's ``optimize`` adds
about a minute even at toy size, so the full benchmark covers it and CI does not. Only
correctness facts are asserted, never speed. The reference reads slowly (~1,500 samples/s with
0 workers), so the test with both libraries takes each part in one setting (epochs with 2
workers, first batches with 0, 200 shards) and shardstream alone takes the 0-worker epochs:
2.2 minutes of CI where every setting with both libraries took 3.5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import run_benchmark

LIBS = ("shardstream", "reference")
WORKLOADS = {"small-1KiB": 10_240, "large-100KiB": 1_024, "tokens-2048": 5_120}


@pytest.mark.interop
def test_quick_benchmark_runs_and_checks_pass(tmp_path: Path) -> None:
    out = tmp_path / "streaming.json"
    completed = run_benchmark(
        "streaming_bench.py", "--quick", "--libs", ",".join(LIBS), "--workers", "2",
        "--ttfb-workers", "0", "--ttfb-shards", "2000", "--out", str(out), timeout=900,
    )  # fmt: skip
    assert "time to first batch" in completed.stdout
    assert "correctness: PASS" in completed.stdout

    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["checks_passed"] is True
    assert report["libs"] == list(LIBS)
    assert report["versions"]["reference"] == "0.13.0"
    assert {"cpu_count", "platform", "python"} <= set(report["machine"])

    assert set(report["epoch"]) == set(WORKLOADS)
    for name, samples in WORKLOADS.items():
        workload = report["epoch"][name]
        assert workload["params"]["samples"] == samples
        assert set(workload["runs"]) == {"workers=2"}
        for setting_name, setting in workload["runs"].items():
            for lib in LIBS:
                side = setting[lib]
                assert side["checks_passed"] is True, (name, setting_name, lib)
                for run in [side["first_epoch"], *side["epochs"]]:
                    checks = run["checks"]
                    assert checks["passed"] is True
                    assert checks["missing_labels"] == 0
                    assert checks["sample_failures"] == 0
                    # Sizes are whole batches: no padding, every label exactly once.
                    assert checks["samples_seen"] == samples
                    assert checks["repeated_labels"] == 0
                # Both workers are read at the first batch, however short the epoch.
                assert len(side["first_epoch"]["workers_memory"]) == 2, lib
                assert side["memory"]["main"]["vmhwm_mib"] > 0
                assert side["memory"]["main_rss_anon_mib_max"] > 0
            assert set(setting["ratios"]) >= {"reference", "faster_peer"}

    ttfb = report["ttfb"]
    assert ttfb["shards"] == 200
    assert set(ttfb["runs"]) == {"workers=0"}
    for setting_name, setting in ttfb["runs"].items():
        for lib in LIBS:
            side = setting[lib]
            assert side["checks_passed"] is True, (setting_name, lib)
            checks = side["epoch_checks"]
            # 2,000 samples in batches of 256 on one rank: each once, the last batch short.
            assert checks["padding_expected"] == 0
            assert checks["samples_seen"] == 2_000
            assert checks["missing_labels"] == 0
            assert side["cold_seconds"]["best"] > 0
            assert side["warm_seconds"]["best"] > 0
        assert {"cold", "warm"} <= set(setting["ratios"])


@pytest.mark.interop
def test_issue_sizes_choose_the_workloads_and_their_sample_counts(tmp_path: Path) -> None:
    out = tmp_path / "streaming_issue.json"
    run_benchmark(
        "streaming_bench.py", "--quick", "--issue-sizes", "--workloads", "large-100KiB",
        "--skip-ttfb", "--workers", "0", "--libs", "shardstream", "--out", str(out), timeout=600,
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["issue_sizes"] is True
    assert list(report["epoch"]) == ["large-100KiB"]
    workload = report["epoch"]["large-100KiB"]
    assert workload["params"]["samples"] == 20_000 // 10  # the issue's 20k, --quick's tenth
    side = workload["runs"]["workers=0"]["shardstream"]
    assert side["checks_passed"] is True
    checks = side["first_epoch"]["checks"]
    # 2,000 samples in batches of 256 on one rank: each once, the last batch short.
    assert checks["padding_expected"] == 0
    assert checks["samples_seen"] == 2_000
    assert checks["missing_labels"] == 0
    assert side["first_epoch"]["workers_memory"] == []  # read in the loader's own process


@pytest.mark.interop
def test_epochs_without_workers_read_every_sample_once(tmp_path: Path) -> None:
    out = tmp_path / "streaming.json"
    run_benchmark(
        "streaming_bench.py", "--quick", "--workloads", "small-1KiB,tokens-2048", "--skip-ttfb",
        "--workers", "0", "--libs", "shardstream", "--out", str(out), timeout=600,
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["checks_passed"] is True
    for name in ("small-1KiB", "tokens-2048"):
        side = report["epoch"][name]["runs"]["workers=0"]["shardstream"]
        assert side["checks_passed"] is True
        for run in [side["first_epoch"], *side["epochs"]]:
            assert run["checks"]["samples_seen"] == WORKLOADS[name]
            assert run["checks"]["missing_labels"] == 0
            assert run["checks"]["repeated_labels"] == 0
            assert run["workers_memory"] == []
