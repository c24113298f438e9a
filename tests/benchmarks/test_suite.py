"""The benchmark suite's merge: rows, ratios, targets and docs from canned driver JSON.

No benchmark runs here: each driver's JSON is written by the test, with numbers chosen so
every ratio and every MET / MISSED flag is known in advance.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import suite, suite_limits, suite_rows

Row = suite_rows.Row
TARGETS = suite_rows.TARGETS

REPO = Path(__file__).resolve().parents[2]


def _summary(best: float) -> dict[str, float]:
    return {"best": best, "median": best}


def _format() -> dict[str, Any]:
    def side(write: float, read: float) -> dict[str, Any]:
        return {"write_seconds": _summary(write), "read_samples_per_s": _summary(read)}

    return {
        "quick": True,
        "workloads": {
            # 1,000 samples: ours 0.5 s (2,000/s), reference 1.0 s (1,000/s): 2.0x >= 1.5 met
            "small-1KiB": {
                "params": {"samples": 1000},
                "shardstream": side(0.5, 40_000),
                "reference": side(1.0, 4_000),
                "comparison": {"checks_passed": True},
            },
            # ours 1.0 s, reference 1.2 s: 1.2x, missed; a failed check shows as FAIL
            "tokens-2048": {
                "params": {"samples": 1000},
                "shardstream": side(1.0, 10_000),
                "reference": side(1.2, 5_000),
                "comparison": {"checks_passed": False},
            },
        },
    }


def _epoch_side(rate: float, main_mib: float, worker_mib: float | None) -> dict[str, Any]:
    return {
        "samples_per_s": _summary(rate),
        "checks_passed": True,
        "memory": {"main": {"vmhwm_mib": main_mib}, "worker_vmhwm_mib_max": worker_mib},
    }


def _streaming() -> dict[str, Any]:
    ttfb_side = {
        "shardstream": {"cold_seconds": _summary(0.2), "checks_passed": True},
        "reference": {"cold_seconds": _summary(1.0), "checks_passed": True},
    }
    return {
        "quick": True,
        "created": "2026-11-26T06:04:00+0000",
        "reruns": [
            {
                "created": "2026-11-26T11:00:00+0000",
                "wall_seconds": 60.0,
                "settings": ["resume/workers=0", "resume/workers=2"],
            }
        ],
        "epoch": {
            "small-1KiB": {
                "runs": {
                    # litdata is the faster peer: 300 / 200 = 1.5x < 2, missed; peak RSS:
                    # ours max(300, 400) = 400, best peer reference 600: 0.67 <= 0.75, met
                    "workers=2": {
                        "shardstream": _epoch_side(300.0, 300, 400),
                        "reference": _epoch_side(100.0, 500, 600),
                        "litdata": _epoch_side(200.0, 700, 650),
                    },
                    # shuffle off: 1,000 / 400 = 2.5x, met; no peak RSS row
                    "workers=0 shuffle=off": {
                        "shardstream": _epoch_side(1000.0, 100, None),
                        "reference": _epoch_side(400.0, 100, None),
                    },
                }
            }
        },
        "ttfb_by_shards": {
            "100": {"shards": 100, "runs": {"workers=0": ttfb_side}},  # 0.2 / 1.0, met
        },
        "s3_cold": {
            "large-100KiB": {
                "runs": {
                    "workers=0": {  # 500 / 100 = 5x >= 2, met
                        "shardstream": {"cold_samples_per_s": 500.0, "checks_passed": True},
                        "reference": {"cold_samples_per_s": 100.0, "checks_passed": True},
                    },
                    "workers=2": {  # the peer crashed: no ratio, a note, our checks stand
                        "shardstream": {"cold_samples_per_s": 400.0, "checks_passed": True},
                        "reference": {"failed": "IndexError: index 0 is out of bounds"},
                    },
                }
            }
        },
        "resume": {
            "runs": {
                "workers=0": {
                    "shardstream": {"resume_seconds": _summary(0.05), "checks_passed": True},
                    "reference": {"resume_seconds": _summary(0.1), "checks_passed": True},
                }  # 0.5 > 0.1, missed
            }
        },
    }


def _spark() -> dict[str, Any]:
    def runs(seconds: float) -> dict[str, Any]:
        return {"runs": {"none": {"seconds": _summary(seconds)}}}

    passed = {"passed": True}
    return {
        "workloads": {
            "tabular": {
                "comparison": {"none": {}},
                "shardstream": runs(3.0),
                "reference": runs(6.0),  # 6 / 3 = 2.0x >= 1.5, met
                "checks": {
                    "same_input_data": True,
                    "compressions": {
                        "none": {"shardstream": passed, "reference": passed, "same_samples": True}
                    },
                },
            }
        }
    }


def _node_bytes() -> dict[str, Any]:
    def side(mib: float, minimum_mib: float, passed: bool = True) -> dict[str, Any]:
        return {"bytes_per_node": mib * 2**20, "minimum_bytes_per_node": minimum_mib * 2**20,
                "checks_passed": passed}  # fmt: skip

    return {
        "params": {"nodes": 2},
        "runs": {
            # ours 30 MiB, the reference 120: 4x fewer bytes, reported as 4.00x (no target)
            "py1e, cache limit 16 shards": {
                "shardstream": side(30.0, 20.0), "reference": side(120.0, 20.0),
            },
            # the reference's checks failed: the row says so
            "py1s, no cache limit": {
                "shardstream": side(20.0, 20.0), "reference": side(20.0, 20.0, passed=False),
            },
        },
    }  # fmt: skip


@pytest.fixture
def results(tmp_path: Path) -> Path:
    issue_sizes = {"epoch": {"small-1KiB": {
        "params": {"samples": 1_000_000},
        # 900 / 300 = 3x, met; peak RSS 200 / 400 = 0.5, met
        "runs": {"workers=0": {"shardstream": _epoch_side(900.0, 200, None),
                               "reference": _epoch_side(300.0, 400, None)}},
    }}}  # fmt: skip
    reports = {"format": _format(), "streaming": _streaming(), "spark": _spark(),
               "node_bytes": _node_bytes(), "streaming_issue": issue_sizes}  # fmt: skip
    for name, report in reports.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(report), encoding="utf-8")
    return tmp_path


def _find(rows: list[Row], metric: str, workload: str) -> Row:
    matches = [r for r in rows if r.metric == metric and r.workload.startswith(workload)]
    assert len(matches) == 1, [(r.metric, r.workload) for r in rows]
    return matches[0]


def test_rows_ratios_and_targets(results: Path) -> None:
    rows, reports = suite.merge(results, [driver.name for driver in suite.DRIVERS])
    assert reports["download"] is None
    assert reports["format"] is not None

    write = _find(rows, "MDS write", "small-1KiB")
    assert write.ratio == pytest.approx(2.0)
    assert (write.best_peer, write.target, write.met, write.checks_passed) == (
        "reference",
        TARGETS["write"],
        True,
        True,
    )
    tokens = _find(rows, "MDS write", "tokens-2048")
    assert tokens.ratio == pytest.approx(1.2)
    assert tokens.met is False
    assert tokens.checks_passed is False

    shuffled = _find(rows, "warm-cache iteration", "small-1KiB, workers 2")
    assert shuffled.best_peer == "litdata"
    assert shuffled.ratio == pytest.approx(1.5)
    assert shuffled.met is False
    unshuffled = _find(rows, "warm-cache iteration", "small-1KiB, workers 0 shuffle off")
    assert unshuffled.ratio == pytest.approx(2.5)
    assert unshuffled.met is True

    rss = _find(rows, "peak RSS per process (largest)", "small-1KiB, workers 2")
    assert rss.best_peer == "reference"  # the smallest: 600 against litdata's 700
    assert rss.ratio == pytest.approx(400 / 600)
    assert rss.target_op == "<="
    assert rss.met is True
    peak = [r for r in rows if r.metric.startswith("peak RSS") and r.source == "streaming"]
    assert len(peak) == 1  # none for the shuffle-off setting

    ttfb = _find(rows, "time to first batch (cold)", "100 shards")
    assert ttfb.ratio == pytest.approx(0.2)
    assert ttfb.met is True

    resume = _find(rows, "resume latency", "small-1KiB at 50%")
    assert resume.ratio == pytest.approx(0.5)
    assert resume.met is False

    s3 = _find(rows, "cold iteration from local S3", "large-100KiB, workers 0")
    assert s3.ratio == pytest.approx(5.0)
    assert s3.met is True
    crashed = _find(rows, "cold iteration from local S3", "large-100KiB, workers 2")
    assert (crashed.peers, crashed.ratio, crashed.met) == ({}, None, None)
    assert crashed.checks_passed is True
    assert "reference failed: IndexError" in crashed.note

    limited = _find(rows, "bytes downloaded per node", "py1e, cache limit 16 shards, 2 nodes")
    assert (limited.ours, limited.peers) == (30.0, {"reference": 120.0})
    assert limited.ratio == pytest.approx(4.0)  # reference bytes / ours: fewer is better
    assert (limited.target, limited.met, limited.checks_passed) == (None, None, True)
    assert "minimum 20.0 MiB" in limited.note
    unlimited = _find(rows, "bytes downloaded per node", "py1s, no cache limit")
    assert unlimited.ratio == pytest.approx(1.0)
    assert unlimited.checks_passed is False

    big = _find(rows, "warm-cache iteration", "small-1KiB x 1,000,000, workers 0")
    assert big.ratio == pytest.approx(3.0)
    assert (big.met, big.source) == (True, "streaming_issue")
    big_rss = _find(rows, "peak RSS per process (largest)", "small-1KiB x 1,000,000")
    assert big_rss.ratio == pytest.approx(0.5)
    assert big_rss.met is True

    spark = _find(rows, "Spark conversion (none)", "spark tabular")
    assert spark.ratio == pytest.approx(2.0)  # reference seconds / ours
    assert spark.target_op == ">="
    assert spark.met is True
    assert spark.checks_passed is True


def test_table_flags() -> None:
    rows = [
        Row("a", "m", "samples/s", 300.0, {"reference": 100.0, "litdata": 200.0}, target=2.0),
        Row("b", "m", "s", 0.1, {"reference": 1.0}, higher_is_better=False, target=0.25),
        Row("c", "m", "shards", 5.0),
    ]
    header, missed, met, plain = suite.table_rows(rows)
    assert header[:5] == ["workload", "metric", "shardstream", "best peer", "ratio"]
    assert missed[3:7] == ["200 (litdata)", "1.50x", ">= 2x", "MISSED"]
    assert met[4:7] == ["0.10x", "<= 0.25x", "met"]
    assert plain[3:7] == ["-", "-", "-", "-"]


def test_merge_only_writes_json_plot_and_docs(results: Path) -> None:
    docs = results / "benchmarks.md"
    notes = f"{suite.NOTES_MARKER}\n\n## Earlier runs\n\n- a hand-written figure: 1.5x\n"
    docs.write_text(f"# Benchmarks\n\nan old table\n\n{notes}")
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "suite.py"), "--merge-only",
         "--out-dir", str(results), "--docs", str(docs)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    # A row whose checks failed (tokens-2048) makes the exit status 1, after every output.
    assert done.returncode == 1, done.stderr
    assert "MISSED" in done.stdout

    report = json.loads((results / "suite.json").read_text())
    assert report["quick"] is True
    assert {"cpu_count", "platform", "python"} <= set(report["machine"])
    assert "shardstream" in report["versions"]["shardstream"]
    assert report["drivers"]["format"]["workloads"]["small-1KiB"]["params"]["samples"] == 1000
    flags = {(r["metric"], r["workload"]): r["met"] for r in report["rows"]}
    assert flags[("MDS write", "small-1KiB")] is True
    assert flags[("resume latency", "small-1KiB at 50%, workers 0")] is False
    assert (results / "suite.png").stat().st_size > 0

    text = docs.read_text()
    assert "## How to reproduce" in text
    assert "benchmarks/suite.py" in text
    assert "![ratios against their targets](suite.png)" in text
    assert "- resume latency, small-1KiB at 50%, workers 0: 0.50x, target <= 0.1x" in text
    resume = next(line for line in text.splitlines() if line.startswith("- resume latency"))
    assert "Limited by: with 2 workers, starting torch's DataLoader worker processes" in resume
    assert suite_limits.LIMITS_SECTION in text
    # A missed row of a kind with no recorded reason is called out, not explained away.
    write = next(line for line in text.splitlines() if line.startswith("- MDS write, tokens"))
    assert write.endswith("No reason recorded: investigate it as a regression.")
    assert "## Not measured yet" in text
    assert "bytes downloaded per node for py1e and py1s (measured)" not in text
    # The hand-written notes survive the run, once, at the end; the old table does not.
    assert text.endswith(notes)
    assert text.count(suite.NOTES_MARKER) == 1
    assert "an old table" not in text
    assert "Nothing: every row" not in text  # drivers did not run: they are listed instead
    assert "rows of download" in text  # a driver without JSON is listed, never invented
    assert "## Peers that failed" in text
    assert "large-100KiB, workers 2: reference failed: IndexError" in text
    assert (
        "- streaming: re-measured on 2026-11-26T11:00:00+0000 (`--update`), every library in "
        "that run: resume/workers=0, resume/workers=2; its other rows are from the run of "
        "2026-11-26T06:04:00+0000"
    ) in text


@pytest.mark.parametrize(
    ("metric", "workload", "reason"),
    [
        ("time to first batch (cold)", "100 shards, workers 2", "lock file"),
        ("time to first batch (cold)", "100,000 shards, workers 0", None),
        ("time to first batch (cold)", "10,000 shards, workers 0", None),
        # Copy-bound with values held a batch at a time (floors_bench, 2026-11-26).
        ("warm-cache iteration", "large-100KiB, workers 0 shuffle off", "copied"),
        ("warm-cache iteration", "large-100KiB x 20,000, workers 0", "copied"),
        ("warm-cache iteration", "large-100KiB, workers 2", None),
        ("warm-cache iteration", "small-1KiB, workers 0", None),
        ("peak RSS per process (largest)", "small-1KiB x 1,000,000, workers 2", "mapped"),
        ("peak RSS per process (largest)", "small-1KiB, workers 2", None),
        ("resume latency", "small-1KiB at 50%, workers 2", "worker processes"),
        ("Spark conversion (zstd)", "spark image", "hand"),
        ("Spark conversion (zstd)", "spark tabular", None),
    ],
)
def test_limit_of_names_the_rows_it_explains(
    metric: str, workload: str, reason: str | None
) -> None:
    limit = suite_limits.limit_of(metric, workload)
    if reason is None:
        assert limit is None
    else:
        assert limit is not None
        assert reason in limit.bound
