"""The benchmark suite's rows: one per measured quantity, read from each driver's JSON.

``suite.py`` runs the drivers; this module turns what they wrote into :class:`Row` objects,
each with shardstream's value, the best peer's, their ratio, the target and
whether every run behind the row passed its correctness checks (every sample exactly once).
Nothing here measures anything: a row exists only where a driver wrote the numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EXTRACTORS", "NOT_MEASURED", "PEER_NAMES", "TARGETS", "Row", "rows_from"]

#: The targets, as ratios to the best peer on each row.
TARGETS = {
    "iteration": 2.0,  # samples/s, ours / best peer's >= 2
    "ttfb": 0.25,  # seconds, ours / best peer's <= 0.25
    "resume": 0.1,  # seconds, ours / best peer's <= 0.1
    "write": 1.5,  # throughput, ours / best peer's >= 1.5 (Spark: peer seconds / ours)
    "peak_rss": 0.75,  # MiB, ours / best peer's <= 0.75
    "download": 2.0,  # MB/s, the download benchmark's own target (performance issue)
}
#: What each driver calls the peers, as the table shows them.
PEER_NAMES = {"reference": "mosaicml-streaming", "litdata": "litdata"}

#: Rows the targets ask for and no driver produces yet, with the reason.
NOT_MEASURED: list[tuple[str, str]] = []


@dataclass
class Row:
    """One measured quantity: shardstream's value beside each peer's.

    ``higher_is_better``: samples/s, MB/s (else seconds, MiB). ``speedup``: for a
    lower-is-better value, report the ratio as peer / ours (so > 1 is better, as for rates).
    The ratio is taken against the best peer: the largest value when higher is better, else
    the smallest. ``peer_failures``: the peers that crashed on this row, with their error (they
    have no value in ``peers``).
    """

    workload: str
    metric: str
    unit: str
    ours: float | None
    peers: dict[str, float] = field(default_factory=dict)
    higher_is_better: bool = True
    speedup: bool = False
    target: float | None = None
    checks_passed: bool | None = None
    source: str = ""
    note: str = ""
    peer_failures: dict[str, str] = field(default_factory=dict)

    @property
    def best_peer(self) -> str | None:
        """The peer with the best value: the largest if higher is better, else the smallest."""
        if not self.peers:
            return None
        pick = max if self.higher_is_better else min
        return pick(self.peers, key=lambda name: self.peers[name])

    @property
    def ratio(self) -> float | None:
        """Ours / best peer (best peer / ours for a speedup); None without both values."""
        best = self.best_peer
        if best is None or self.ours is None:
            return None
        theirs = self.peers[best]
        numerator, denominator = (
            (theirs, self.ours)
            if self.speedup and not self.higher_is_better
            else (self.ours, theirs)
        )
        return numerator / denominator if denominator else None

    @property
    def target_op(self) -> str:
        """``>=`` when a larger ratio is better, else ``<=``."""
        return ">=" if self.higher_is_better or self.speedup else "<="

    @property
    def met(self) -> bool | None:
        """Whether the target is met; None when there is no target or no ratio."""
        ratio = self.ratio
        if self.target is None or ratio is None:
            return None
        return ratio >= self.target if self.target_op == ">=" else ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        """The row and what follows from it (best peer, ratio, met) as JSON-ready values."""
        out = asdict(self)
        out.update(
            best_peer=self.best_peer,
            ratio=self.ratio,
            target_op=self.target_op,
            met=self.met,
        )
        return out


def _write_rows(report: dict[str, Any]) -> list[Row]:
    """format_bench.py: MDS write throughput (samples / best write seconds), vs the reference."""
    rows = []
    for name, workload in report.get("workloads", {}).items():
        samples = workload["params"]["samples"]
        ours = workload["shardstream"]["write_seconds"]["best"]
        ref = workload["reference"]["write_seconds"]["best"]
        passed = workload["comparison"]["checks_passed"]
        rows.append(
            Row(
                name, "MDS write", "samples/s", samples / ours, {"reference": samples / ref},
                target=TARGETS["write"], checks_passed=passed, source="format",
            )
        )  # fmt: skip
        rows.append(
            Row(
                name, "random-access read ds[i]", "samples/s",
                workload["shardstream"]["read_samples_per_s"]["best"],
                {"reference": workload["reference"]["read_samples_per_s"]["best"]},
                checks_passed=passed, source="format",
                note="format_bench.py's own target: >= 10x",
            )
        )  # fmt: skip
    return rows


def _spark_rows(report: dict[str, Any]) -> list[Row]:
    """spark_bench.py: dataframe_to_mds wall seconds, best of the repeats."""
    rows = []
    for name, workload in report.get("workloads", {}).items():
        for compression in workload["comparison"]:
            ours = workload["shardstream"]["runs"][compression]["seconds"]["best"]
            ref = workload["reference"]["runs"][compression]["seconds"]["best"]
            check = workload["checks"]["compressions"][compression]
            passed = bool(
                workload["checks"]["same_input_data"]
                and check["shardstream"]["passed"]
                and check["reference"]["passed"]
                and check["same_samples"]
            )
            rows.append(
                Row(
                    f"spark {name}", f"Spark conversion ({compression})", "s", ours,
                    {"reference": ref}, higher_is_better=False, speedup=True,
                    target=TARGETS["write"], checks_passed=passed, source="spark",
                )
            )  # fmt: skip
    return rows


def _peers(
    setting: dict[str, Any], value: Callable[[dict[str, Any]], float | None]
) -> dict[str, float]:
    found = {}
    for peer in PEER_NAMES:
        if peer in setting:
            number = value(setting[peer])
            if number is not None:
                found[peer] = number
    return found


def _largest_process(side: dict[str, Any]) -> float:
    """The peak RSS (VmHWM) of the largest process of a run: the main one or a worker."""
    memory = side["memory"]
    return float(max(memory["main"]["vmhwm_mib"], memory["worker_vmhwm_mib_max"] or 0.0))


def _streaming_rows(report: dict[str, Any]) -> list[Row]:
    """streaming_bench.py: warm epochs, peak RSS, and cold time to first batch per shard count."""
    rows = _epoch_rows(report)
    cases = report.get("ttfb_by_shards") or ({"": report["ttfb"]} if "ttfb" in report else {})
    for case in cases.values():
        for key, setting in case["runs"].items():
            if "shardstream" not in setting:
                continue
            passed = all(
                setting[lib]["checks_passed"]
                for lib in ("shardstream", *PEER_NAMES)
                if lib in setting
            )
            rows.append(
                Row(
                    f"{case['shards']:,} shards, {key.replace('=', ' ')}",
                    "time to first batch (cold)", "s",
                    setting["shardstream"]["cold_seconds"]["best"],
                    _peers(setting, lambda side: side["cold_seconds"]["best"]),
                    higher_is_better=False, target=TARGETS["ttfb"], checks_passed=passed,
                    source="streaming",
                )
            )  # fmt: skip
    for key, setting in report.get("resume", {}).get("runs", {}).items():
        if "shardstream" not in setting:
            continue
        rows.append(
            Row(
                f"small-1KiB at 50%, {key.replace('=', ' ')}", "resume latency", "s",
                setting["shardstream"]["resume_seconds"]["best"],
                _peers(setting, lambda side: side["resume_seconds"]["best"]),
                higher_is_better=False, target=TARGETS["resume"],
                checks_passed=all(
                    setting[lib]["checks_passed"] for lib in ("shardstream", *PEER_NAMES)
                    if lib in setting
                ),
                source="streaming", note="load_state_dict to the first batch, warm cache",
            )
        )  # fmt: skip
    for name, workload in report.get("s3_cold", {}).items():
        for key, setting in workload["runs"].items():
            if "shardstream" not in setting:
                continue
            ran = {lib: side for lib, side in setting.items() if "failed" not in side}
            failed = {lib: side["failed"] for lib, side in setting.items() if "failed" in side}
            rows.append(
                Row(
                    f"{name}, {key.replace('=', ' ')}", "cold iteration from local S3",
                    "samples/s", setting["shardstream"]["cold_samples_per_s"],
                    _peers(ran, lambda side: side["cold_samples_per_s"]),
                    target=TARGETS["iteration"], checks_passed=all(
                        side["checks_passed"] for side in ran.values()
                    ),
                    source="streaming",
                    note="; ".join(
                        ["SeaweedFS on 127.0.0.1, empty cache; no litdata"]
                        + [f"{lib} failed: {error}" for lib, error in failed.items()]
                    ),
                    peer_failures=failed,
                )
            )  # fmt: skip
    return rows


def _epoch_rows(report: dict[str, Any], sizes: bool = False) -> list[Row]:
    """Warm-epoch speed and peak RSS rows of a streaming_bench.py report.

    ``sizes``: name each workload with its sample count (the run at the full-scale sizes).
    """
    source = "streaming_issue" if sizes else "streaming"
    rows = []
    for name, workload in report.get("epoch", {}).items():
        for key, setting in workload["runs"].items():
            if "shardstream" not in setting:
                continue
            ours = setting["shardstream"]
            passed = all(
                setting[lib]["checks_passed"]
                for lib in ("shardstream", *PEER_NAMES)
                if lib in setting
            )
            label = f"{name}, {key.replace('=', ' ')}"
            if sizes:
                label = f"{name} x {workload['params']['samples']:,}, {key.replace('=', ' ')}"
            rows.append(
                Row(
                    label, "warm-cache iteration", "samples/s", ours["samples_per_s"]["best"],
                    _peers(setting, lambda side: side["samples_per_s"]["best"]),
                    target=TARGETS["iteration"], checks_passed=passed, source=source,
                )
            )  # fmt: skip
            if "shuffle=off" in key:
                continue  # peak RSS: once per workload and worker count
            rows.append(
                Row(
                    label, "peak RSS per process (largest)", "MiB", _largest_process(ours),
                    _peers(setting, _largest_process), higher_is_better=False,
                    target=TARGETS["peak_rss"], checks_passed=passed, source=source,
                    note="VmHWM: mapped shard pages count (shards of samples under 32 KiB)",
                )
            )  # fmt: skip
    return rows


def _download_rows(report: dict[str, Any]) -> list[Row]:
    """download_bench.py: shard downloads from SeaweedFS, MB/s of the best pass."""
    rows = []
    for name, workload in report.get("workloads", {}).items():
        sides = workload["sides"]
        rows.append(
            Row(
                f"S3 {name}", "shard download", "MB/s", sides["shardstream"]["mb_per_s"]["best"],
                {"reference": sides["reference"]["mb_per_s"]["best"]},
                target=TARGETS["download"],
                checks_passed=all(side["checks"]["passed"] for side in sides.values()),
                source="download", note="files checked by size and sha256",
            )
        )  # fmt: skip
    return rows


def _sampling_rows(report: dict[str, Any]) -> list[Row]:
    """sampling_bench.py: one worker's epoch plan beside the reference's whole-epoch plan."""
    if "shardstream" not in report:
        return []
    ours, ref = report["shardstream"], report["reference"]
    label = f"{report['samples']:,} samples, {report['algo']}, 8x8x8"
    return [
        Row(label, "epoch plan", "s", ours["seconds"], {"reference": ref["seconds"]},
            higher_is_better=False, speedup=True, source="sampling",
            note="the sampling target: < 2 s"),
        Row(label, "epoch plan peak RSS", "MiB", ours["peak_rss_mib"],
            {"reference": ref["peak_rss_mib"]}, higher_is_better=False, source="sampling"),
    ]  # fmt: skip


def _parquet_rows(report: dict[str, Any]) -> list[Row]:
    """parquet_bench.py: Parquet read in place (no peer: the MDS copy is in the JSON)."""
    rows = []
    for name, result in report.get("results", {}).items():
        if not name.startswith("parquet"):
            continue
        rows.append(
            Row(
                f"{name} ({report['rows']:,} rows)", "Parquet iteration", "samples/s",
                result["best_samples_per_s"], checks_passed=result["checks_passed"],
                source="parquet", note="no peer reads Parquet in place",
            )
        )  # fmt: skip
    return rows


def _delta_rows(report: dict[str, Any]) -> list[Row]:
    """delta_bench.py: a Delta version streamed in place, beside Spark's read -> toPandas."""
    results = report.get("results", {})
    delta = results.get("delta")
    if delta is None:
        return []
    spark = results.get("spark")
    label = f"delta table ({report['rows']:,} rows)"
    note = "peer: spark.read.parquet of the version's files -> toPandas -> torch"
    return [
        Row(label, "Delta iteration, workers 0", "samples/s", delta["rows_per_s"],
            {} if spark is None else {"spark toPandas": spark["topandas_rows_per_s"]},
            checks_passed=delta["checks_passed"], source="delta", note=note),
        Row(label, "Delta first batch", "s", delta["first_batch_s"],
            {} if spark is None else {"spark toPandas": spark["topandas_first_batch_s"]},
            higher_is_better=False, speedup=True, checks_passed=delta["checks_passed"],
            source="delta", note=note + " (Spark session start not counted)"),
        Row(label, "Delta resume, first batch", "s", delta["resume_first_batch_s"],
            higher_is_better=False, checks_passed=delta["resume_checks_passed"],
            source="delta", note="no peer resumes a Delta version mid-epoch"),
    ]  # fmt: skip


