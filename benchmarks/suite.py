"""The benchmark suite: every driver in one command, one table, one JSON, one plot, the docs.

Usage::

    .venv/bin/python benchmarks/suite.py [--quick] [--only NAME ...] [--out-dir benchmarks/results]
    .venv/bin/python benchmarks/suite.py --merge-only     # re-merge the drivers' JSON in --out-dir

Runs the drivers one after another, each in its own process (``format``, ``sampling``,
``shuffle``, ``node_bytes``, ``parquet``, ``delta``, ``tables``, ``download``, ``streaming``,
``streaming_issue`` (the epochs again at the full-scale sizes: 1M samples of 1 KiB, 20k of
~100 KiB), ``spark``); each writes its JSON into ``--out-dir``. Then the rows of every JSON
(``suite_rows.py``) become one table: workload, metric, shardstream, the best peer, the
ratio, the target, MET / MISSED, and whether every run behind the row passed its
exactly-once checks. Writes ``suite.json`` (the machine, the library versions of both venvs,
every row, every driver's JSON embedded), ``suite.png`` (the ratios against their targets)
and ``docs/benchmarks.md``, where each missed target comes with the reason
``suite_limits.py`` records for its kind of row.
See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # for benchmarks.report and benchmarks.suite_rows

from benchmarks.report import format_table, machine, package_versions  # noqa: E402
from benchmarks.suite_limits import LIMITS_SECTION, limit_of  # noqa: E402
from benchmarks.suite_rows import NOT_MEASURED, PEER_NAMES, Row, rows_from  # noqa: E402

OURS_PACKAGES = ["shardstream", "numpy", "torch", "pyarrow", "matplotlib"]
REF_PACKAGES = ["mosaicml-streaming", "litdata", "pyspark", "numpy", "torch", "pyarrow"]


@dataclass(frozen=True)
class Driver:
    """One benchmark driver as the suite runs it."""

    name: str
    script: str
    args: tuple[str, ...]  # always given
    quick_args: tuple[str, ...]  # added by --quick
    full_minutes: float  # expected duration at full size on the project's 2-core machine

    def command(self, out: Path, quick: bool) -> list[str]:
        """The driver's command line, its JSON going to ``out``."""
        extra = self.quick_args if quick else ()
        return [sys.executable, str(HERE / self.script), *self.args, *extra, "--out", str(out)]


DRIVERS = [
    Driver(
        "format",
        "format_bench.py",
        ("--workload", "small-1KiB", "--workload", "large-100KiB", "--workload", "tokens-2048"),
        ("--quick",),
        2.0,
    ),
    Driver("sampling", "sampling_bench.py", (), ("--samples", "10000000"), 1.5),
    Driver("shuffle", "shuffle_quality.py", (), ("--shards", "200"), 1.0),
    Driver("node_bytes", "node_bytes_bench.py", (), ("--quick",), 3.0),
    Driver("parquet", "parquet_bench.py", (), ("--quick",), 2.5),
    Driver("delta", "delta_bench.py", (), ("--quick",), 3.0),
    Driver("tables", "tables_bench.py", (), ("--quick",), 6.0),
    Driver("download", "download_bench.py", (), ("--quick",), 2.0),
    Driver(
        "streaming",
        "streaming_bench.py",
        ("--shuffle", "on,off", "--ttfb-shards", "100,10000,100000", "--resume", "--s3"),
        ("--quick",),
        80.0,  # 4,807 s in the run of 2026-11-26, 06:04
    ),
    Driver(
        "streaming_issue",
        "streaming_bench.py",
        # mosaicml-streaming's 0-worker run of 1M samples (three epochs, ~1,180 samples/s)
        # took 41 of the driver's 57 minutes on 2026-11-26: a run may take two hours.
        (
            "--issue-sizes",
            "--workloads",
            "small-1KiB,large-100KiB",
            "--skip-ttfb",
            "--timeout",
            "7200",
        ),
        ("--quick",),
        57.0,
    ),
    Driver("spark", "spark_bench.py", (), ("--quick",), 10.0),
]
BY_NAME = {driver.name: driver for driver in DRIVERS}


def reference_python() -> str:
    return os.environ.get("SHARDSTREAM_REF_PYTHON") or str(REPO / ".venv-ref" / "bin" / "python")


