"""The cold-from-S3 part of ``streaming_bench.py`` (``--s3``): a first epoch from SeaweedFS.

Each epoch workload's MDS dataset is written once, uploaded to SeaweedFS on 127.0.0.1 (the
tests' launcher, auth enforced) and read by shardstream and mosaicml-streaming through their
``StreamingDataset(remote="s3://...")`` with an empty cache, the endpoint and credentials in
the environment as a user sets them. The worker's first epoch (``first_epoch``: every shard
downloaded on the way, every sample checked, every label exactly once) is the measurement;
one warm epoch follows, as in the epoch part. litdata is not measured here: it reads S3
through its own client and settings.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run_s3_cold"]


def _upload(server: Any, folder: str, name: str) -> str:
    """Every file under ``folder`` to a fresh prefix; the ``s3://`` URL of that prefix."""
    from shardstream.storage import S3Store

    remote = str(server.url(f"bench-{name}"))
    store = S3Store(remote, endpoint_url=server.endpoint, key=server.key, secret=server.secret)
    for parent, _, names in os.walk(folder):
        for file_name in names:
            path = os.path.join(parent, file_name)
            store.put_file(path, os.path.relpath(path, folder))
    return remote


def run_s3_cold(
    run: Any,
    libs: list[str],
    workers: list[int],
    workloads: dict[str, dict[str, Any]],
    write_options: dict[str, Any],
    epoch_options: dict[str, Any],
    report: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``{workload: {"params", "runs": {"workers=N": {lib: result}}}}``; ``run`` is the Runner."""
    from tests.integration.seaweedfs import run_seaweedfs

    from benchmarks.download_bench import server_environment

    results: dict[str, Any] = {}
    saved = dict(os.environ)
    root = Path(run.fresh("seaweedfs"))
    try:
        with run_seaweedfs(root) as server:
            os.environ.clear()
            os.environ.update(server_environment(server))
            for name, params in workloads.items():
                folder = run.fresh(f"s3-{name}-mds")
                run("shardstream", "write", params, out=folder, **write_options)
                remote = _upload(server, folder, name)
                shutil.rmtree(folder, ignore_errors=True)
                report(f"[s3 {name}] {params['samples']:,} samples uploaded to {remote}")
                workload: dict[str, Any] = {"params": params, "remote": remote, "runs": {}}
                for count in workers:
                    setting: dict[str, Any] = {}
                    for lib in [lib for lib in ("reference", "shardstream") if lib in libs]:
                        cache = run.fresh(f"s3-{name}-{lib}-cache")
                        try:
                            result = run(
                                lib, "epoch", params, data=remote, cache=cache, workers=count,
                                epochs=1, **epoch_options,
                            )  # fmt: skip
                        except RuntimeError as exc:
                            if lib == "shardstream":  # our failure ends the benchmark
                                raise
                            # A peer that crashes is a finding, not a reason to lose the run.
                            setting[lib] = {"failed": _last_error(str(exc))}
                            report(f"  workers={count} {lib}: FAILED: {setting[lib]['failed']}")
                            continue
                        finally:
                            shutil.rmtree(cache, ignore_errors=True)
                        first = result["first_epoch"]
                        setting[lib] = {
                            "cold_samples_per_s": first["samples_per_s"],
                            "cold_seconds": first["seconds"],
                            "checks_passed": result["checks_passed"],
                            "version": result["version"],
                            "result": result,
                        }
                        report(
                            f"  workers={count} {lib}: cold {first['samples_per_s']:,.0f} "
                            f"samples/s, checks {'PASS' if result['checks_passed'] else 'FAIL'}"
                        )
                    workload["runs"][f"workers={count}"] = setting
                results[name] = workload
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(root, ignore_errors=True)
    return results


def _last_error(text: str) -> str:
    """The last line of a worker's output that names an exception (else its last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return (errors or lines or ["(no output)"])[-1][:300]
