"""Every local read-path row under two source trees, in one run: before against after.

Usage::

    .venv/bin/python benchmarks/compare_trees.py --before /tmp/old/src [--after src]
        [--rounds 1] [--only TEXT ...] [--quick] [--out results/compare_trees.json]
        [--markdown results/compare_trees.md]

The rows (each a job run in a fresh process per measurement, the method of ``abba.py``):

* ``epoch``: warm epochs of ``StreamingDataset`` + ``StreamingDataLoader`` over the suite's
  workloads (``small-1KiB``, ``large-100KiB``, ``tokens-2048``; fewer samples than the suite's,
  the same read routes), shuffled and in order, 0 and 2 workers (the hand-over), and shuffled
  read in place (no cache), 0 and 2 workers; every sample checked; a process reads
  ``--epochs`` epochs, drops the first ``--drop`` and keeps its best epoch's CPU time (this
  process and its reaped workers) and, apart, its best wall time;
* ``first batch``: a cold start (an empty cache) over 100 and 10,000 shards, 0 and 2 workers,
  ``streaming_worker.py ttfb``: the main process's CPU time and wall time to the first batch;
* ``resume``: at 50% of ``small-1KiB``, 0 and 2 workers, ``streaming_worker.py resume``: each
  tree saves its state once (not timed), every measurement resumes from it;
* ``ds[i]``: ``getitem_bench.py``'s random reads of ``StreamingDataset``, ``LocalDataset`` and
  ``ParquetDataset``;
* ``table``: ``tables_bench.py``'s Parquet and Delta epochs (numbers, text), in order and
  shuffled, 0 workers: the median epoch's CPU time.

0-worker jobs run pinned to one core. The figure of a row is after's over before's (a time:
below 1 is faster), the median over runs paired in ABBA order, with a bootstrap 95% interval:
``faster``, ``within 5%`` or ``SLOWER`` (``abba.verdict``). A job that fails on a tree (an API
the old tree lacks) is reported as such, with the error's last line, and not measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # for benchmarks.*

from benchmarks import abba  # noqa: E402
from benchmarks.report import format_table, machine  # noqa: E402

WORKER = HERE / "streaming_worker.py"
SEED = 20240601
BATCH = 256
#: name -> the suite's workload (streaming_bench.WORKLOADS) at fewer samples: small-1KiB and
#: tokens-2048 stay under the policy's mapped_read_bytes (mapped), large-100KiB over it (read
#: from the files), as at the suite's sizes.
WORKLOADS: dict[str, dict[str, int]] = {
    "small-1KiB": {"samples": 51_200, "size": 1024, "jitter": 0},
    "large-100KiB": {"samples": 4_096, "size": 100 * 1024, "jitter": 10 * 1024},
    "tokens-2048": {"samples": 25_600, "size": 4096, "jitter": 0, "tokens": 2048},
}
TTFB_SHARDS = (100, 10_000)  # 10 samples of 16 bytes a shard


@dataclass
class Job:
    """One measurement, run in a fresh process per tree and run; it yields one or more rows.

    ``command(tree, run)`` gives the command line; ``read(tree, out)`` turns what it wrote
    into ``{row: {"cpu": s, "wall": s, "checks_passed": bool}}``.
    """

    name: str
    command: Callable[[str, int], list[str]]
    read: Callable[[str, str], dict[str, dict[str, Any]]]
    rounds: int
    pin: bool = False
    prepare: Callable[[str], None] | None = None  # once per tree, before its first run
    errors: dict[str, str] = field(default_factory=dict)


class Driver:
    """Runs jobs in ABBA order; keeps every run's figures by row and tree."""

    def __init__(self, trees: dict[str, str], scratch: Path, timeout: float) -> None:
        self.trees = trees
        self.scratch = scratch
        self.timeout = timeout
        self.count = 0
        self.runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.failures: dict[str, str] = {}
        self.loads: list[float] = []

    def fresh(self, name: str) -> str:
        """A new path in the scratch folder (not created)."""
        self.count += 1
        return str(self.scratch / f"{name}-{self.count}")

    def execute(self, command: list[str], tree: str, pin: bool = False) -> str:
        """Run ``command`` under ``tree``; its stdout (a failure raises with its tail)."""
        tmpdir = self.fresh("tmpdir")
        os.makedirs(tmpdir)
        env = abba.tree_env(self.trees[tree], TMPDIR=tmpdir)
        full = abba.pinned(command) if pin else command
        self.loads.append(os.getloadavg()[0])
        done = subprocess.run(
            full, env=env, capture_output=True, text=True, timeout=self.timeout, check=False
        )
        shutil.rmtree(tmpdir, ignore_errors=True)
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
            raise RuntimeError(f"exit {done.returncode}: {tail[-1]}")
        return done.stdout

    def job(self, job: Job) -> None:
        """Every run of ``job``, ABBA; a failure on either tree ends the job, recorded."""
        started = time.perf_counter()
        try:
            if job.prepare is not None:
                for tree in self.trees:
                    job.prepare(tree)
            for number, tree in abba.abba(job.rounds):
                out = self.execute(job.command(tree, number), tree, job.pin)
                for row, figures in job.read(tree, out).items():
                    self.runs.setdefault(row, {t: [] for t in self.trees})[tree].append(figures)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            self.failures[job.name] = f"{tree}: {error}"
            print(f"[{job.name}] cannot run on {tree}: {error}", flush=True)
            return
        print(f"[{job.name}] {time.perf_counter() - started:.0f} s", flush=True)

    def results(self) -> list[dict[str, Any]]:
        """Every row's figures, ratios, intervals and verdicts."""
        rows = []
        for row, by_tree in self.runs.items():
            before, after = by_tree["before"], by_tree["after"]
            entry: dict[str, Any] = {"row": row, "runs": by_tree}
            for key in ("cpu", "wall"):
                b = [run[key] for run in before]
                a = [run[key] for run in after]
                comparison = abba.compare(b, a)
                entry[key] = {
                    "before": statistics.median(b),
                    "after": statistics.median(a),
                    **comparison.as_dict(),
                    "verdict": abba.verdict(comparison),
                }
            entry["checks_passed"] = all(r.get("checks_passed", True) for r in before + after)
            rows.append(entry)
        return rows


