"""The table of ``wan_bench.py`` and its section of ``docs/benchmarks.md``.

Targets: a cold epoch at >= 85% of the link's capacity and at least as fast
as every peer; a cold first batch in at most half litdata's time and a tenth of
mosaicml-streaming's (the link's floor, four round trips plus the first shard's bytes, is
reported beside it); one 64 MiB shard at >= 85% of the link. Resume from an empty cache has
no target of its own: it is reported beside the peer. Each cold-epoch row also gives
shardstream's fraction of the ceiling, AWS's ``s3torchconnector`` reading the same objects raw
(``wan_ceiling.py``): its seconds over shardstream's, as both move the same bytes.
"""

from __future__ import annotations

from typing import Any

from benchmarks.wan_ceiling import CEILING

__all__ = ["BEGIN", "END", "docs_section", "replace_section", "table_rows"]

BEGIN = "<!-- wan-link: begin (benchmarks/wan_bench.py --docs writes this part) -->"
END = "<!-- wan-link: end -->"
PEERS = ("reference", "litdata")
LINK_TARGET = 0.85
SPEEDUP_TARGET = 1.0
FIRST_BATCH_TARGETS = {"litdata": 0.5, "reference": 0.1}  # at most this share of each's time


def _best_peer(setting: dict[str, Any]) -> tuple[str, float] | None:
    """The fastest peer that returned every sample right (a wrong answer's time counts not)."""
    found = [
        (lib, setting[lib]["seconds"])
        for lib in PEERS
        if "seconds" in setting.get(lib, {}) and setting[lib].get("checks_passed", True)
    ]
    return min(found, key=lambda item: item[1]) if found else None


def _row(
    name: str, metric: str, setting: dict[str, Any], limit: float, kind: str
) -> dict[str, Any]:
    """One row: shardstream's seconds, the best peer's, the ratio, the link's share, targets."""
    ours = setting["shardstream"]
    seconds = ours["seconds"]
    peer = _best_peer(setting)
    fraction = limit / seconds
    row: dict[str, Any] = {
        "row": name, "metric": metric, "seconds": seconds, "limit_seconds": limit,
        "fraction_of_link": fraction, "peer": peer[0] if peer else None,
        "peer_seconds": peer[1] if peer else None,
        "base_seconds": setting.get("shardstream@base", {}).get("seconds"),
        "checks_passed": all(
            side.get("checks_passed", True)
            for lib, side in setting.items()
            if lib.startswith("shardstream")
        ),
        "proxy_cpu_share": ours["link"]["proxy_cpu_seconds"]
        / max(ours["link"]["wall_seconds"], 1e-9),
        "bytes_down": ours["link"]["bytes_down"],
        "ceiling_seconds": None, "of_ceiling": None,
    }  # fmt: skip
    ceiling = setting.get(CEILING, {})
    if kind == "throughput" and "seconds" in ceiling and ceiling.get("checks_passed", True):
        row["ceiling_seconds"] = ceiling["seconds"]
        row["of_ceiling"] = ceiling["seconds"] / seconds  # the same bytes: a share of its speed
    failed = [f"{lib}: {side['failed']}" for lib, side in setting.items() if "failed" in side]
    failed += [
        f"{lib}: returned wrong samples (its checks failed)"
        for lib, side in setting.items()
        if lib in (*PEERS, CEILING) and side.get("checks_passed") is False
    ]
    row["peer_failures"] = failed
    if kind == "throughput":  # ratio: how many times faster than the best peer
        row["ratio"] = peer[1] / seconds if peer else None
        row["targets"] = f">= {SPEEDUP_TARGET:g}x, >= {LINK_TARGET:.0%}"
        met = fraction >= LINK_TARGET and (row["ratio"] is None or row["ratio"] >= SPEEDUP_TARGET)
    elif kind == "download":
        row["ratio"] = peer[1] / seconds if peer else None
        row["targets"] = f">= {LINK_TARGET:.0%}"
        met = fraction >= LINK_TARGET
    elif kind == "latency":  # ratio: shardstream's time over the best peer's
        row["ratio"] = seconds / peer[1] if peer else None
        row["ratios"] = {
            lib: seconds / setting[lib]["seconds"]
            for lib in FIRST_BATCH_TARGETS
            if "seconds" in setting.get(lib, {}) and setting[lib].get("checks_passed", True)
        }
        row["targets"] = ", ".join(f"<= {t:g}x {lib}" for lib, t in FIRST_BATCH_TARGETS.items())
        met = all(row["ratios"][lib] <= FIRST_BATCH_TARGETS[lib] for lib in row["ratios"])
        met = met if row["ratios"] else None
    else:
        row["ratio"] = seconds / peer[1] if peer else None
        row["targets"] = "-"
        met = None
    row["met"] = met
    return row