def _tables_rows(report: dict[str, Any]) -> list[Row]:
    """tables_bench.py: Parquet and Delta beside pyarrow's to_batches -> torch (the floor)."""
    rows = []
    for name, result in report.get("results", {}).items():
        table, kind, batch = name.split("/")
        label = f"{table} {kind}, batch {batch} ({report['rows']:,} rows)"
        unshuffled, shuffled = result["unshuffled"], result["shuffled"]
        rows += [
            Row(label, "table iteration, unshuffled", "samples/s", unshuffled["rows_per_s"],
                {"pyarrow to_batches": result["floor"]["rows_per_s"]}, target=0.8,
                checks_passed=unshuffled["checks_passed"] and result["floor"]["checks_passed"],
                source="tables", note="peer: the floor, pyarrow's own reader -> torch"),
            Row(label, "table iteration, shuffled", "samples/s", shuffled["rows_per_s"],
                {"shardstream unshuffled": unshuffled["rows_per_s"]}, target=0.5,
                checks_passed=shuffled["checks_passed"], source="tables",
                note="peer: the same table unshuffled (target: within 2x)"),
        ]  # fmt: skip
    return rows


def _shuffle_rows(report: dict[str, Any]) -> list[Row]:
    """shuffle_quality.py: simulated shard downloads per node, py1s and py1e (LRU of 64)."""
    rows = []
    capacities = [str(c) for c in report.get("capacities", [])]
    capacity = "64" if "64" in capacities else (capacities[0] if capacities else "")
    for result in report.get("results", []):
        if result["label"].split()[0] not in ("py1s", "py1e"):
            continue
        rows.append(
            Row(
                f"{result['label']}, LRU {capacity} shards", "downloads per node (simulated)",
                "shards", result["downloads"][capacity], higher_is_better=False,
                source="shuffle", note=f"minimum {result['min_downloads']:,.0f}",
            )
        )  # fmt: skip
    return rows


