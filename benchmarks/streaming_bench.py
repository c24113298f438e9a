"""Streaming benchmark: shardstream's StreamingDataset beside mosaicml-streaming and litdata.

Usage::

    .venv/bin/python benchmarks/streaming_bench.py [--quick] [--libs shardstream,reference]

Two measurements, on the same samples, in one run, reported as ratios:

* **epoch**: samples/s of a full shuffled epoch through each library's ``StreamingDataLoader``
  with a warm cache (``num_workers`` 0 and 2, batch size 256), every sample checked, and the
  peak RSS of the main process and of each DataLoader worker;
* **ttfb**: the time from constructing the dataset to the first batch with 10,000 shards in
  the index, on a cold (empty) and a warm (filled) cache.

Each measurement runs ``streaming_worker.py`` in a fresh process under its library's venv
(shardstream: this interpreter; mosaicml-streaming and litdata: ``$SHARDSTREAM_REF_PYTHON``,
by default ``<repo>/.venv-ref/bin/python``), one after the other, never two at once.
See ``benchmarks/README.md`` for what is measured and how to read the output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "streaming_worker.py"

#: name -> samples, payload bytes, +- jitter, and for token arrays their length (full size;
#: --quick divides the samples by 10). Token samples are ``ndarray:uint16:2048`` (4 KiB).
WORKLOADS: dict[str, dict[str, int]] = {
    "small-1KiB": {"samples": 102_400, "size": 1024, "jitter": 0},
    "large-100KiB": {"samples": 10_240, "size": 100 * 1024, "jitter": 10 * 1024},
    "tokens-2048": {"samples": 51_200, "size": 4096, "jitter": 0, "tokens": 2048},
}
#: The full-scale sizes (``--issue-sizes``): 1M samples of 1 KiB, 20k of ~100 KiB.
ISSUE_SAMPLES = {"small-1KiB": 1_000_000, "large-100KiB": 20_000}
#: The workloads read cold from S3 (the byte payloads; token arrays are read warm only).
S3_WORKLOADS = ("small-1KiB", "large-100KiB")
#: 10 samples of 16 bytes per shard: 100,000 samples make 10,000 shards (--quick: 1,000).
TTFB = {"samples": 100_000, "size": 16, "jitter": 0, "size_limit": 530}
TTFB_SAMPLES_PER_SHARD = 10
SHARD_BYTES = 1 << 26
BATCH_SIZE = 256
SEED = 20240601
TTFB_TARGET = 0.25  # shardstream's cold time to first batch <= 1/4 of the reference's
LIBS = ("shardstream", "reference", "litdata")
WORKER_LIB = {"shardstream": "shardstream", "reference": "streaming", "litdata": "litdata"}
PEERS = ("reference", "litdata")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for benchmarks.report
from benchmarks.report import format_table, machine, worker_env  # noqa: E402


def reference_python() -> str:
    return os.environ.get("SHARDSTREAM_REF_PYTHON") or str(REPO / ".venv-ref" / "bin" / "python")


class Runner:
    """Runs worker processes one at a time, each with its own TMPDIR, and reads their JSON."""

    def __init__(self, pythons: dict[str, str], tmp: str, timeout: float) -> None:
        self.pythons = pythons
        self.tmp = tmp
        self.timeout = timeout
        self.count = 0

    def fresh(self, name: str) -> str:
        """A new path under the benchmark's folder (not created)."""
        self.count += 1
        return os.path.join(self.tmp, f"{name}-{self.count}")

    def __call__(self, lib: str, mode: str, params: dict[str, Any], **options: Any) -> Any:
        """Run one worker; its JSON result (a failed run raises with its output)."""
        result_path = self.fresh("result") + ".json"
        tmpdir = self.fresh("tmpdir")  # mosaicml-streaming's lock files land here, not in /tmp
        os.makedirs(tmpdir)
        command = [self.pythons[lib], str(WORKER), mode, "--lib", WORKER_LIB[lib]]
        for key, value in {**params, "seed": SEED, **options}.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                command.append(flag)
            elif value is not False and value is not None:
                command += [flag, str(value)]
        command += ["--result", result_path]
        env = worker_env(PYTHONHASHSEED="0", TMPDIR=tmpdir)
        started = time.perf_counter()
        completed = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=self.timeout, check=False
        )
        shutil.rmtree(tmpdir, ignore_errors=True)
        if completed.returncode != 0 or not os.path.exists(result_path):
            raise RuntimeError(
                f"the {lib} worker failed ({mode}, exit {completed.returncode}):\n"
                f"$ {' '.join(command)}\n{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}"
            )
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
        result["worker_wall_seconds"] = time.perf_counter() - started
        return result


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or not denominator:
        return None
    return numerator / denominator