def collect(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of a ``wan_bench.py`` report, in the table's order."""
    rows = []
    for name, workload in report.get("cold_epoch", {}).items():
        samples = workload["params"]["samples"]
        for key, setting in workload["runs"].items():
            workers = key.split("=")[1]
            rows.append(_row(f"{name} x {samples:,}, workers {workers}", "cold epoch, s",
                             setting, workload["limit_seconds"], "throughput"))  # fmt: skip
    for entry in report.get("first_batch", {}).values():
        for key, setting in entry["runs"].items():
            name = f"{entry['shards']:,} shards"
            rows.append(_row(f"{name}, workers {key.split('=')[1]}", "first batch (cold), s",
                             setting, entry["limit_seconds"], "latency"))  # fmt: skip
    if "download" in report:
        entry = report["download"]
        rows.append(_row(f"one {entry['bytes'] / 2**20:g} MiB shard", "download, s",
                         entry["runs"], entry["limit_seconds"], "download"))  # fmt: skip
    if "resume" in report:
        entry = report["resume"]
        for key, setting in entry["runs"].items():
            name = f"small-1KiB at 50%, workers {key.split('=')[1]}"
            metric = "resume, empty cache, s"
            rows.append(_row(name, metric, setting, entry["limit_seconds"], "other"))
    return rows


def _fmt(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table_rows(report: dict[str, Any]) -> dict[str, Any]:
    """``{"rows": [...], "table": text rows for format_table, "checks_passed": bool}``."""
    rows = collect(report)
    base = any(row["base_seconds"] is not None for row in rows)
    ceiling = any(row["ceiling_seconds"] is not None for row in rows)
    header = [
        "workload", "metric", "shardstream", *(["before"] if base else []), "best peer",
        "ratio", "link limit", "of link", *([f"{CEILING}", f"of {CEILING}"] if ceiling else []),
        "proxy CPU", "targets", "result", "checks",
    ]  # fmt: skip
    table = [header]
    for row in rows:
        peer = "-" if row["peer"] is None else f"{row['peer_seconds']:.3f} ({row['peer']})"
        if row["peer"] is None and any(
            not text.startswith(f"{CEILING}:") for text in row["peer_failures"]
        ):
            peer = "failed"
        result = {True: "met", False: "MISSED", None: "-"}[row["met"]]
        table.append([
            row["row"], row["metric"], f"{row['seconds']:.3f}",
            *([_fmt(row["base_seconds"])] if base else []), peer, _fmt(row["ratio"], ".2f", "x"),
            f"{row['limit_seconds']:.3f}", f"{row['fraction_of_link']:.0%}",
            *([_fmt(row["ceiling_seconds"]), _fmt(row["of_ceiling"], ".0%")] if ceiling else []),
            f"{row['proxy_cpu_share']:.0%}", row["targets"], result,
            "PASS" if row["checks_passed"] else "FAIL",
        ])  # fmt: skip
    return {"rows": rows, "table": table, "checks_passed": all(r["checks_passed"] for r in rows)}


def docs_section(report: dict[str, Any], notes: str = "") -> str:
    """The page's WAN section: how to rerun it, the link, the table."""
    from benchmarks.report import format_table

    settings = report["settings"]
    lines = [
        BEGIN,
        "",
        f"Generated by `benchmarks/wan_bench.py` on {report['started']}"
        f"{' (--quick)' if report['quick'] else ''}: `{report['command']}`.",
        "",
        f"Link: {settings['latency_ms']:g} +- {settings['jitter_ms']:g} ms to each response's "
        f"first byte, {settings['connection_mb_per_s']:g} MB/s a connection, "
        f"{settings['link_mb_per_s']:g} MB/s the whole link (`benchmarks/wan_link.py`).",
        "",
    ]
    link = report.get("link")
    if link:
        lines += ["| path | small GET, ms | one connection, MB/s | eight connections, MB/s "
                  "| proxy CPU, s |", "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for name in ("direct", "unshaped", "shaped"):
            probe = link[name]
            lines.append(f"| {name} | {probe['small_get_ms']:.1f} | "
                         f"{_rate(probe, 'one_connection')} | "
                         f"{_rate(probe, 'eight_connections')} | "
                         f"{_fmt(probe.get('proxy_cpu_seconds'), '.2f')} |")  # fmt: skip
        lines += [
            "",
            "(MB/s after the first byte: all of it, the middle 80% of the bytes, "
            "the most in any 50 ms window as seen by the client; `wan_probe.py`.)",
            "",
        ]
    rows = table_rows(report)
    lines += ["```", format_table(rows["table"]), "```", ""]
    failures = [
        f"- {row['row']}, {row['metric']}: {text}"
        for row in rows["rows"]
        for text in row["peer_failures"]
    ]
    if failures:
        lines += ["Peers or ceiling that failed, or returned wrong samples (not counted):", ""]
        lines += [*failures, ""]
    if notes:
        lines += [notes.strip(), ""]
    lines.append(END)
    return "\n".join(lines)


def _rate(probe: dict[str, Any], name: str) -> str:
    """``all / middle / peak`` MB/s of a probe (an older report has the first alone)."""
    found = [probe.get(f"{name}{part}_mb_per_s") for part in ("", "_middle", "_peak")]
    return " / ".join(f"{value:,.0f}" for value in found if value is not None) or "-"


HEADING = "## Over an emulated WAN link"


def replace_section(page: str, section: str) -> str:
    """``page`` with its WAN section replaced by ``section`` (appended if it has none).

    Appended, it lies among the page's hand-written notes, which ``suite.py`` keeps.
    """
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + section + tail
    return page.rstrip("\n") + f"\n\n{HEADING}\n\n" + section + "\n"
