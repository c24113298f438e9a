"""MDS format benchmark: shardstream beside mosaicml-streaming on the same data, in one run.

Usage::

    .venv/bin/python benchmarks/format_bench.py [--quick] [--out benchmarks/results/format.json]

Each library's half runs in ``format_worker.py`` under its own venv's Python (shardstream under
the current interpreter, mosaicml-streaming under ``$SHARDSTREAM_REF_PYTHON``, by default
``<repo>/.venv-ref/bin/python``), so both are measured the same way and import time is never
counted. See ``benchmarks/README.md`` for what is measured and how to read the output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "format_worker.py"

#: name -> samples, payload bytes, +- jitter, description (full size; --quick divides by 10).
WORKLOADS: dict[str, dict[str, Any]] = {
    "small-1KiB": {
        "samples": 100_000,
        "size": 1024,
        "jitter": 0,
        "description": "100,000 x 1 KiB random bytes + int label",
    },
    "large-100KiB": {
        "samples": 10_000,
        "size": 100 * 1024,
        "jitter": 10 * 1024,
        "description": "10,000 x 90-110 KiB random bytes + int label",
    },
    "tokens-2048": {
        "samples": 100_000,
        "size": 4096,
        "jitter": 0,
        "kind": "tokens",
        "description": "100,000 x ndarray:uint16:2048 random tokens + int label",
    },
}
#: Run by default; the others only when named with --workload (the suite names them all).
DEFAULT_WORKLOADS = ["small-1KiB", "large-100KiB"]
TARGETS = {"read": 10.0, "read_zero_copy": 10.0, "write": 1.5}
LIBS = {"shardstream": "shardstream", "reference": "streaming"}
SEED = 20240601
ORDER_SEED = 7

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for benchmarks.report
from benchmarks.report import format_table, machine, worker_env  # noqa: E402


def reference_python() -> str:
    return os.environ.get("SHARDSTREAM_REF_PYTHON") or str(REPO / ".venv-ref" / "bin" / "python")


def run_worker(
    python: str, lib: str, name: str, params: dict[str, Any], repeats: int, tmp: str, timeout: float
) -> dict[str, Any]:
    result_path = os.path.join(tmp, f"result-{lib}-{name}.json")
    command = [
        python,
        str(WORKER),
        "--lib",
        lib,
        "--workload",
        name,
        "--samples",
        str(params["samples"]),
        "--size",
        str(params["size"]),
        "--jitter",
        str(params["jitter"]),
        "--seed",
        str(SEED),
        "--order-seed",
        str(ORDER_SEED),
        "--repeats",
        str(repeats),
        "--kind",
        str(params.get("kind", "bytes")),
        "--tmp",
        tmp,
        "--result",
        result_path,
    ]
    env = worker_env(PYTHONHASHSEED="0")
    started = time.perf_counter()
    completed = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"the {lib} worker failed on {name} (exit {completed.returncode}):\n"
            f"$ {' '.join(command)}\n{completed.stdout}\n{completed.stderr}"
        )
    with open(result_path, encoding="utf-8") as handle:
        result: dict[str, Any] = json.load(handle)
    result["worker_wall_seconds"] = time.perf_counter() - started
    return result


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("inf")


def compare(ours: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Ratios (>1: shardstream faster) and the cross-checks of one workload."""
    ratios = {
        "write": ratio(ref["write_seconds"]["best"], ours["write_seconds"]["best"]),
        "write_median": ratio(ref["write_seconds"]["median"], ours["write_seconds"]["median"]),
        "read": ratio(ours["read_samples_per_s"]["best"], ref["read_samples_per_s"]["best"]),
        "read_median": ratio(
            ours["read_samples_per_s"]["median"], ref["read_samples_per_s"]["median"]
        ),
        # shardstream with zero_copy=True (bytes columns as memoryviews) against the reference's
        # only mode, which copies.
        "read_zero_copy": ratio(
            ours["read_zero_copy_samples_per_s"]["best"], ref["read_samples_per_s"]["best"]
        ),
        "read_zero_copy_median": ratio(
            ours["read_zero_copy_samples_per_s"]["median"], ref["read_samples_per_s"]["median"]
        ),
    }
    # No library: copying each payload out of memory into a new bytes object, against the
    # reference's read. No reader that returns bytes (one copy a value) can pass this ratio.
    floor = ours.get("copy_floor_samples_per_s")
    if floor:
        ratios["copy_floor"] = ratio(floor["best"], ref["read_samples_per_s"]["best"])
        ratios["copy_floor_median"] = ratio(floor["median"], ref["read_samples_per_s"]["median"])
    ours_shards = {k: v for k, v in ours["files"].items() if k != "index.json"}
    ref_shards = {k: v for k, v in ref["files"].items() if k != "index.json"}
    return {
        "ratios": ratios,
        "same_data": ours["data_sha256"] == ref["data_sha256"],
        "shards_identical": bool(ours_shards) and ours_shards == ref_shards,
        "index_identical": ours["files"].get("index.json") == ref["files"].get("index.json"),
        "shard_count": {"shardstream": len(ours_shards), "reference": len(ref_shards)},
        "checks_passed": (
            ours["checks"]["passed"]
            and ref["checks"]["passed"]
            and ours["data_sha256"] == ref["data_sha256"]
        ),
    }


