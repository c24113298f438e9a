"""Spark -> MDS benchmark: shardstream's dataframe_to_mds beside mosaicml-streaming's, one run.

Usage::

    .venv/bin/python benchmarks/spark_bench.py [--quick] [--out benchmarks/results/spark.json]

Each library's half runs in ``spark_worker.py`` under its own venv's Python (shardstream under
the current interpreter, mosaicml-streaming under ``$SHARDSTREAM_REF_PYTHON``, by default
``<repo>/.venv-ref/bin/python``, which needs pyspark: ``scripts/setup-ref-venv --spark``), each
with its own local[2] SparkSession, one after the other. Both build the same DataFrame; the
driver checks they did (a digest of every row), then reads both outputs back with
shardstream's ``LocalDataset``: every id exactly once, and the same samples from both.
See ``benchmarks/README.md`` for what is measured and how to read the output.
"""

from __future__ import annotations

import argparse
import hashlib
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

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "spark_worker.py"

#: The workloads at full size; --quick divides the rows by QUICK_SCALE.
WORKLOADS: list[dict[str, Any]] = [
    {
        "name": "tabular",
        "workload": "tabular",
        "rows": 1_000_000,
        "partitions": 8,
        "size": 1024,
        "jitter": 0,
        "compressions": ["none", "zstd"],
        "description": "1,000,000 rows: long id, float, ~100-char text, 1 KiB binary, "
        "array<float> of 16",
    },
    {
        "name": "image",
        "workload": "image",
        "rows": 20_000,
        "partitions": 8,
        "size": 100 * 1024,
        "jitter": 10 * 1024,
        "compressions": ["none", "zstd"],
        "description": "20,000 rows: long id, int label, 90-110 KiB binary (image-like)",
    },
]
QUICK_SCALE = 50
TARGET = 1.5
SEED = 20240601
LIBS = {"shardstream": "shardstream", "reference": "streaming"}

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for benchmarks.report
from benchmarks.report import format_table, machine, worker_env  # noqa: E402


def reference_python() -> str:
    return os.environ.get("SHARDSTREAM_REF_PYTHON") or str(REPO / ".venv-ref" / "bin" / "python")


def run_worker(
    python: str,
    side: str,
    specs: list[dict[str, Any]],
    repeats: int,
    tmp: str,
    timeout: float,
) -> dict[str, Any]:
    result_path = os.path.join(tmp, f"result-{side}.json")
    command = [
        python,
        str(WORKER),
        "--lib",
        LIBS[side],
        "--workloads",
        json.dumps(specs),
        "--seed",
        str(SEED),
        "--repeats",
        str(repeats),
        "--tmp",
        tmp,
        "--result",
        result_path,
    ]
    env = worker_env(PYTHONHASHSEED="0")
    load_before = os.getloadavg()
    started = time.perf_counter()
    completed = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"the {side} worker failed (exit {completed.returncode}):\n"
            f"$ {' '.join(command)}\n{completed.stdout}\n{completed.stderr[-20000:]}"
        )
    print(completed.stdout, end="", flush=True)
    with open(result_path, encoding="utf-8") as handle:
        result: dict[str, Any] = json.load(handle)
    result["worker_wall_seconds"] = time.perf_counter() - started
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    return result


def sample_digest(sample: dict[str, Any]) -> bytes:
    """8 bytes that change with any value of the sample (for comparing two outputs)."""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(sample):
        value = sample[name]
        if isinstance(value, np.ndarray):
            raw = value.dtype.str.encode() + repr(value.shape).encode() + value.tobytes()
        elif isinstance(value, (bytes, memoryview)):
            raw = bytes(value)
        elif isinstance(value, str):
            raw = value.encode("utf-8")
        else:
            raw = repr(value).encode()
        digest.update(name.encode() + len(raw).to_bytes(8, "little") + raw)
    return digest.digest()


def read_back(folder: str, rows: int) -> dict[str, Any]:
    """Read a dataset with shardstream: sample count, ids each exactly once, a digest by id."""
    from shardstream import LocalDataset

    dataset = LocalDataset(folder)
    count = len(dataset)
    seen = np.zeros(rows, dtype=np.int64)
    digests = bytearray(8 * rows)
    bad_ids = 0
    for index in range(count):
        sample = dataset[index]
        sample_id = int(sample["id"])
        if not 0 <= sample_id < rows:
            bad_ids += 1
            continue
        seen[sample_id] += 1
        digests[8 * sample_id : 8 * sample_id + 8] = sample_digest(sample)
    missing = int((seen == 0).sum())
    repeated = int((seen > 1).sum())
    return {
        "samples": count,
        "missing_ids": missing,
        "repeated_ids": repeated,
        "out_of_range_ids": bad_ids,
        "passed": count == rows and missing == 0 and repeated == 0 and bad_ids == 0,
        "digest": hashlib.sha256(digests).hexdigest(),
    }