# --- the jobs ----------------------------------------------------------------------------------


def worker_command(mode: str, params: dict[str, Any], **options: Any) -> list[str]:
    """A ``streaming_worker.py`` command line (shardstream's side)."""
    command = [sys.executable, str(WORKER), mode, "--lib", "shardstream", "--seed", str(SEED)]
    for key, value in {**params, **options}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not False and value is not None:
            command += [flag, str(value)]
    return command


def epoch_jobs(driver: Driver, args: argparse.Namespace) -> list[Job]:
    """Warm epochs from the cache (both trees' runs share one copy), and shuffled in place."""
    jobs = []
    settings = [(w, shuffle, False) for w in (0, 2) for shuffle in (True, False)]
    for name, spec in WORKLOADS.items():
        params = {**spec, "samples": spec["samples"] // (10 if args.quick else 1)}
        data = driver.fresh(f"{name}-mds")
        cache = driver.fresh(f"{name}-cache")
        driver.execute(worker_command("write", params, out=data, result=os.devnull), "after")
        for workers, shuffle, in_place in [*settings, (0, True, True), (2, True, True)]:
            label = f"{name}, {workers} workers, {'shuffled' if shuffle else 'in order'}"
            label += ", read in place" if in_place else ""
            child = {
                "data": data, "cache": None if in_place else cache, "workers": workers,
                "shuffle": shuffle, "epochs": args.epochs, "drop": args.drop, **params,
            }  # fmt: skip
            command = functools.partial(child_command, "epoch", child)
            read = functools.partial(row_of, f"epoch: {label}")
            jobs.append(Job(f"epoch {label}", command, read, args.rounds, pin=workers == 0))
    return jobs


def ttfb_jobs(driver: Driver, args: argparse.Namespace) -> list[Job]:
    jobs = []
    for shards in TTFB_SHARDS:
        params = {"samples": shards * 10, "size": 16, "jitter": 0}
        data = driver.fresh(f"ttfb-{shards}")
        write = worker_command("write", params, out=data, size_limit=530, result=os.devnull)
        driver.execute(write, "after")
        for workers in (0, 2):
            label = f"first batch (cold): {shards:,} shards, {workers} workers"
            fixed = {**params, "data": data, "workers": workers, "result": "/dev/stdout"}

            def command(tree: str, run: int, fixed: dict[str, Any] = fixed) -> list[str]:
                # A new cache each run: cold. Kept until the end (deleting many files slows
                # the next creations on this file system: see streaming_bench.run_ttfb).
                return worker_command("ttfb", fixed, cache=driver.fresh("cache"))

            jobs.append(Job(label, command, read_ttfb(label), args.rounds + 1, pin=workers == 0))
    return jobs


def read_ttfb(label: str) -> Callable[[str, str], dict[str, dict[str, Any]]]:
    def read(tree: str, out: str) -> dict[str, dict[str, Any]]:
        result = json.loads(out)
        figures = {"cpu": result["ttfb_cpu_seconds"], "wall": result["ttfb_seconds"]}
        return {label: {**figures, "checks_passed": result["checks_passed"]}}

    return read


def resume_jobs(driver: Driver, args: argparse.Namespace) -> list[Job]:
    spec = WORKLOADS["small-1KiB"]
    params = {**spec, "samples": spec["samples"] // (10 if args.quick else 1)}
    data = driver.fresh("resume-mds")
    driver.execute(worker_command("write", params, out=data, result=os.devnull), "after")
    jobs = []
    for workers in (0, 2):
        label = f"resume at 50%: small-1KiB, {workers} workers"
        places = {
            tree: {"data": data, "cache": driver.fresh("resume-cache"), "workers": workers,
                   "state": driver.fresh("state") + ".json"}
            for tree in driver.trees
        }  # fmt: skip

        def prepare(tree: str, places: dict[str, Any] = places) -> None:
            saving = worker_command("resume", params, **places[tree], result=os.devnull)
            driver.execute(saving, tree)

        def command(tree: str, run: int, places: dict[str, Any] = places) -> list[str]:
            options = {**places[tree], "resume": True, "result": "/dev/stdout"}
            return worker_command("resume", params, **options)

        def read(tree: str, out: str, label: str = label) -> dict[str, dict[str, Any]]:
            result = json.loads(out)
            figures = {"cpu": result["resume_cpu_seconds"], "wall": result["resume_seconds"]}
            return {label: {**figures, "checks_passed": result["checks_passed"]}}

        job = Job(label, command, read, args.rounds + 1, pin=workers == 0, prepare=prepare)
        jobs.append(job)
    return jobs


def getitem_jobs(driver: Driver, args: argparse.Namespace) -> list[Job]:
    folder = Path(driver.fresh("getitem"))
    folder.mkdir()
    rows = 2_000 if args.quick else 20_000
    code = f"from benchmarks.getitem_bench import build; build(__import__('pathlib').Path({str(folder)!r}), {rows})"  # noqa: E501
    driver.execute([sys.executable, "-c", code], "after")
    child = {"folder": str(folder), "reads": 2_000 if args.quick else 30_000}
    command = functools.partial(child_command, "getitem", child)
    return [Job("ds[i]", command, rows_of, args.rounds + 1, pin=True)]


def table_jobs(driver: Driver, args: argparse.Namespace) -> list[Job]:
    folder = Path(driver.fresh("tables"))
    folder.mkdir()
    rows = 20_000 if args.quick else 200_000
    code = (
        "import json, pathlib; from benchmarks.tables_bench import build; "
        f"print(json.dumps(build(pathlib.Path({str(folder)!r}), {rows}, {rows // 8}, "
        "['numeric', 'text'])))"
    )
    folders = last_json(driver.execute([sys.executable, "-c", code], "after"))
    jobs = []
    for table, kinds in folders.items():
        for kind, path in kinds.items():
            child = {"folder": path, "kind": kind, "rows": rows, "table": table}
            command = functools.partial(child_command, "table", child)
            jobs.append(Job(f"table {table} {kind}", command, rows_of, args.rounds, pin=True))
    return jobs


KINDS = {
    "epoch": epoch_jobs,
    "ttfb": ttfb_jobs,
    "resume": resume_jobs,
    "getitem": getitem_jobs,
    "table": table_jobs,
}


# --- the measuring processes -------------------------------------------------------------------


def child_command(kind: str, params: dict[str, Any], tree: str, run: int) -> list[str]:
    """The command of one measurement of ``compare_children.py`` (the same for each tree)."""
    del tree, run
    return [sys.executable, str(Path(__file__).resolve()), "--child", kind, json.dumps(params)]


def last_json(out: str) -> Any:
    return json.loads(out.strip().splitlines()[-1])


def rows_of(tree: str, out: str) -> dict[str, dict[str, Any]]:
    """A child's rows, as it printed them."""
    rows: dict[str, dict[str, Any]] = last_json(out)
    return rows


def row_of(label: str, tree: str, out: str) -> dict[str, dict[str, Any]]:
    """A child's one measurement, as the row ``label``."""
    return {label: last_json(out)}


def run_child(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """One measurement in this process (the tree under test on ``PYTHONPATH``)."""
    from benchmarks import compare_children

    measure: Callable[..., dict[str, Any]] = getattr(compare_children, kind)
    return measure(**params)


# --- the report --------------------------------------------------------------------------------


def table_of(rows: list[dict[str, Any]], failures: dict[str, str]) -> list[list[str]]:
    table = [
        ["row", "before ms", "after ms", "after/before", "95% interval", "verdict", "wall"],
    ]
    for entry in rows:
        cpu, wall = entry["cpu"], entry["wall"]
        table.append(
            [
                entry["row"] + ("" if entry["checks_passed"] else " (checks FAILED)"),
                f"{cpu['before'] * 1e3:.2f}",
                f"{cpu['after'] * 1e3:.2f}",
                f"{cpu['ratio']:.3f}",
                f"{cpu['low']:.3f}-{cpu['high']:.3f}",
                cpu["verdict"],
                f"{wall['ratio']:.3f} ({wall['low']:.3f}-{wall['high']:.3f}) {wall['verdict']}",
            ]
        )
    for name, error in failures.items():
        table.append([name, "-", "-", "-", "-", "cannot run", error[:80]])
    return table


def markdown(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(table[0]) + " |", "|" + " --- |" * len(table[0])]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in table[1:]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the src folder of the tree before")
    parser.add_argument("--after", default=str(HERE.parent / "src"), help="the tree after")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="ABBA rounds (4 runs each) of the epoch and table jobs; the others take one more",
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=10, help="epochs a process reads")
    parser.add_argument("--drop", type=int, default=4, help="its first epochs, not kept")
    parser.add_argument("--only", nargs="+", help="jobs whose name contains one of these")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--quick", action="store_true", help="tenth sizes, 4 epochs")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a process may take")
    parser.add_argument("--out", default=str(HERE / "results" / "compare_trees.json"))
    parser.add_argument("--markdown", help="also write the table as Markdown here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child[0], json.loads(args.child[1]))))
        return
    if not args.before:
        parser.error("--before SRC is required")
    if args.quick:
        args.epochs, args.drop = 4, 1
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="shardstream-abba-", dir="/tmp") as tmp:
        scratch = Path(tmp)
        trees = abba.copy_trees({"before": args.before, "after": args.after}, scratch)
        driver = Driver(trees, scratch, args.timeout)
        for kind in args.kinds:
            for job in KINDS[kind](driver, args):
                if args.only and not any(text in job.name for text in args.only):
                    continue
                driver.job(job)
        rows = driver.results()
    table = table_of(rows, driver.failures)
    print(format_table(table))
    loads = driver.loads or [load_at_start[0]]
    note = (
        f"load average (1 min) at the runs' starts: {min(loads):.1f}-{max(loads):.1f}, "
        f"median {statistics.median(loads):.1f}; {os.cpu_count()} CPUs"
    )
    print(note)
    report = {
        "trees": {"before": args.before, "after": args.after},
        "rounds": args.rounds,
        "epochs": args.epochs,
        "drop": args.drop,
        "machine": machine(),
        "loads": loads,
        "rows": rows,
        "failures": driver.failures,
        "seconds": time.perf_counter() - started,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(table) + "\n" + note + "\n")
    print(f"raw numbers: {args.out} ({report['seconds']:.0f} s)")
    if not all(entry["checks_passed"] for entry in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