def _node_bytes_rows(report: dict[str, Any]) -> list[Row]:
    """node_bytes_bench.py: bytes downloaded per simulated node, beside the reference."""
    rows = []
    params = report.get("params", {})
    for case, run in report.get("runs", {}).items():
        ours = run.get("shardstream")
        if ours is None:
            continue
        theirs = run.get("reference")
        peers = {} if theirs is None else {"reference": theirs["bytes_per_node"] / 2**20}
        passed = all(side["checks_passed"] for side in (ours, theirs) if side is not None)
        rows.append(
            Row(
                f"{case}, {params.get('nodes', '?')} nodes", "bytes downloaded per node", "MiB",
                ours["bytes_per_node"] / 2**20, peers, higher_is_better=False, speedup=True,
                checks_passed=passed, source="node_bytes",
                note=f"minimum {ours['minimum_bytes_per_node'] / 2**20:.1f} MiB (each shard the "
                f"node reads, once)",
            )
        )  # fmt: skip
    return rows


#: driver name -> the function that reads its JSON.
EXTRACTORS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "format": _write_rows,
    "spark": _spark_rows,
    "streaming": _streaming_rows,
    "download": _download_rows,
    "sampling": _sampling_rows,
    "parquet": _parquet_rows,
    "delta": _delta_rows,
    "tables": _tables_rows,
    "shuffle": _shuffle_rows,
    "node_bytes": _node_bytes_rows,
    "streaming_issue": functools.partial(_epoch_rows, sizes=True),
}


def rows_from(driver: str, report: dict[str, Any]) -> list[Row]:
    """The rows of one driver's JSON report."""
    return EXTRACTORS[driver](report)
