"""Smoke test of the start-check benchmark: a small local dataset, every start timed."""

from __future__ import annotations

import json

from tests.benchmarks import run_benchmark


def test_start_check_bench_times_cold_warm_and_rewritten_starts() -> None:
    completed = run_benchmark(
        "start_check_bench.py", "--shards", "300", "--stores", "local", timeout=300
    )
    (row,) = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    assert (row["store"], row["shards"]) == ("local", 300)
    assert set(row["shardstream"]) == {"cold", "warm", "rewritten"}
    assert all(start["seconds"] > 0 for start in row["shardstream"].values())
    assert all(start["cpu_seconds"] > 0 for start in row["shardstream"].values())
