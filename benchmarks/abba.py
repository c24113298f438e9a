"""Comparing two source trees on a shared machine: the method every tree comparison uses.

``docs/benchmarks.md`` ("Comparing two trees on this VM") gives the traps and the method; this
module is its one implementation, used by ``compare_trees.py``, ``getitem_bench.py`` and
``tables_bench.py --baseline-src``:

* :func:`copy_trees`: both trees' ``src`` copied under one scratch folder in ``/tmp`` (where a
  tree lives moved rows by 10-30%);
* :func:`tree_env`: the environment of a measured process: ``PYTHONPATH`` at one tree, and
  glibc's heap kept from giving its top back at each free (a process's heap decided its speed
  for its whole life);
* :func:`pinned`: a command pinned to one core with ``taskset``;
* :func:`abba`: the order of the runs, before, after, after, before, round after round;
* :func:`compare`: the runs paired within their round (each before with the after next to it),
  the median over pairs of after's figure over before's, and a bootstrap 95% interval of that
  median; :func:`verdict` reads it against a tolerance.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for benchmarks.report

from benchmarks.report import worker_env

__all__ = [
    "HEAP_ENV",
    "TREES",
    "Comparison",
    "abba",
    "compare",
    "copy_trees",
    "pinned",
    "tree_env",
    "verdict",
]

#: The two trees, in the order their runs open a round.
TREES = ("before", "after")
#: glibc's heap settings of every measured process (``docs/troubleshooting.md``): batches'
#: buffers are not returned to the system at each free and faulted in again.
HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "268435456"}
#: The core 0-worker runs are pinned to.
CORE = "1"


def copy_trees(sources: dict[str, str], scratch: Path) -> dict[str, str]:
    """Each tree's ``src`` folder copied to ``scratch/<name>/src``; the copies' paths.

    Copies, not the trees in place, so both sit side by side under one folder of ``/tmp``,
    their paths of the same length; byte code is left behind.
    """
    copies = {}
    for name, source in sources.items():
        target = scratch / name / "src"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        copies[name] = str(target)
    return copies


def tree_env(src: str, **extra: str) -> dict[str, str]:
    """The environment of a process measuring the tree at ``src`` (the benchmarks importable)."""
    path = os.pathsep.join([src, str(Path(__file__).resolve().parent.parent)])
    return worker_env(PYTHONPATH=path, PYTHONHASHSEED="0", **HEAP_ENV, **extra)


def pinned(command: list[str]) -> list[str]:
    """``command`` run on one core (``taskset``), where the machine has ``taskset``."""
    taskset = shutil.which("taskset")
    return [taskset, "-c", CORE, *command] if taskset else command


def abba(rounds: int) -> list[tuple[int, str]]:
    """``(round, tree)`` in run order: before, after, after, before in each round."""
    order = [TREES[0], TREES[1], TREES[1], TREES[0]]
    return [(number, tree) for number in range(rounds) for tree in order]


@dataclass(frozen=True)
class Comparison:
    """After's figure over before's (a time: below 1 is faster), over paired runs."""

    ratio: float  # the median over pairs
    low: float  # the bootstrap 95% interval of that median
    high: float
    pairs: int

    def as_dict(self) -> dict[str, float]:
        """The fields, for a JSON report."""
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "pairs": self.pairs}


def compare(
    before: Sequence[float], after: Sequence[float], *, resamples: int = 4000, seed: int = 43
) -> Comparison:
    """Pair the runs in order (``abba`` gives each round two of each), and compare.

    The i-th before run is paired with the i-th after run: in a round B1 A1 A2 B2, B1 with A1
    (neighbours) and B2 with A2 (neighbours), so a slow spell of the machine falls on both
    sides of a pair. The interval resamples the pairs' ratios (percentile bootstrap).
    """
    ratios = [a / b for b, a in zip(before, after, strict=False) if b > 0]
    if not ratios:
        raise ValueError("no pairs of runs to compare")
    rng = random.Random(seed)
    medians = sorted(
        statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples)
    )
    low = medians[int(0.025 * (resamples - 1))]
    high = medians[int(0.975 * (resamples - 1))]
    return Comparison(statistics.median(ratios), low, high, len(ratios))


def verdict(comparison: Comparison, tolerance: float = 0.05) -> str:
    """What ``comparison`` says of after against before, at ``tolerance``.

    ``faster`` (the interval below 1), ``within 5%`` (the median at most 1 + tolerance) or
    ``SLOWER``; ``?`` marks a verdict whose interval crosses 1 + tolerance.
    """
    limit = 1 + tolerance
    if comparison.high < 1:
        return "faster"
    word = "SLOWER" if comparison.ratio > limit else f"within {tolerance:.0%}"
    return word + ("?" if comparison.low <= limit < comparison.high else "")