def verify(spec: dict[str, Any], ours: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Check both outputs of each compression, then delete them."""
    checks: dict[str, Any] = {
        "same_input_data": ours["data_digest"] == ref["data_digest"],
        "compressions": {},
    }
    for compression in spec["compressions"]:
        ours_check = read_back(ours["runs"][compression]["folder"], spec["rows"])
        ref_check = read_back(ref["runs"][compression]["folder"], spec["rows"])
        checks["compressions"][compression] = {
            "shardstream": ours_check,
            "reference": ref_check,
            "same_samples": ours_check["digest"] == ref_check["digest"],
        }
        for side in (ours, ref):
            shutil.rmtree(side["runs"][compression]["folder"], ignore_errors=True)
    checks["passed"] = checks["same_input_data"] and all(
        c["shardstream"]["passed"] and c["reference"]["passed"] and c["same_samples"]
        for c in checks["compressions"].values()
    )
    return checks


def table(report: dict[str, Any]) -> list[list[str]]:
    """Rows of the printed table, a header first."""
    rows = [
        [
            "workload",
            "compression",
            "shardstream s",
            "reference s",
            "ratio",
            "median ratio",
            "shardstream CPU s",
            "reference CPU s",
            "CPU ratio",
            "MB (shardstream / reference)",
        ]
    ]
    for name, workload in report["workloads"].items():
        for compression, row in workload["comparison"].items():
            ours = workload["shardstream"]["runs"][compression]
            ref = workload["reference"]["runs"][compression]
            size = f"{ours['bytes'] / 1e6:,.0f} / {ref['bytes'] / 1e6:,.0f}"
            rows.append(
                [
                    name,
                    compression,
                    f"{ours['seconds']['best']:.2f}",
                    f"{ref['seconds']['best']:.2f}",
                    f"{row['ratio']:.2f}x",
                    f"{row['median_ratio']:.2f}x",
                    f"{ours['cpu_seconds']['best']:.2f}",
                    f"{ref['cpu_seconds']['best']:.2f}",
                    f"{row['cpu_ratio']:.2f}x",
                    size,
                ]
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"rows / {QUICK_SCALE} (smoke test)")
    parser.add_argument(
        "--out", default=str(HERE / "results" / "spark.json"), help="where the JSON goes"
    )
    parser.add_argument("--repeats", type=int, help="timed runs of each (default 3; quick 1)")
    parser.add_argument(
        "--workload",
        action="append",
        choices=[spec["name"] for spec in WORKLOADS],
        help="run only this workload (may be given more than once)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per worker run")
    args = parser.parse_args()

    ref_python = reference_python()
    if not os.path.exists(ref_python):
        print(
            f"error: the reference interpreter {ref_python} does not exist; run "
            f"scripts/setup-ref-venv --spark, or set SHARDSTREAM_REF_PYTHON",
            file=sys.stderr,
        )
        return 2
    pythons = {"shardstream": sys.executable, "reference": ref_python}
    repeats = args.repeats or (1 if args.quick else 3)
    specs = [
        {
            key: value // QUICK_SCALE if args.quick and key == "rows" else value
            for key, value in spec.items()
            if key != "description"
        }
        for spec in WORKLOADS
        if not args.workload or spec["name"] in args.workload
    ]
    report: dict[str, Any] = {
        "benchmark": "spark-to-mds",
        "quick": args.quick,
        "repeats": repeats,
        "seed": SEED,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "interpreters": pythons,
    }
    tmp = tempfile.mkdtemp(prefix="shardstream-spark-bench-")
    results: dict[str, Any] = {}
    try:
        # The reference first, then shardstream: each worker runs alone (bar other users).
        for side in ("reference", "shardstream"):
            print(f"[{side}] {', '.join(s['name'] for s in specs)} ...", flush=True)
            results[side] = run_worker(pythons[side], side, specs, repeats, tmp, args.timeout)
            print(
                f"  {side}: done in {results[side]['worker_wall_seconds']:.1f} s (import "
                f"{results[side]['import_seconds']:.2f} s, Spark session "
                f"{results[side]['session_seconds']:.1f} s, neither counted)",
                flush=True,
            )
        workloads: dict[str, Any] = {}
        for spec in specs:
            name = spec["name"]
            ours = results["shardstream"]["workloads"][name]
            ref = results["reference"]["workloads"][name]
            comparison = {
                compression: {
                    "ratio": ref["runs"][compression]["seconds"]["best"]
                    / ours["runs"][compression]["seconds"]["best"],
                    "median_ratio": ref["runs"][compression]["seconds"]["median"]
                    / ours["runs"][compression]["seconds"]["median"],
                    "cpu_ratio": ref["runs"][compression]["cpu_seconds"]["best"]
                    / ours["runs"][compression]["cpu_seconds"]["best"],
                }
                for compression in spec["compressions"]
            }
            workloads[name] = {
                "params": spec,
                "description": next(w["description"] for w in WORKLOADS if w["name"] == name),
                "shardstream": ours,
                "reference": ref,
                "comparison": comparison,
                "checks": verify(spec, ours, ref),
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    report["machine"]["load_average_at_end"] = os.getloadavg()
    report["load_average"] = {side: results[side]["load_average"] for side in results}
    report["versions"] = {
        side: {
            key: results[side][key]
            for key in ("version", "pyspark", "pyarrow", "pandas", "numpy", "python")
        }
        for side in results
    }
    report["versions"]["reference_package"] = "mosaicml-streaming"
    report["session_seconds"] = {side: results[side]["session_seconds"] for side in results}
    report["import_seconds"] = {side: results[side]["import_seconds"] for side in results}
    report["workloads"] = workloads
    report["targets"] = {
        f"{name}/{compression}": {
            "target": TARGET,
            "ratio": row["ratio"],
            "met": row["ratio"] >= TARGET,
        }
        for name, workload in workloads.items()
        for compression, row in workload["comparison"].items()
    }
    report["checks_passed"] = all(w["checks"]["passed"] for w in workloads.values())
    rows = table(report)
    report["table"] = rows
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

    versions = report["versions"]
    print()
    print(
        f"shardstream {versions['shardstream']['version']} vs mosaicml-streaming "
        f"{versions['reference']['version']}, pyspark {versions['shardstream']['pyspark']} "
        f"local[2]; {os.cpu_count()} CPUs, {platform.platform()}; best of {repeats}"
        f"{f' (QUICK: rows / {QUICK_SCALE})' if args.quick else ''}"
    )
    print(
        "ratio = reference seconds / shardstream seconds (> 1: shardstream is faster); CPU: "
        "user + system seconds of the worker's whole process tree (JVM and Python workers)"
    )
    print()
    print(format_table(rows))
    print()
    for name, workload in workloads.items():
        ours, ref = workload["shardstream"], workload["reference"]
        print(
            f"[{name}] Spark alone (a mapInArrow that only counts the rows): "
            f"{ours['spark_floor_seconds']:.2f} s, CPU {ours['spark_floor_cpu_seconds']:.2f} s "
            f"(in shardstream's session); {ref['spark_floor_seconds']:.2f} s, CPU "
            f"{ref['spark_floor_cpu_seconds']:.2f} s (in the reference's)"
        )
        checks = workload["checks"]
        for compression, check in checks["compressions"].items():
            print(
                f"[{name}/{compression}] read back: shardstream "
                f"{'PASS' if check['shardstream']['passed'] else 'FAIL'} "
                f"({check['shardstream']['samples']:,} samples), reference "
                f"{'PASS' if check['reference']['passed'] else 'FAIL'} "
                f"({check['reference']['samples']:,} samples); same samples: "
                f"{'yes' if check['same_samples'] else 'NO'}"
            )
        print(f"[{name}] same input data: {'yes' if checks['same_input_data'] else 'NO'}")
    for side, load in report["load_average"].items():
        print(
            f"load average (1 min) around the {side} worker: {load['before'][0]:.2f} -> "
            f"{load['after'][0]:.2f}"
        )
    for key, target in report["targets"].items():
        print(
            f"target {key} >= {target['target']}x: {target['ratio']:.2f}x -> "
            f"{'MET' if target['met'] else 'MISSED'}"
        )
    print(f"raw numbers: {out}")
    if not report["checks_passed"]:
        print("error: a correctness check failed; the numbers above are not valid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
