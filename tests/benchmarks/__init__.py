"""Smoke tests of the benchmarks, and how they run a benchmark driver beside the reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(driver: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<driver> ARGS`` with the reference venv; fail if the venv is missing.

    The run must succeed: its output is in the assertion message otherwise.
    """
    python = os.environ.get("SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"the benchmark needs the reference venv, and {python} is missing; run "
            f"scripts/setup-ref-venv or set SHARDSTREAM_REF_PYTHON to a python with "
            f"mosaicml-streaming==0.13.0"
        )
    completed = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / driver), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
        env=dict(os.environ, SHARDSTREAM_REF_PYTHON=python),
    )
    assert completed.returncode == 0, f"{completed.stdout}\n{completed.stderr}"
    return completed
