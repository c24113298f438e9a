"""The WAN table's ceiling column (``benchmarks/wan_report.py``), on canned reports."""

from __future__ import annotations

from typing import Any

from benchmarks.wan_report import docs_section, table_rows


def _side(seconds: float, checks_passed: bool = True) -> dict[str, Any]:
    link = {"proxy_cpu_seconds": 0.1, "wall_seconds": seconds, "bytes_down": 1000}
    return {"seconds": seconds, "checks_passed": checks_passed, "link": link}


def _report(cold: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "settings": {"latency_ms": 30, "jitter_ms": 5, "connection_mb_per_s": 80,
                     "link_mb_per_s": 125},
        "started": "2026-11-28T17:00:00+0000", "quick": True, "command": "wan_bench.py",
        "cold_epoch": {"small-1KiB": {"params": {"samples": 10}, "limit_seconds": 1.0,
                                      "runs": cold}},
        "first_batch": {"100 shards": {"shards": 100, "limit_seconds": 0.2, "runs": {
            "workers=0": {"shardstream": _side(0.15), "reference": _side(1.0)},
        }}},
    }  # fmt: skip


def test_each_cold_epoch_row_gives_shardstreams_fraction_of_the_ceiling() -> None:
    report = _report({
        "workers=0": {"shardstream": _side(1.25), "reference": _side(3.0),
                      "s3torch": _side(1.0)},
        "workers=2": {"shardstream": _side(1.0), "reference": _side(3.0),
                      "s3torch": _side(1.2)},
    })  # fmt: skip
    found = table_rows(report)
    rows = found["rows"]
    assert [row["of_ceiling"] for row in rows] == [0.8, 1.2, None]  # none for a first batch
    assert [row["ceiling_seconds"] for row in rows] == [1.0, 1.2, None]
    # The ceiling is not a peer: the best peer and its ratio are the reference's.
    assert [row["peer"] for row in rows] == ["reference", "reference", "reference"]
    assert rows[0]["ratio"] == 3.0 / 1.25
    header, first, second, ttfb = found["table"]
    at = header.index("of s3torch")
    assert header[at - 1] == "s3torch"
    assert (first[at - 1], first[at]) == ("1.000", "80%")
    assert (second[at - 1], second[at]) == ("1.200", "120%")
    assert (ttfb[at - 1], ttfb[at]) == ("-", "-")
    assert "of s3torch" in docs_section(report)


def test_without_the_ceiling_the_table_has_no_column_for_it() -> None:
    report = _report({"workers=0": {"shardstream": _side(1.0), "reference": _side(2.0)}})
    found = table_rows(report)
    assert "of s3torch" not in found["table"][0]
    assert found["rows"][0]["of_ceiling"] is None


def test_a_failed_or_wrong_ceiling_is_reported_not_rated() -> None:
    report = _report({
        "workers=0": {"shardstream": _side(1.0), "s3torch": {"failed": "OSError: refused"}},
        "workers=2": {"shardstream": _side(1.0), "reference": _side(2.0),
                      "s3torch": _side(0.5, checks_passed=False)},
    })  # fmt: skip
    rows = table_rows(report)["rows"]
    assert rows[0]["of_ceiling"] is None
    assert rows[0]["peer_failures"] == ["s3torch: OSError: refused"]
    assert rows[1]["of_ceiling"] is None  # a read that missed objects is no ceiling
    assert rows[1]["peer_failures"] == ["s3torch: returned wrong samples (its checks failed)"]
    table = table_rows(report)["table"]
    assert table[1][table[0].index("best peer")] == "-"  # no peer ran: not "failed"
    assert all(row["checks_passed"] for row in rows)  # shardstream's own checks, not the ceiling's
    section = docs_section(report)
    assert "- small-1KiB x 10, workers 0, cold epoch, s: s3torch: OSError: refused" in section
