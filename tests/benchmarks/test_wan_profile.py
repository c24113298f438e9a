"""The phases of a traced cold epoch (``benchmarks/wan_profile.py``), on canned traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks.wan_profile import phases


def _trace(folder: Path, pid: int, requests: list[list[object]]) -> None:
    with open(folder / f"{pid}.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(request) + "\n" for request in requests)


def test_phases_split_the_epoch_at_the_first_shard_request_and_the_last_byte(tmp_path: Path):
    # Two processes (a reader and a forked worker): the index and listing, then shard bytes
    # with a spell of nothing in flight between 13.0 and 13.5.
    _trace(tmp_path, 1, [
        ["get_bytes_info", "p/index.json", 10.1, 10.2, 1000],
        ["list_info", "", 10.2, 10.4, 0],
        ["get_range", "p/shard.00000.mds", 10.5, 12.0, 100_000_000],
    ])  # fmt: skip
    _trace(tmp_path, 2, [
        ["get_range", "p/shard.00001.mds", 11.0, 13.0, 100_000_000],
        ["get_bytes", "p/shard.00002.mds", 13.5, 14.5, 50_000_000],
    ])  # fmt: skip
    result = {"started": 10.0, "ended": 15.0, "batches": [14.6, 15.0],
              "checks": {"passed": True}, "main_cpu": 1.5}  # fmt: skip
    found = phases(result, str(tmp_path), link_rate=100e6)
    assert found["start"] == pytest.approx(0.5)
    assert found["fetch"] == pytest.approx(4.0)
    assert found["tail"] == pytest.approx(0.5)
    assert found["idle"] == pytest.approx(0.5)
    assert found["first_batch"] == pytest.approx(4.6)
    # In flight: 1 over [10.5, 11), 2 over [11, 12), 1 over [12, 13), 0, then 1 over [13.5, 14.5).
    assert found["mean_in_flight"] == pytest.approx((0.5 + 2 + 1 + 1) / 4.0)
    moved = 250_001_000
    assert found["mb"] == pytest.approx(moved / 1e6)
    assert found["fetch_of_link"] == pytest.approx(moved / 100e6 / 4.0)
    assert found["of_link"] == pytest.approx(moved / 100e6 / 5.0)
    assert found["requests"] == 5
    assert found["passed"] == 1.0
