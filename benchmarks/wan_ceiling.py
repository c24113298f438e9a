"""The cold-epoch rows' ceiling: AWS's ``s3torchconnector`` reading the same objects raw.

``wan_bench.py`` runs ``s3torch_worker.py`` (under the reference venv) over each workload's
uploaded MDS objects, through the link, with 0 and 2 DataLoader workers like the other
libraries. It reads every object whole and decodes nothing, so its seconds are what a Python
reader of S3 needs to move those bytes: ``wan_report.py`` gives shardstream's fraction of it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CEILING", "best_of", "ceiling_run", "object_sizes"]

HERE = Path(__file__).resolve().parent
#: The ceiling's name in the report's settings, beside the libraries.
CEILING = "s3torch"


def object_sizes(folder: str, remote: str) -> dict[str, int]:
    """``{key: size}`` of the objects ``folder`` became once uploaded to ``remote``."""
    prefix = remote.split("/", 3)[3]
    return {
        f"{prefix}/{os.path.relpath(os.path.join(parent, name), folder)}": os.path.getsize(
            os.path.join(parent, name)
        )
        for parent, _, names in os.walk(folder)
        for name in names
    }


def ceiling_run(
    python: str,
    remote: str,
    endpoint: str,
    manifest: dict[str, int],
    workers: int,
    folder: str,
    timeout: float,
    measured: Callable[..., tuple[Any, dict[str, float]]],
) -> dict[str, Any]:
    """One cold read of ``remote``'s objects by ``s3torchconnector`` through ``endpoint``.

    ``measured(call, *args)`` runs the worker and returns ``(its CompletedProcess, what
    crossed the link)``. Returns the row's entry: ``seconds``, ``mb_per_s``, ``cpu_seconds``,
    ``checks_passed`` and ``link``; or ``{"failed": ...}``.
    """
    os.makedirs(folder, exist_ok=True)
    sizes = os.path.join(folder, "manifest.json")
    with open(sizes, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    result_path = os.path.join(folder, f"s3torch-{workers}.json")
    command = [python, str(HERE / "s3torch_worker.py"), "--uri", remote.rstrip("/") + "/",
               "--endpoint", endpoint, "--manifest", sizes, "--workers", str(workers),
               "--result", result_path]  # fmt: skip
    completed, moved = measured(
        subprocess.run, command, capture_output=True, text=True, check=False, timeout=timeout
    )
    if completed.returncode != 0 or not os.path.exists(result_path):
        lines = [line for line in completed.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        return {"failed": (errors or lines or ["(no output)"])[-1].strip()[:300]}
    with open(result_path, encoding="utf-8") as handle:
        found: dict[str, Any] = json.load(handle)
    return {
        "seconds": found["seconds"], "mb_per_s": found["mb_per_s"],
        "cpu_seconds": found["cpu_seconds"], "bytes": found["bytes"],
        "checks_passed": found["checks_passed"], "checks": found["checks"], "link": moved,
        "version": found["version"],
    }  # fmt: skip


def best_of(
    repeats: int, limit: float, workers: int, run_once: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """The fastest of ``repeats`` runs of ``run_once`` (a failure ends them).

    With its share of the link: ``limit`` is the seconds the bytes take at the link's rate.
    """
    best: dict[str, Any] = {}
    for _ in range(repeats):
        run = run_once()
        if "failed" in run:
            best = run
            break
        if run["seconds"] < best.get("seconds", float("inf")):
            best = {**run, "fraction_of_link": limit / run["seconds"]}
    said = (
        f"{best['seconds']:.2f} s, {best['mb_per_s']:,.0f} MB/s raw"
        if "seconds" in best
        else f"FAILED {best}"
    )
    print(f"  workers={workers} {CEILING}: {said}", flush=True)
    return best
