"""Smoke test of the bytes-per-node benchmark: two simulated nodes, both libraries, small."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import run_benchmark


@pytest.mark.interop
def test_small_node_bytes_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "node_bytes.json"
    completed = run_benchmark(
        "node_bytes_bench.py", "--samples", "4000", "--shard-bytes", "65536", "--algos", "py1s",
        "--limit-shards", "0,6", "--timeout", "60", "--out", str(out), timeout=400,
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["checks_passed"] is True, completed.stdout
    unlimited = report["runs"]["py1s, no cache limit"]
    limited = report["runs"]["py1s, cache limit 6 shards"]
    # mosaicml-streaming 0.13 now and then hangs with a cache limit this small: that run is
    # recorded as failed, and the table says so. Without a limit it must finish.
    if "failed" in limited["reference"]:
        assert "reference py1s" in limited["reference"]["failed"]
        assert "did not finish" in completed.stdout
        del limited["reference"]
    for run in (unlimited, limited):
        for lib in [lib for lib in ("shardstream", "reference") if lib in run]:
            result = run[lib]
            assert len(result["nodes"]) == 2
            assert result["checks"]["missing_labels"] == 0
            # No node can download less than the shards its samples come from.
            for node in result["nodes"]:
                assert node["bytes"] >= node["minimum_bytes"] > 0
    # Without a limit each shard a node reads is downloaded by it exactly once.
    for lib in ("shardstream", "reference"):
        for node in unlimited[lib]["nodes"]:
            assert node["bytes"] == node["minimum_bytes"]
            assert node["downloads"] == node["distinct_shards_read"]
    assert "MiB/node" in completed.stdout
