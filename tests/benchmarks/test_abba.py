"""The method of comparing two trees (``benchmarks/abba.py``) and its driver's smallest run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import abba

REPO = Path(__file__).resolve().parents[2]


def test_runs_alternate_before_after_after_before_each_round() -> None:
    assert [tree for _, tree in abba.abba(2)] == ["before", "after", "after", "before"] * 2
    assert [number for number, _ in abba.abba(2)] == [0] * 4 + [1] * 4


def test_runs_are_paired_in_order_and_the_median_ratio_is_after_over_before() -> None:
    # Before's runs took 10 and 20, after's 5 and 30: pairs 0.5 and 1.5, a median of 1.0.
    comparison = abba.compare([10.0, 20.0], [5.0, 30.0])
    assert comparison.pairs == 2
    assert comparison.ratio == pytest.approx(1.0)
    assert comparison.low == pytest.approx(0.5)
    assert comparison.high == pytest.approx(1.5)


def test_the_interval_holds_the_median_and_narrows_on_agreeing_pairs() -> None:
    before = [1.0] * 8
    spread = abba.compare(before, [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 0.7, 1.0])
    assert spread.low <= spread.ratio <= spread.high
    tight = abba.compare(before, [0.9] * 8)
    assert tight.low == tight.high == pytest.approx(0.9)


def test_verdicts_read_the_interval_against_the_tolerance() -> None:
    assert abba.verdict(abba.Comparison(0.8, 0.7, 0.95, 4)) == "faster"
    assert abba.verdict(abba.Comparison(1.02, 0.98, 1.04, 4)) == "within 5%"
    assert abba.verdict(abba.Comparison(1.02, 0.98, 1.2, 4)) == "within 5%?"
    assert abba.verdict(abba.Comparison(1.3, 1.2, 1.4, 4)) == "SLOWER"
    assert abba.verdict(abba.Comparison(1.1, 1.0, 1.2, 4)) == "SLOWER?"


def test_no_pairs_is_an_error_not_a_figure() -> None:
    with pytest.raises(ValueError, match="no pairs"):
        abba.compare([], [1.0])


def test_trees_are_copied_side_by_side_without_byte_code(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("x = 1\n")
    (source / "pkg" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    copies = abba.copy_trees({"before": str(source), "after": str(source)}, tmp_path / "s")
    assert copies == {name: str(tmp_path / "s" / name / "src") for name in ("before", "after")}
    for copy in copies.values():
        assert (Path(copy) / "pkg" / "__init__.py").read_text() == "x = 1\n"
        assert not (Path(copy) / "pkg" / "__pycache__").exists()


def test_tree_env_imports_the_tree_and_keeps_the_heap(tmp_path: Path) -> None:
    env = abba.tree_env(str(tmp_path))
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    assert env["MALLOC_TRIM_THRESHOLD_"] == "268435456"


@pytest.mark.slow
def test_the_driver_compares_a_tree_with_itself(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    command = [
        sys.executable, str(REPO / "benchmarks" / "compare_trees.py"),
        "--before", str(REPO / "src"), "--kinds", "getitem", "--quick", "--rounds", "0",
        "--out", str(out), "--markdown", str(tmp_path / "compare.md"),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600, cwd=REPO)
    report = json.loads(out.read_text())
    rows = {row["row"]: row for row in report["rows"]}
    assert len(rows) == 3
    assert not report["failures"]
    for row in rows.values():
        assert len(row["runs"]["before"]) == len(row["runs"]["after"]) == 2
        assert row["cpu"]["low"] <= row["cpu"]["ratio"] <= row["cpu"]["high"]
    assert "| ds[i]: ParquetDataset" in (tmp_path / "compare.md").read_text()
