"""Petastorm's three converter workflows, run as a user runs examples/petastorm.

Each workflow runs the example script in a process of its own (its own local Spark on
127.0.0.1) and reports what it read; the test checks every row was read and the model learned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("loopback_only")]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "petastorm" / "petastorm_workflows.py"
ROWS = 600


def run(workflow: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    report = tmp_path / f"{workflow}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run(
        [sys.executable, str(SCRIPT), workflow, "--rows", str(ROWS), "--cache",
         str(tmp_path / "cache"), "--report", str(report), *args],
        check=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(report.read_text())
    assert result["rows"] == ROWS
    return result


def test_single_node_torch(tmp_path: Path):
    result = run("torch", tmp_path, "--epochs", "2")
    assert Counter(result["ids"]) == dict.fromkeys(range(ROWS), 2)  # each row once an epoch
    assert result["loss"] < result["first_epoch_loss"] or result["loss"] < 0.3


def test_single_node_keras(tmp_path: Path):
    result = run("keras", tmp_path, "--epochs", "3")
    assert result["losses"][-1] < result["losses"][0]
    assert result["accuracy"] > 0.7


def test_hyperopt_spark_trials_read_in_spark_tasks(tmp_path: Path):
    result = run("hyperopt", tmp_path, "--trials", "2")
    assert [trial["status"] for trial in result["results"]] == ["ok", "ok"]
    for trial in result["results"]:
        assert trial["pid"] != result["driver_pid"]  # read inside a Spark task
        assert trial["rows"] == trial["distinct"] == ROWS
    assert 0.01 <= result["best"]["lr"] <= 1.0


def test_torch_distributor_ranks_share_the_rows(tmp_path: Path):
    result = run("distributor", tmp_path, "--epochs", "1")
    ranks = result["ranks"]
    assert [rank["rank"] for rank in ranks] == [0, 1]
    assert ranks[0]["steps"] == ranks[1]["steps"]  # even_batches: no rank waits on another
    ids = ranks[0]["ids"] + ranks[1]["ids"]
    assert set(ids) == set(range(ROWS))
    assert len(ids) - ROWS == -ROWS % 2  # repeats only to make the ranks equal


def test_parquet_through_make_batch_reader(tmp_path: Path):
    result = run("batch-reader", tmp_path, "--epochs", "2")
    assert Counter(result["ids"]) == dict.fromkeys(range(ROWS), 2)  # each row once an epoch
    assert result["last_loss"] < result["first_loss"]