def run_driver(driver: Driver, out_dir: Path, quick: bool, timeout: float) -> dict[str, Any]:
    """Run one driver; how it went (its JSON is read later, by :func:`merge`)."""
    out = out_dir / f"{driver.name}.json"
    command = driver.command(out, quick)
    print(f"[suite] {driver.name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
        )
        returncode, stdout, stderr = completed.returncode, completed.stdout, completed.stderr
    except subprocess.TimeoutExpired as error:
        returncode, stdout, stderr = -1, str(error.stdout or ""), f"timed out after {timeout} s"
    seconds = time.perf_counter() - started
    log = out_dir / f"{driver.name}.log"
    log.write_text(f"$ {' '.join(command)}\n{stdout}\n--- stderr ---\n{stderr}", encoding="utf-8")
    status = "ok" if returncode == 0 else f"FAILED (exit {returncode}; see {log})"
    print(f"[suite] {driver.name}: {status} in {seconds:.0f} s", flush=True)
    if returncode != 0:
        print(stderr[-2000:], file=sys.stderr)
    return {
        "command": command,
        "returncode": returncode,
        "seconds": seconds,
        "log": str(log),
        "json": str(out),
    }


def merge(out_dir: Path, names: list[str]) -> tuple[list[Row], dict[str, Any]]:
    """Every row of the drivers' JSON in ``out_dir``; and each report, by driver (None: absent)."""
    rows: list[Row] = []
    reports: dict[str, Any] = {}
    for name in names:
        path = out_dir / f"{name}.json"
        if not path.exists():
            reports[name] = None
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        reports[name] = report
        rows.extend(rows_from(name, report))
    return rows, reports


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("s",):
        return f"{value:.3f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def table_rows(rows: list[Row]) -> list[list[str]]:
    """The suite's table, a header first (the format of ``report.format_table``)."""
    out = [
        ["workload", "metric", "shardstream", "best peer", "ratio", "target", "result", "checks"]
    ]
    for row in rows:
        best = row.best_peer
        peer = "-" if best is None else f"{_number(row.peers[best], row.unit)} ({best})"
        ratio = row.ratio
        target = "-" if row.target is None else f"{row.target_op} {row.target:g}x"
        met = row.met
        out.append(
            [
                row.workload,
                f"{row.metric}, {row.unit}",
                _number(row.ours, row.unit),
                peer,
                "-" if ratio is None else f"{ratio:.2f}x",
                target,
                "-" if met is None else ("met" if met else "MISSED"),
                {None: "-", True: "PASS", False: "FAIL"}[row.checks_passed],
            ]
        )
    return out