def setting_key(workers: int, shuffle: bool) -> str:
    """The key of one epoch setting in the JSON: ``workers=N`` (shuffled) or ``... shuffle=off``."""
    return f"workers={workers}" + ("" if shuffle else " shuffle=off")


def setting_label(key: str) -> str:
    """The table's ``workers`` cell of a setting key: ``0``, or ``0, no shuffle``."""
    count = key.split()[0].split("=")[1]
    return count if "shuffle=off" not in key else f"{count}, no shuffle"


def run_epochs(
    run: Runner,
    libs: list[str],
    workers: list[int],
    epochs: int,
    scale: int,
    shuffles: tuple[bool, ...] = (True,),
    workloads: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """Warm epochs of each workload (default: :data:`WORKLOADS`) in every setting."""
    results: dict[str, Any] = {}
    for name, spec in (workloads or WORKLOADS).items():
        params = {**spec, "samples": spec["samples"] // scale}
        print(f"[epoch {name}] {params['samples']:,} samples ...", flush=True)
        mds, lit = run.fresh(f"{name}-mds"), run.fresh(f"{name}-litdata")
        workload: dict[str, Any] = {"params": params, "write": {}, "runs": {}}
        workload["write"]["mds"] = run(
            "shardstream", "write", params, out=mds, size_limit=SHARD_BYTES
        )
        if "litdata" in libs:
            workload["write"]["litdata"] = run(
                "litdata", "write", params, out=lit, size_limit=SHARD_BYTES
            )
        for shuffle in shuffles:
            for count in workers:
                key = setting_key(count, shuffle)
                setting: dict[str, Any] = {}
                for lib in [lib for lib in ("reference", "litdata", "shardstream") if lib in libs]:
                    cache = run.fresh(f"{name}-{lib}-cache")
                    data = lit if lib == "litdata" else mds
                    setting[lib] = run(
                        lib, "epoch", params, data=data, cache=cache, workers=count,
                        batch_size=BATCH_SIZE, epochs=epochs, no_shuffle=not shuffle,
                    )  # fmt: skip
                    shutil.rmtree(cache, ignore_errors=True)
                    rate = setting[lib]["samples_per_s"]["best"]
                    print(
                        f"  {key} {lib}: {rate:,.0f} samples/s, checks "
                        f"{'PASS' if setting[lib]['checks_passed'] else 'FAIL'}",
                        flush=True,
                    )
                setting["ratios"] = epoch_ratios(setting)
                workload["runs"][key] = setting
        shutil.rmtree(mds, ignore_errors=True)
        shutil.rmtree(lit, ignore_errors=True)
        results[name] = workload
    return results


def epoch_ratios(setting: dict[str, Any]) -> dict[str, Any]:
    """Ratios: shardstream samples/s over each peer's (best, median) and over the faster peer's."""
    ours = setting.get("shardstream")
    ratios: dict[str, Any] = {}
    if ours is None:
        return ratios
    peers = [peer for peer in PEERS if peer in setting]
    for stat in ("best", "median"):
        suffix = "" if stat == "best" else "_median"
        for peer in peers:
            ratios[f"{peer}{suffix}"] = ratio(
                ours["samples_per_s"][stat], setting[peer]["samples_per_s"][stat]
            )
        if peers:
            faster = max(peers, key=lambda peer: setting[peer]["samples_per_s"][stat])
            ratios[f"faster_peer{suffix}"] = ratio(
                ours["samples_per_s"][stat], setting[faster]["samples_per_s"][stat]
            )
            ratios[f"faster_peer_name{suffix}"] = faster
    return ratios


def summary(values: list[float]) -> dict[str, Any]:
    return {"all": values, "best": min(values), "median": statistics.median(values)}


def run_ttfb(
    run: Runner,
    libs: list[str],
    workers: list[int],
    repeats: int,
    scale: int,
    shards: int = TTFB["samples"] // TTFB_SAMPLES_PER_SHARD,
) -> dict[str, Any]:
    """Time to first batch on ``shards`` shards of 10 tiny samples (--quick: shards / 10)."""
    params = dict(TTFB, samples=shards * TTFB_SAMPLES_PER_SHARD // scale)
    size_limit = params.pop("size_limit")
    data = run.fresh("ttfb-mds")
    print(f"[ttfb] {params['samples']:,} samples of {params['size']} bytes ...", flush=True)
    written = run("shardstream", "write", params, out=data, size_limit=size_limit)
    shards = written["files"] - 1
    print(f"  {shards:,} shards written in {written['write_seconds']:.1f} s", flush=True)
    results: dict[str, Any] = {"params": params, "shards": shards, "write": written, "runs": {}}
    # Caches are deleted once every run is over. On an ext4 without a journal (this project's
    # machines), creating a file within ~30 s of deleting many costs 200-300 us instead of 15
    # (the allocator skips each recently deleted inode): deleting one library's 10,000-file
    # cache before the other's cold runs would time the file system, not the libraries.
    kept: list[str] = []
    for count in workers:
        setting: dict[str, Any] = {}
        for lib in [lib for lib in ("reference", "shardstream") if lib in libs]:
            cold: list[dict[str, Any]] = []
            caches = []
            for repeat in range(repeats):
                # The first cold run reads and checks the whole epoch, which fills its cache.
                caches.append(run.fresh(f"ttfb-{lib}-cache"))
                cold.append(
                    run(lib, "ttfb", params, data=data, cache=caches[-1], workers=count,
                        batch_size=BATCH_SIZE, finish=repeat == 0)
                )  # fmt: skip
            warm = [
                run(lib, "ttfb", params, data=data, cache=caches[0], workers=count,
                    batch_size=BATCH_SIZE)
                for _ in range(repeats)
            ]  # fmt: skip
            kept.extend(caches)  # deleted at the end, not between timed runs (see below)
            setting[lib] = {
                "cold_seconds": summary([r["ttfb_seconds"] for r in cold]),
                "warm_seconds": summary([r["ttfb_seconds"] for r in warm]),
                "cold_construct_seconds": summary([r["construct_seconds"] for r in cold]),
                "warm_construct_seconds": summary([r["construct_seconds"] for r in warm]),
                "epoch_seconds_after_cold_start": cold[0].get("epoch_seconds"),
                "epoch_checks": cold[0].get("checks"),
                "checks_passed": all(r["checks_passed"] for r in cold + warm),
                "version": cold[0]["version"],
                "import_seconds": cold[0]["import_seconds"],
                "cold": cold,
                "warm": warm,
            }
            print(
                f"  workers={count} {lib}: cold {setting[lib]['cold_seconds']['best']:.2f} s, "
                f"warm {setting[lib]['warm_seconds']['best']:.2f} s, checks "
                f"{'PASS' if setting[lib]['checks_passed'] else 'FAIL'}",
                flush=True,
            )
        if "shardstream" in setting and "reference" in setting:
            ours, ref = setting["shardstream"], setting["reference"]
            setting["ratios"] = {
                f"{cache}{suffix}": ratio(
                    ours[f"{cache}_seconds"][stat], ref[f"{cache}_seconds"][stat]
                )
                for cache in ("cold", "warm")
                for stat, suffix in (("best", ""), ("median", "_median"))
            }
        results["runs"][f"workers={count}"] = setting
    for folder in [*kept, data]:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def run_resume(
    run: Runner, libs: list[str], workers: list[int], repeats: int, scale: int
) -> dict[str, Any]:
    """Resume latency at 50% of an epoch of ``small-1KiB``: shardstream and the reference.

    Per run: one process reads half the epoch and saves the loader's state; a second one, on
    the same cache, times ``load_state_dict`` to the first batch and checks the rest: every
    sample exactly once over both.
    """
    spec = WORKLOADS["small-1KiB"]
    params = {**spec, "samples": spec["samples"] // scale}
    data = run.fresh("resume-mds")
    print(f"[resume] small-1KiB, {params['samples']:,} samples ...", flush=True)
    run("shardstream", "write", params, out=data, size_limit=SHARD_BYTES)
    results: dict[str, Any] = {"params": params, "runs": {}}
    for count in workers:
        setting: dict[str, Any] = {}
        for lib in [lib for lib in ("reference", "shardstream") if lib in libs]:
            resumed = []
            for _ in range(repeats):
                cache, state = run.fresh(f"resume-{lib}-cache"), run.fresh("state") + ".json"
                options = {"data": data, "cache": cache, "workers": count}
                options["batch_size"] = BATCH_SIZE
                half = run(lib, "resume", params, state=state, **options)
                resumed.append(run(lib, "resume", params, state=state, resume=True, **options))
                resumed[-1]["first_half"] = half
                shutil.rmtree(cache, ignore_errors=True)
            setting[lib] = {
                "resume_seconds": summary([r["resume_seconds"] for r in resumed]),
                "checks_passed": all(
                    r["checks_passed"] and r["first_half"]["checks_passed"] for r in resumed
                ),
                "version": resumed[0]["version"],
                "runs": resumed,
            }
            print(
                f"  workers={count} {lib}: {setting[lib]['resume_seconds']['best']:.3f} s, "
                f"checks {'PASS' if setting[lib]['checks_passed'] else 'FAIL'}",
                flush=True,
            )
        if "shardstream" in setting and "reference" in setting:
            setting["ratios"] = {
                "reference": ratio(
                    setting["shardstream"]["resume_seconds"]["best"],
                    setting["reference"]["resume_seconds"]["best"],
                )
            }
        results["runs"][f"workers={count}"] = setting
    shutil.rmtree(data, ignore_errors=True)
    return results


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def epoch_tables(results: dict[str, Any], libs: list[str]) -> tuple[list[list[str]], ...]:
    peers = [peer for peer in PEERS if peer in libs]
    speed = [["workload", "workers", *libs, *(f"ss/{p[:3]}" for p in peers), "ss/faster"]]
    memory = [["workload", "workers", *(f"{lib} main/worker" for lib in libs)]]
    anon = [["workload", "workers", *(f"{lib} main/worker" for lib in libs)]]
    for name, workload in results.items():
        for setting_name, setting in workload["runs"].items():
            count = setting_label(setting_name)
            ratios = setting["ratios"]
            speed.append(
                [name, count]
                + [_num(setting[lib]["samples_per_s"]["best"], "{:,.0f}") for lib in libs]
                + [_num(ratios.get(peer), "{:.2f}x") for peer in peers]
                + [_num(ratios.get("faster_peer"), "{:.2f}x")]
            )
            cells, anon_cells = [], []
            for lib in libs:
                mem = setting[lib]["memory"]
                worker = _num(mem["worker_vmhwm_mib_max"], "{:,.0f}")
                cells.append(f"{mem['main']['vmhwm_mib']:,.0f} / {worker}")
                worker = _num(mem["worker_rss_anon_mib_max"], "{:,.0f}")
                anon_cells.append(f"{mem['main_rss_anon_mib_max']:,.0f} / {worker}")
            memory.append([name, count, *cells])
            anon.append([name, count, *anon_cells])
    return speed, memory, anon


def ttfb_table(results: dict[str, Any], libs: list[str]) -> list[list[str]]:
    sides = [lib for lib in ("shardstream", "reference") if lib in libs]
    rows = [["cache", "workers", *(f"{lib} s" for lib in sides), "ss/ref", "target"]]
    for setting_name, setting in results["runs"].items():
        count = setting_name.split("=")[1]
        for cache in ("cold", "warm"):
            value = setting.get("ratios", {}).get(cache)
            target = "-"
            if cache == "cold" and value is not None:
                target = "MET" if value <= TTFB_TARGET else "MISSED"
            rows.append(
                [cache, count]
                + [f"{setting[lib][f'{cache}_seconds']['best']:.3f}" for lib in sides]
                + [_num(value, "{:.2f}"), target]
            )
    return rows


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer samples, 1 repeat")
    parser.add_argument("--out", default=str(HERE / "results" / "streaming.json"))
    parser.add_argument(
        "--libs", default=",".join(LIBS), help="comma-separated: shardstream,reference,litdata"
    )
    parser.add_argument("--workers", default="0,2", help="DataLoader num_workers, epoch part")
    parser.add_argument("--ttfb-workers", default="0,2", help="num_workers, ttfb part")
    parser.add_argument(
        "--ttfb-shards", default="10000", help="comma-separated shard counts, ttfb part"
    )
    parser.add_argument(
        "--shuffle", default="on", help="epoch part: on, off or on,off (shuffle=True/False)"
    )
    parser.add_argument("--epochs", type=int, help="timed warm epochs (default 2; quick 1)")
    parser.add_argument("--ttfb-repeats", type=int, help="runs per ttfb cell (3; quick 1)")
    parser.add_argument("--skip-epoch", action="store_true", help="only the ttfb part")
    parser.add_argument("--skip-ttfb", action="store_true", help="only the epoch part")
    parser.add_argument(
        "--resume", action="store_true", help="add resume latency at 50%% (ttfb workers)"
    )
    parser.add_argument("--s3", action="store_true", help="add a cold epoch from SeaweedFS")
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="epoch part: comma-separated workloads"
    )
    parser.add_argument(
        "--issue-sizes",
        action="store_true",
        help="epoch part: the full-scale sizes (1M samples of 1 KiB, 20k of ~100 KiB)",
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per worker run")
    parser.add_argument(
        "--update",
        metavar="PATH",
        help="merge what this run measures into the earlier report at PATH (written to --out); "
        "see streaming_update.py",
    )
    return parser.parse_args()


def main() -> int:
    args = parse()
    libs = [lib.strip() for lib in args.libs.split(",") if lib.strip()]
    if "shardstream" not in libs or not set(libs) <= set(LIBS):
        print(f"error: --libs must name shardstream and some of {LIBS}", file=sys.stderr)
        return 2
    libs = [lib for lib in LIBS if lib in libs]
    ref_python = reference_python()
    needs_ref = [lib for lib in libs if lib != "shardstream"]
    if needs_ref and not os.path.exists(ref_python):
        print(
            f"error: {ref_python} does not exist; run scripts/setup-ref-venv (add --litdata for "
            f"litdata) or set SHARDSTREAM_REF_PYTHON",
            file=sys.stderr,
        )
        return 2
    for lib in needs_ref:
        module = WORKER_LIB[lib]
        probe = subprocess.run([ref_python, "-c", f"import {module}"], capture_output=True)
        if probe.returncode != 0:
            print(
                f"error: {module} is not importable by {ref_python}; run scripts/setup-ref-venv"
                f"{' --litdata' if lib == 'litdata' else ''}, or leave {lib} out of --libs",
                file=sys.stderr,
            )
            return 2
    pythons = {"shardstream": sys.executable, "reference": ref_python, "litdata": ref_python}
    scale = 10 if args.quick else 1
    epochs = args.epochs or (1 if args.quick else 2)
    repeats = args.ttfb_repeats or (1 if args.quick else 3)
    workers = [int(w) for w in args.workers.split(",")]
    ttfb_workers = [int(w) for w in args.ttfb_workers.split(",")]
    ttfb_shards = [int(n) for n in args.ttfb_shards.split(",")]
    shuffles = tuple(dict.fromkeys(word.strip() == "on" for word in args.shuffle.split(",")))
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "streaming",
        "quick": args.quick,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "libs": libs,
        "interpreters": {lib: pythons[lib] for lib in libs},
        "batch_size": BATCH_SIZE,
        "timed_epochs": epochs,
        "ttfb_repeats": repeats,
        "seed": SEED,
        "shuffle": ["on" if shuffle else "off" for shuffle in shuffles],
        "issue_sizes": args.issue_sizes,
    }
    earlier: dict[str, Any] | None = None  # --update's report, checked before measuring
    if args.update:
        from benchmarks.streaming_update import check_compatible

        try:
            earlier = json.loads(Path(args.update).read_text(encoding="utf-8"))
            check_compatible(earlier, report)
        except (OSError, ValueError) as error:
            print(f"error: --update {args.update}: {error}", file=sys.stderr)
            return 2
    tmp = tempfile.mkdtemp(prefix="shardstream-streaming-bench-")
    run = Runner(pythons, tmp, args.timeout)
    try:
        if not args.skip_epoch:
            workloads = {}
            for name in [name.strip() for name in args.workloads.split(",") if name.strip()]:
                if name not in WORKLOADS:
                    raise SystemExit(f"unknown workload {name!r}; use some of {list(WORKLOADS)}")
                samples = ISSUE_SAMPLES.get(name) if args.issue_sizes else None
                workloads[name] = {
                    **WORKLOADS[name],
                    "samples": samples or WORKLOADS[name]["samples"],
                }
            report["epoch"] = run_epochs(run, libs, workers, epochs, scale, shuffles, workloads)
        if not args.skip_ttfb:
            by_shards = {
                str(n): run_ttfb(run, libs, ttfb_workers, repeats, scale, n) for n in ttfb_shards
            }
            # "ttfb": the 10,000-shard case (or the first asked for); every case by shard count.
            report["ttfb"] = by_shards.get("10000", by_shards[str(ttfb_shards[0])])
            report["ttfb_by_shards"] = by_shards
        if args.resume:
            report["resume"] = run_resume(run, libs, ttfb_workers, repeats, scale)
        if args.s3:
            from benchmarks.streaming_s3 import run_s3_cold

            sizes = {n: {**WORKLOADS[n], "samples": WORKLOADS[n]["samples"] // scale}
                     for n in S3_WORKLOADS}  # fmt: skip
            report["s3_cold"] = run_s3_cold(
                run, libs, workers, sizes, {"size_limit": SHARD_BYTES}, {"batch_size": BATCH_SIZE}
            )
    finally:
        if "reference" in libs:  # a ttfb run stops without unlinking its /dev/shm blocks
            subprocess.run(
                [ref_python, "-c", "from streaming.base.util import clean_stale_shared_memory "
                 "as clean; clean()"],
                capture_output=True, env=dict(os.environ, TMPDIR=tmp), check=False,
            )  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)
    report["wall_seconds"] = time.perf_counter() - started
    if earlier is not None:  # only the settings measured now change; the rest are earlier
        from benchmarks.streaming_update import merge_rerun

        report = merge_rerun(earlier, report)
        epochs, repeats = report["timed_epochs"], report["ttfb_repeats"]
    report["versions"] = versions(report)
    checks = [
        setting[lib]["checks_passed"]
        for part in ("epoch", "ttfb", "resume", "s3_cold")
        for setting in settings(report, part)
        for lib in libs
        if lib in setting and "failed" not in setting[lib]  # a peer's crash: reported below
    ]
    report["checks_passed"] = bool(checks) and all(checks)

    print()
    print(
        f"versions: {report['versions']}; {os.cpu_count()} CPUs, {platform.platform()}; "
        f"batch {BATCH_SIZE}{' (QUICK: sizes / 10)' if args.quick else ''}"
    )
    tables: dict[str, Any] = {}
    if "epoch" in report:
        speed, memory, anon = epoch_tables(report["epoch"], libs)
        tables.update(epoch_samples_per_s=speed, epoch_peak_rss=memory, epoch_peak_anon=anon)
        print(f"\nepoch, warm cache: samples/s (best of {epochs}); ss/x = shardstream / x")
        print(format_table(speed))
        print("\npeak RSS (VmHWM), MiB: main process / largest DataLoader worker")
        print(format_table(memory))
        print("\npeak anonymous RSS (RssAnon: heap, no mapped files), MiB: main / largest worker")
        print(format_table(anon))
    for nominal, ttfb_result in report.get("ttfb_by_shards", {}).items():
        rows = ttfb_table(ttfb_result, libs)
        tables["ttfb" if ttfb_result is report["ttfb"] else f"ttfb_{nominal}"] = rows
        print(
            f"\ntime to first batch, {ttfb_result['shards']:,} shards, best of {repeats}; "
            f"target ss/ref <= {TTFB_TARGET} (cold)"
        )
        print(format_table(rows))
    if "resume" in report:
        rows = [["cache", "workers", "shardstream s", "reference s", "ss/ref"]]
        for key, setting in report["resume"]["runs"].items():
            rows.append(
                ["warm", key.split("=")[1]]
                + [
                    _num(
                        setting[lib]["resume_seconds"]["best"] if lib in setting else None, "{:.3f}"
                    )
                    for lib in ("shardstream", "reference")
                ]
                + [_num(setting.get("ratios", {}).get("reference"), "{:.2f}")]
            )
        tables["resume"] = rows
        print(f"\nresume latency at 50% of an epoch (small-1KiB), best of {repeats}")
        print(format_table(rows))
    if "s3_cold" in report:
        rows = [["workload", "workers", "shardstream", "reference", "ss/ref"]]
        for name, workload in report["s3_cold"].items():
            for key, setting in workload["runs"].items():
                rates = [setting.get(lib, {}).get("cold_samples_per_s") for lib in LIBS[:2]]
                cells = [
                    "FAILED" if "failed" in setting.get(lib, {}) else _num(rate, "{:,.0f}")
                    for lib, rate in zip(LIBS[:2], rates, strict=True)
                ]
                cells.append(_num(ratio(rates[0], rates[1]), "{:.2f}x"))
                rows.append([name, key.split("=")[1], *cells])
        tables["s3_cold"] = rows
        print("\ncold epoch from S3 (SeaweedFS on 127.0.0.1, empty cache): samples/s")
        print(format_table(rows))
        for name, workload in report["s3_cold"].items():
            for key, setting in workload["runs"].items():
                for lib, side in setting.items():
                    if "failed" in side:
                        print(f"{lib} failed on {name}, {key}: {side['failed']}")
    report["tables"] = tables
    print(f"\ncorrectness: {'PASS' if report['checks_passed'] else 'FAIL'} (every run)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"raw numbers: {out} ({report['wall_seconds']:.0f} s)")
    if not report["checks_passed"]:
        print("error: a correctness check failed; the numbers are not valid", file=sys.stderr)
        return 1
    return 0


def settings(report: dict[str, Any], part: str) -> list[dict[str, Any]]:
    if part not in report:
        return []
    if part == "resume":
        return list(report["resume"]["runs"].values())
    if part == "s3_cold":
        return [s for w in report["s3_cold"].values() for s in w["runs"].values()]
    if part == "ttfb":
        cases = report.get("ttfb_by_shards", {"": report["ttfb"]}).values()
        return [setting for case in cases for setting in case["runs"].values()]
    return [s for w in report["epoch"].values() for s in w["runs"].values()]


def versions(report: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in ("epoch", "ttfb", "resume", "s3_cold"):
        for setting in settings(report, part):
            for lib in LIBS:
                if lib in setting and "version" in setting[lib]:
                    found.setdefault(lib, setting[lib]["version"])
    return found


if __name__ == "__main__":
    sys.exit(main())
