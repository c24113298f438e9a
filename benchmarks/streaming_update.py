"""Merging a partial re-run of ``streaming_bench.py`` into its earlier full report.

A full run of the streaming driver takes over an hour here. After a change that touches a few
rows (one workload, one shard count, resume latency), ``streaming_bench.py --update PATH``
measures just those, every library side by side in the same run as always, and replaces those
settings in the report at ``PATH``; every other setting keeps the earlier run's numbers. The
report lists each such re-run (``reruns``: when, which settings, how long), and the suite's
page names them, so a reader knows which rows come from which run.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["SHARED", "check_compatible", "merge_rerun", "rerun_settings"]


def rerun_settings(now: dict[str, Any]) -> list[str]:
    """The settings a (partial) report measured, as ``part/case/setting`` names."""
    names: list[str] = []
    for workload, entry in now.get("epoch", {}).items():
        names += [f"epoch/{workload}/{key}" for key in entry["runs"]]
    for shards, entry in now.get("ttfb_by_shards", {}).items():
        names += [f"ttfb/{shards} shards/{key}" for key in entry["runs"]]
    if "resume" in now:
        names += [f"resume/{key}" for key in now["resume"]["runs"]]
    for workload, entry in now.get("s3_cold", {}).items():
        names += [f"s3_cold/{workload}/{key}" for key in entry["runs"]]
    return names


def merge_rerun(earlier: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """``earlier`` with every setting ``now`` measured replaced by ``now``'s.

    A workload, shard count or part ``earlier`` lacks is added whole. Its parameters (sample
    counts, sizes) must match the earlier run's where both have them: a re-run at other sizes
    would mix two workloads in one row.

    Raises:
        ValueError: A re-measured case's parameters, the libraries or the sizes differ from
            the earlier run's.
    """
    check_compatible(earlier, now)
    merged = copy.deepcopy(earlier)
    for part in ("epoch", "ttfb_by_shards", "s3_cold"):
        for case, entry in now.get(part, {}).items():
            into = merged.setdefault(part, {}).get(case)
            if into is None:
                merged[part][case] = copy.deepcopy(entry)
                continue
            _same_params(into, entry, f"{part}/{case}")
            into["runs"].update(copy.deepcopy(entry["runs"]))
    if "resume" in now:
        into = merged.get("resume")
        if into is None:
            merged["resume"] = copy.deepcopy(now["resume"])
        else:
            _same_params(into, now["resume"], "resume")
            into["runs"].update(copy.deepcopy(now["resume"]["runs"]))
    if "ttfb_by_shards" in merged:
        cases = merged["ttfb_by_shards"]
        merged["ttfb"] = cases.get("10000", next(iter(cases.values())))
    measured = rerun_settings(now)
    kept = []  # earlier re-runs, less the settings measured again now
    for rerun in earlier.get("reruns", []):
        left = [name for name in rerun["settings"] if name not in measured]
        if left:
            kept.append({**rerun, "settings": left})
    merged["reruns"] = [
        *kept,
        {"created": now["created"], "wall_seconds": now.get("wall_seconds"), "settings": measured},
    ]
    return merged


#: What a re-run must share with the earlier run for their rows to sit in one table.
SHARED = ("libs", "quick", "issue_sizes", "batch_size", "seed", "timed_epochs", "ttfb_repeats")


def check_compatible(earlier: dict[str, Any], now: dict[str, Any]) -> None:
    """Check ``now``'s settings (its header is enough, before measuring) against ``earlier``'s.

    Raises:
        ValueError: They differ in one of :data:`SHARED`; the message says which.
    """
    for key in SHARED:
        if earlier.get(key) != now.get(key):
            raise ValueError(
                f"{key}: the re-run has {now.get(key)!r}, the earlier run {earlier.get(key)!r}; "
                "re-run with the earlier run's options, or run it whole"
            )


def _same_params(earlier: dict[str, Any], now: dict[str, Any], where: str) -> None:
    before, after = earlier.get("params"), now.get("params")
    if before is not None and after is not None and before != after:
        raise ValueError(
            f"{where}: the re-run's parameters {after} differ from the earlier run's {before}; "
            "re-run at the same sizes (no --quick, the same --issue-sizes), or run it whole"
        )