def plot(rows: list[Row], path: Path, title: str) -> bool:
    """A horizontal bar per row with a target: its ratio, the target marked; log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [row for row in rows if row.target is not None and row.ratio is not None]
    if not shown:
        return False
    labels = [f"{row.metric}: {row.workload}" for row in shown]
    ratios = [row.ratio or 0.0 for row in shown]
    colors = ["tab:green" if row.met else "tab:red" for row in shown]
    fig, axis = plt.subplots(figsize=(10, 0.32 * len(shown) + 1.6))
    positions = list(range(len(shown)))[::-1]
    axis.barh(positions, ratios, color=colors, height=0.6)
    for position, row in zip(positions, shown, strict=True):
        target = row.target or 1.0
        axis.plot([target, target], [position - 0.4, position + 0.4], color="black", lw=2)
    axis.axvline(1.0, color="grey", lw=0.8, ls="--")
    axis.set_xscale("log")
    axis.set_yticks(positions)
    axis.set_yticklabels(labels, fontsize=7)
    axis.set_xlabel(
        "shardstream / best peer (Spark, epoch plan: peer s / ours); black tick: target "
        "(>= for rates, <= for times and memory); green met, red missed",
        fontsize=7,
    )
    axis.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _missed_line(row: dict[str, Any]) -> str:
    """A missed target as a list item, with its recorded reason (or a call to investigate)."""
    line = (
        f"- {row['metric']}, {row['workload']}: {row['ratio']:.2f}x, target "
        f"{row['target_op']} {row['target']:g}x (best peer: {row['best_peer']})."
    )
    limit = limit_of(row["metric"], row["workload"])
    if limit is None:
        return f"{line} No reason recorded: investigate it as a regression."
    return f"{line} Limited by: {limit.bound}. Would meet it: {limit.would}."


#: Everything from this line on in docs/benchmarks.md is hand-written, and kept on each run.
NOTES_MARKER = "<!-- Hand-written notes below: benchmarks/suite.py keeps them. -->"


def kept_notes(docs: Path) -> str:
    """The hand-written part of an existing docs page, from :data:`NOTES_MARKER` on, or ""."""
    try:
        text = docs.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    at = text.find(NOTES_MARKER)
    return "" if at < 0 else text[at:]


def docs_text(suite: dict[str, Any], table: str, plot_link: str | None, notes: str = "") -> str:
    """docs/benchmarks.md: how to reproduce, the table, the plot, the machine, what is missed.

    ``notes``, the page's hand-written part (:func:`kept_notes`), follows unchanged.
    """
    mach = suite["machine"]
    versions = suite["versions"]
    quick = suite["quick"]
    minutes = sum(BY_NAME[name].full_minutes for name in suite["drivers"] if name in BY_NAME)
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `benchmarks/suite.py` on {suite['created']}"
        + (" with `--quick` (sizes reduced: a smoke run, not results)." if quick else "."),
        "Do not edit by hand above the notes at the end: re-run the suite.",
        "",
        "## How to reproduce",
        "",
        "```bash",
        "scripts/setup-ref-venv --spark --litdata   # mosaicml-streaming, litdata, pyspark",
        ".venv/bin/python benchmarks/suite.py        # every driver at full size",
        ".venv/bin/python benchmarks/suite.py --quick                  # toy sizes, a smoke run",
        ".venv/bin/python benchmarks/suite.py --only streaming --only format   # some drivers",
        ".venv/bin/python benchmarks/suite.py --docs-plot docs/img/benchmarks.png  # plot in git",
        "```",
        "",
        f"A full run takes about {minutes:.0f} minutes on a 2-core machine (the drivers' own "
        "estimates) and needs `weed` (SeaweedFS) for the download and cold-S3 rows. It writes "
        "each driver's JSON and log, `suite.json` and `suite.png` into `benchmarks/results/` "
        "(git-ignored), and this page.",
        "",
        "## Results",
        "",
        "ratio: shardstream / the best peer (the faster, or the smaller, of mosaicml-streaming "
        "and litdata where both were measured); for Spark conversion and the epoch plan, peer "
        "seconds / shardstream seconds. `checks`: every run behind the row passed its "
        "correctness checks (each sample exactly once, or every byte / file checked).",
        "",
        "```",
        table,
        "```",
        "",
    ]
    if plot_link:
        lines += [f"![ratios against their targets]({plot_link})", ""]
    missed = [row for row in suite["rows"] if row["met"] is False]
    lines += ["## Targets missed", ""]
    if missed:
        lines += [
            "Each with what limits it on this machine and what would meet it; the "
            f"measurements behind each reason are in {LIMITS_SECTION}.",
            "",
        ]
    lines += [_missed_line(row) for row in missed] or ["None."]
    crashed = [row for row in suite["rows"] if row.get("peer_failures")]
    if crashed:  # a peer that crashed is a finding of its own; its row has no ratio
        lines += ["", "## Peers that failed", ""]
        lines += [
            f"- {row['metric']}, {row['workload']}: "
            + "; ".join(f"{peer} failed: {error}" for peer, error in row["peer_failures"].items())
            for row in crashed
        ]
    lines += ["", "## Not measured yet", ""]
    lines += [f"- **{what}**: {why}." for what, why in NOT_MEASURED]
    failed = [name for name, run in suite["runs"].items() if run["returncode"] != 0]
    absent = [name for name, report in suite["drivers"].items() if report is None]
    if failed or absent:
        lines += [
            f"- **rows of {name}**: the driver "
            + ("failed; see its log in `benchmarks/results/`" if name in failed else "did not run")
            + "."
            for name in dict.fromkeys(failed + absent)
        ]
    if not NOT_MEASURED and not failed and not absent:
        lines.append("Nothing: every row the targets ask for has a driver, and each one ran.")
    lines += ["", "## Machine and versions", ""]
    load = ", ".join(f"{x:.2f}" for x in mach["load_average_at_start"])
    ran_now = any(not run.get("earlier") for run in suite["runs"].values())
    lines += [
        f"- {mach['cpu_count']} CPUs ({mach['processor']}), {mach['platform']}, Python "
        f"{mach['python']}" + (f"; load average at the start {load}" if ran_now else ""),
        "- shardstream venv: " + ", ".join(f"{k} {v}" for k, v in versions["shardstream"].items()),
        "- reference venv: " + ", ".join(f"{k} {v}" for k, v in versions["reference"].items()),
        "- driver durations: "
        + (
            ", ".join(
                f"{name} {run['seconds']:.0f} s{' (an earlier run)' if run.get('earlier') else ''}"
                for name, run in suite["runs"].items()
            )
            or "not recorded (--merge-only)"
        ),
    ]
    for name, report in suite["drivers"].items():  # partial re-runs merged into a report
        for rerun in (report or {}).get("reruns", []):
            lines.append(
                f"- {name}: re-measured on {rerun['created']} (`--update`), every library in "
                f"that run: {', '.join(rerun['settings'])}; its other rows are from the run of "
                f"{report.get('created', 'before')}"
            )
    lines.append("")
    if notes:
        lines += [notes.rstrip("\n"), ""]
    return "\n".join(lines)


def earlier_runs(out_dir: Path, skip: set[str]) -> dict[str, Any]:
    """The runs recorded by an earlier suite.json in ``out_dir``, but those in ``skip``."""
    try:
        runs = json.loads((out_dir / "suite.json").read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {name: {**run, "earlier": True} for name, run in runs.items() if name not in skip}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each driver's smoke-test sizes")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BY_NAME),
        help="run only this driver (repeatable); the table still merges every driver's JSON "
        "found in --out-dir",
    )
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    parser.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument(
        "--docs-plot",
        type=Path,
        help="also copy the plot here (e.g. docs/img/benchmarks.png) and link it from the docs; "
        "by default the docs link --out-dir's suite.png (benchmarks/results/ is git-ignored)",
    )
    parser.add_argument(
        "--merge-only", action="store_true", help="run nothing: merge the JSON in --out-dir"
    )
    parser.add_argument("--timeout", type=float, default=14400, help="seconds per driver")
    return parser.parse_args()


def main() -> int:
    args = parse()
    names = args.only or [driver.name for driver in DRIVERS]
    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    mach = machine()
    runs: dict[str, Any] = {}
    if not args.merge_only:
        for name in names:
            runs[name] = run_driver(BY_NAME[name], out_dir, args.quick, args.timeout)
    # Every driver's JSON found in --out-dir: with --only, the others' come from earlier runs.
    rows, reports = merge(out_dir, [driver.name for driver in DRIVERS])
    quick = args.quick or any(bool(r and r.get("quick")) for r in reports.values())
    suite: dict[str, Any] = {
        "benchmark": "suite",
        "quick": quick,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": mach,
        "versions": {
            "shardstream": package_versions(sys.executable, OURS_PACKAGES),
            "reference": package_versions(reference_python(), REF_PACKAGES),
        },
        "peers": PEER_NAMES,
        "runs": {**earlier_runs(out_dir, set(runs)), **runs},
        "rows": [row.to_json() for row in rows],
        "not_measured": [{"row": what, "reason": why} for what, why in NOT_MEASURED],
        "drivers": reports,
    }
    table = format_table(table_rows(rows))
    suite["table"] = table
    title = f"shardstream / best peer{' (QUICK sizes)' if quick else ''}, {suite['created']}"
    png = out_dir / "suite.png"
    has_plot = plot(rows, png, title)
    suite["wall_seconds"] = time.perf_counter() - started
    (out_dir / "suite.json").write_text(json.dumps(suite, indent=1) + "\n", encoding="utf-8")
    docs: Path = args.docs
    shown = png
    if has_plot and args.docs_plot:
        shown = args.docs_plot
        shown.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, shown)
    link = os.path.relpath(shown.resolve(), docs.resolve().parent) if has_plot else None
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(docs_text(suite, table, link, kept_notes(docs)), encoding="utf-8")

    print()
    print(table)
    print()
    for row in suite["rows"]:
        if row["met"] is False:
            print(f"MISSED: {row['metric']}, {row['workload']}: {row['ratio']:.2f}x")
    for what, _ in NOT_MEASURED:
        print(f"not measured yet: {what}")
    print(f"suite: {out_dir / 'suite.json'}, {png if has_plot else 'no plot'}, {docs}")
    print(f"({suite['wall_seconds']:.0f} s)")
    failed = [name for name, run in runs.items() if run["returncode"] != 0]
    bad = [row.workload for row in rows if row.checks_passed is False]
    if failed or bad:
        print(f"error: failed drivers {failed}, failed checks {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
