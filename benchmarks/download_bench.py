"""Shard download benchmark: shardstream beside mosaicml-streaming, from a local SeaweedFS.

Usage::

    .venv/bin/python benchmarks/download_bench.py [--quick] [--out benchmarks/results/download.json]

Starts SeaweedFS on 127.0.0.1 (the tests' launcher), uploads random shards, then downloads them
with each library in ``download_worker.py`` under its own venv's Python (shardstream under the
current interpreter, mosaicml-streaming under ``$SHARDSTREAM_REF_PYTHON``, by default
``<repo>/.venv-ref/bin/python``), one after the other. See ``benchmarks/README.md``.
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
WORKER = HERE / "download_worker.py"
sys.path.insert(0, str(REPO))  # for tests.integration.seaweedfs, the tests' server launcher

from tests.integration.seaweedfs import S3Server, run_seaweedfs  # noqa: E402

from benchmarks.report import format_table, worker_env  # noqa: E402
from shardstream.storage import S3Store  # noqa: E402

MiB = 1 << 20
#: name -> shard count, shard size (full size; --quick uses QUICK).
WORKLOADS: dict[str, dict[str, int]] = {
    "16x64MiB": {"shards": 16, "size": 64 * MiB},
    "256x1MiB": {"shards": 256, "size": 1 * MiB},
}
QUICK: dict[str, dict[str, int]] = {
    "16x64MiB": {"shards": 2, "size": 2 * MiB},
    "256x1MiB": {"shards": 8, "size": 64 << 10},
}
TARGET = 2.0
SEED = 20261122
#: (row name, python side, worker --lib, --shard-concurrency)
SIDES = [
    ("reference", "reference", "streaming", 1),
    ("shardstream", "shardstream", "shardstream", 1),
    ("shardstream, 4 shards at a time", "shardstream", "shardstream", 4),
]


def reference_python() -> str:
    return os.environ.get("SHARDSTREAM_REF_PYTHON") or str(REPO / ".venv-ref" / "bin" / "python")


def server_environment(server: S3Server) -> dict[str, str]:
    """The environment a user would set: endpoint and credentials, nothing that leaves loopback."""
    environ = worker_env()
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        environ.pop(name, None)
    environ.update(
        S3_ENDPOINT_URL=server.endpoint,
        AWS_ACCESS_KEY_ID=server.key,
        AWS_SECRET_ACCESS_KEY=server.secret,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE="/nonexistent/shardstream-bench-aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/shardstream-bench-aws-creds",
        PYTHONHASHSEED="0",
    )
    return environ


def upload(server: S3Server, name: str, spec: dict[str, int], tmp: str) -> tuple[str, str]:
    """Put ``spec['shards']`` random shards under a fresh prefix; return (remote, manifest path)."""
    remote = server.url(f"bench-{name}")
    store = S3Store(remote, endpoint_url=server.endpoint, key=server.key, secret=server.secret)
    rng = np.random.default_rng(SEED)
    source = os.path.join(tmp, "source.bin")
    manifest = []
    for index in range(spec["shards"]):
        data = rng.bytes(spec["size"])
        with open(source, "wb") as handle:
            handle.write(data)
        shard = f"shard.{index:05d}.mds"
        store.put_file(source, shard)
        manifest.append([shard, len(data), hashlib.sha256(data).hexdigest()])
    os.remove(source)
    path = os.path.join(tmp, f"manifest-{name}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    return remote, path


def run_worker(
    python: str,
    lib: str,
    concurrency: int,
    remote: str,
    manifest: str,
    tmp: str,
    repeats: int,
    environ: dict[str, str],
    timeout: float,
) -> dict[str, Any]:
    result_path = os.path.join(tmp, f"result-{lib}-{concurrency}.json")
    dest = os.path.join(tmp, f"dest-{lib}-{concurrency}")
    command = [
        python, str(WORKER), "--lib", lib, "--remote", remote, "--manifest", manifest,
        "--dest", dest, "--repeats", str(repeats), "--shard-concurrency", str(concurrency),
        "--result", result_path,
    ]  # fmt: skip
    started = time.perf_counter()
    completed = subprocess.run(
        command, env=environ, capture_output=True, text=True, timeout=timeout, check=False
    )
    shutil.rmtree(dest, ignore_errors=True)
    if completed.returncode != 0:
        raise RuntimeError(
            f"the {lib} worker failed (exit {completed.returncode}):\n"
            f"$ {' '.join(command)}\n{completed.stdout}\n{completed.stderr}"
        )
    with open(result_path, encoding="utf-8") as handle:
        result: dict[str, Any] = json.load(handle)
    result["worker_wall_seconds"] = time.perf_counter() - started
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes (a smoke test)")
    parser.add_argument("--out", default=str(HERE / "results" / "download.json"))
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per side")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per worker run")
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
    workloads = QUICK if args.quick else WORKLOADS
    tmp = tempfile.mkdtemp(prefix="shardstream-download-bench-")
    results: dict[str, Any] = {}
    try:
        with run_seaweedfs(Path(tmp) / "seaweedfs") as server:
            environ = server_environment(server)
            for name, spec in workloads.items():
                print(
                    f"[{name}] uploading {spec['shards']} x {spec['size']:,} bytes ...", flush=True
                )
                remote, manifest = upload(server, name, spec, tmp)
                sides: dict[str, Any] = {}
                for row, side, lib, concurrency in SIDES:
                    sides[row] = run_worker(
                        pythons[side], lib, concurrency, remote, manifest, tmp,
                        args.repeats, environ, args.timeout,
                    )  # fmt: skip
                    print(f"  {row}: {sides[row]['mb_per_s']['best']:,.0f} MB/s", flush=True)
                reference = sides["reference"]["mb_per_s"]["best"]
                results[name] = {
                    "params": spec,
                    "sides": sides,
                    "ratios": {
                        row: side["mb_per_s"]["best"] / reference for row, side in sides.items()
                    },
                }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = [["workload", "downloader", "MB/s (best)", "MB/s (median)", "vs reference"]]
    for name, workload in results.items():
        for row, side in workload["sides"].items():
            rows.append(
                [
                    name,
                    row,
                    f"{side['mb_per_s']['best']:,.0f}",
                    f"{side['mb_per_s']['median']:,.0f}",
                    f"{workload['ratios'][row]:.2f}x",
                ]
            )
    checks_passed = all(
        side["checks"]["passed"] for w in results.values() for side in w["sides"].values()
    )
    targets = {
        name: {
            "target": TARGET,
            "ratio": w["ratios"]["shardstream"],
            "met": w["ratios"]["shardstream"] >= TARGET,
        }
        for name, w in results.items()
    }
    first = next(iter(results.values()))["sides"]
    report = {
        "benchmark": "download",
        "quick": args.quick,
        "repeats": args.repeats,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "versions": {
            "shardstream": first["shardstream"]["version"],
            "reference": first["reference"]["version"],
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
        f"{report['versions']['reference']}; SeaweedFS on 127.0.0.1; {os.cpu_count()} CPUs; "
        f"best of {args.repeats}{' (QUICK: toy sizes)' if args.quick else ''}"
    )
    print()
    print(format_table(rows))
    print()
    for name, target in targets.items():
        print(
            f"target {name}: shardstream >= {TARGET}x the reference: {target['ratio']:.2f}x -> "
            f"{'MET' if target['met'] else 'MISSED'}"
        )
    print(f"correctness (sizes and sha256 of every file): {'PASS' if checks_passed else 'FAIL'}")
    print(f"raw numbers: {out}")
    if not checks_passed:
        print(
            "error: a downloaded file was wrong; the numbers above are not valid", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