def table(results: dict[str, Any]) -> list[list[str]]:
    """Rows of (workload, metric, shardstream, reference, ratio), a header first."""
    rows = [["workload", "metric", "shardstream", "reference", "ratio"]]
    for name, workload in results.items():
        ours, ref = workload["shardstream"], workload["reference"]
        ratios = workload["comparison"]["ratios"]
        for metric, key, ref_key, unit, fmt in (
            ("write", "write_seconds", "write_seconds", "s", "{:.3f}"),
            ("read", "read_samples_per_s", "read_samples_per_s", "samples/s", "{:,.0f}"),
            ("read_zero_copy", "read_zero_copy_samples_per_s", "read_samples_per_s",
             "samples/s", "{:,.0f}"),
            ("copy_floor", "copy_floor_samples_per_s", "read_samples_per_s",
             "samples/s", "{:,.0f}"),
        ):  # fmt: skip
            if not ours.get(key):
                continue
            for stat in ("best", "median"):
                ratio_key = metric if stat == "best" else f"{metric}_median"
                label = f"{metric} {unit} ({stat})"
                ours_cell, ref_cell = fmt.format(ours[key][stat]), fmt.format(ref[ref_key][stat])
                rows.append([name, label, ours_cell, ref_cell, f"{ratios[ratio_key]:.2f}x"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer samples (smoke test)")
    parser.add_argument(
        "--out",
        default=str(HERE / "results" / "format.json"),
        help="where the JSON with every raw number goes",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of each measurement")
    parser.add_argument(
        "--workload",
        action="append",
        choices=sorted(WORKLOADS),
        help="run only this workload (may be given more than once)",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per worker run")
    args = parser.parse_args()

    ref_python = reference_python()
    if not os.path.exists(ref_python):
        print(
            f"error: the reference interpreter {ref_python} does not exist; create .venv-ref "
            f"with mosaicml-streaming installed, or set SHARDSTREAM_REF_PYTHON",
            file=sys.stderr,
        )
        return 2
    pythons = {"shardstream": sys.executable, "reference": ref_python}
    scale = 10 if args.quick else 1
    names = args.workload or DEFAULT_WORKLOADS

    tmp = tempfile.mkdtemp(prefix="shardstream-format-bench-")
    results: dict[str, Any] = {}
    try:
        for name in names:
            spec = WORKLOADS[name]
            params = {
                "samples": spec["samples"] // scale,
                "size": spec["size"],
                "jitter": spec["jitter"],
                "kind": spec.get("kind", "bytes"),
            }
            print(
                f"[{name}] {params['samples']:,} samples of {params['size']:,} "
                f"+- {params['jitter']:,} bytes ...",
                flush=True,
            )
            workload: dict[str, Any] = {"params": params, "description": spec["description"]}
            # The reference first, then shardstream: each worker runs alone on the machine.
            for side in ("reference", "shardstream"):
                workload[side] = run_worker(
                    pythons[side], LIBS[side], name, params, args.repeats, tmp, args.timeout
                )
                print(
                    f"  {side}: done in {workload[side]['worker_wall_seconds']:.1f} s "
                    f"(import {workload[side]['import_seconds']:.2f} s, not counted)",
                    flush=True,
                )
            workload["comparison"] = compare(workload["shardstream"], workload["reference"])
            results[name] = workload
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = table(results)
    targets: dict[str, Any] = {}
    for name, workload in results.items():
        ratios = workload["comparison"]["ratios"]
        for metric, target in TARGETS.items():
            targets[f"{name}/{metric}"] = {
                "target": target,
                "ratio": ratios[metric],
                "met": ratios[metric] >= target,
            }
    checks_passed = all(w["comparison"]["checks_passed"] for w in results.values())
    first = next(iter(results.values()))
    report = {
        "benchmark": "mds-format",
        "quick": args.quick,
        "repeats": args.repeats,
        "seed": SEED,
        "order_seed": ORDER_SEED,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "versions": {
            "shardstream": first["shardstream"]["version"],
            "reference": first["reference"]["version"],
            "reference_package": "mosaicml-streaming",
            "numpy": {
                "shardstream": first["shardstream"]["numpy"],
                "reference": first["reference"]["numpy"],
            },
            "python": {
                "shardstream": first["shardstream"]["python"],
                "reference": first["reference"]["python"],
            },
        },
        "interpreters": pythons,
        "targets": targets,
        "checks_passed": checks_passed,
        "table": rows,
        "workloads": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

    print()
    print(
        f"shardstream {report['versions']['shardstream']} vs mosaicml-streaming "
        f"{report['versions']['reference']}; {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}; best of {args.repeats}"
        f"{' (QUICK: sizes / 10)' if args.quick else ''}"
    )
    print(
        "ratio > 1 means shardstream is faster (write: reference s / shardstream s; "
        "read: shardstream samples/s / reference samples/s)"
    )
    print()
    print(format_table(rows))
    print()
    for name, workload in results.items():
        comparison = workload["comparison"]
        ours, ref = workload["shardstream"], workload["reference"]
        print(
            f"[{name}] correctness: shardstream "
            f"{'PASS' if ours['checks']['passed'] else 'FAIL'}, reference "
            f"{'PASS' if ref['checks']['passed'] else 'FAIL'}; identical input data: "
            f"{'yes' if comparison['same_data'] else 'NO'}"
        )
        print(
            f"[{name}] shard files byte-identical: "
            f"{'yes' if comparison['shards_identical'] else 'NO'} "
            f"({comparison['shard_count']['shardstream']} vs "
            f"{comparison['shard_count']['reference']} shards); index.json identical: "
            f"{'yes' if comparison['index_identical'] else 'no'}"
        )
        if "copy_floor" in comparison["ratios"]:
            print(
                f"[{name}] copy floor (no library: each payload copied out of memory into new "
                f"bytes, same order and checks): "
                f"{ours['copy_floor_samples_per_s']['best']:,.0f} samples/s; a read that "
                f"returns bytes can reach at most {comparison['ratios']['copy_floor']:.2f}x "
                f"the reference here"
            )
    for key, target in targets.items():
        print(
            f"target {key} >= {target['target']}x: {target['ratio']:.2f}x -> "
            f"{'MET' if target['met'] else 'MISSED'}"
        )
    print(f"raw numbers: {out}")
    if not checks_passed:
        print("error: a correctness check failed; the numbers above are not valid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
