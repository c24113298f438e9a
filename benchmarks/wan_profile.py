"""Where a cold epoch's wall time goes over the emulated link: shardstream alone, traced.

Usage::

    .venv/bin/python benchmarks/wan_profile.py [--workloads small-1KiB,...] [--workers 0,2]
        [--repeats 3] [--quick] [--out benchmarks/results/wan-profile.json]
        [--variants ranges,no-ranges,obstore,base --base-src /tmp/base/src] [--show]

Starts SeaweedFS and the link (``wan_link.py``, the driver's defaults), writes and uploads each
workload of ``wan_bench.py`` once, then runs cold epochs (an empty cache each) in a child
process that records every store request (start, end, bytes; DataLoader workers too) and the
time each batch reached the loop. Per run it prints the phases of the epoch:

* ``start``: from ``iter(loader)`` to the first shard request (the client, listing, index);
* ``fetch``: from the first shard request to the last byte, and the link's rate over it;
* ``idle``: time within ``fetch`` with no request in flight, and the mean requests in flight;
* ``tail``: from the last byte to the last batch (the reading that follows the transfer);
* ``first batch``: when the first batch reached the loop;
* ``check``: seconds the loop spent checking batches (the benchmark's own work, in ``tail``);
* ``main_cpu``, ``workers_cpu``: CPU seconds of the reading process over the epoch, and of its
  DataLoader workers (every thread; the workers' start and the whole epoch).

``--variants`` alternates runs of this tree as it is (``ranges``), with the first batch's
range reads off (``no-ranges``), with listings through obstore too (``obstore``) and of
another source tree (``base``, ``--base-src``), so that each is measured beside the others on
the same link and load. ``--show`` prints every request.

Every request is timed in the process that made it with ``time.perf_counter`` (one clock
across the processes of this machine).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
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
sys.path.insert(0, str(REPO))

SEED = 20261127
BATCH_SIZE = 256


def _trace(folder: str) -> None:
    """Record every store request of this process (and of its forked workers) under ``folder``."""
    import threading

    from shardstream.storage import store_base

    # A store may serve a call through another store (S3 reads through obstore): only the
    # outermost call of a thread is a request, else its bytes would count twice.
    depth = threading.local()

    def wrap(name: str) -> None:
        original = getattr(store_base.BaseStore, name)

        def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(depth, "inside", False):
                return original(self, *args, **kwargs)
            depth.inside = True
            started = time.perf_counter()
            try:
                value = original(self, *args, **kwargs)
            finally:
                depth.inside = False
            ended = time.perf_counter()
            size = len(value) if isinstance(value, (bytes, bytearray, memoryview)) else 0
            if name == "get_bytes_info":
                size = len(value[0])
            key = args[0] if args and isinstance(args[0], str) else ""
            line = json.dumps([name, key, started, ended, size]) + "\n"
            path = os.path.join(folder, f"{os.getpid()}.jsonl")
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(line)
            return value

        setattr(store_base.BaseStore, name, traced)

    for name in ("get_range", "get_bytes", "get_bytes_info", "info", "list_info"):
        wrap(name)


def child(args: argparse.Namespace) -> None:
    """One cold epoch, traced; its timeline to ``args.result``."""
    from benchmarks.streaming_worker import Checker, Payloads, make_loader

    spec = json.loads(args.spec)
    payloads = Payloads(spec["samples"], spec["size"], spec["jitter"], SEED, spec.get("tokens", 0))
    checker = Checker(payloads)
    _trace(args.trace)
    if args.no_ranges:
        from shardstream import StreamingDataLoader, StreamingDataset
        from shardstream.pipeline.policy import ReadPolicy

        dataset = StreamingDataset(
            remote=args.data,
            local=args.cache,
            batch_size=BATCH_SIZE,
            shuffle=True,
            read_policy=ReadPolicy(first_batch_ranges=False),
        )
        loader = StreamingDataLoader(dataset, batch_size=BATCH_SIZE, num_workers=args.workers)
    else:
        _, loader = make_loader("shardstream", args.data, args.cache, BATCH_SIZE, args.workers,
                                True, tokens=bool(spec.get("tokens")))  # fmt: skip
    batches = []
    checking = 0.0  # the benchmark's own check of each batch (every library's rows pay it)
    cpu = time.process_time()
    started = time.perf_counter()
    for batch in loader:
        arrived = time.perf_counter()
        checker.batch(batch)
        checking += time.perf_counter() - arrived
        batches.append(arrived)
    ended = time.perf_counter()
    main_cpu = time.process_time() - cpu
    del loader  # its workers end and are waited for: their CPU counts as the children's
    gc.collect()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    checks = checker.end_epoch()
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump({"started": started, "ended": ended, "batches": batches, "checks": checks,
                   "main_cpu": main_cpu, "check": checking,
                   "workers_cpu": children.ru_utime + children.ru_stime}, handle)  # fmt: skip


def phases(
    result: dict[str, Any], trace: str, link_rate: float, show: bool = False
) -> dict[str, float]:
    """The epoch's phases from its requests and batch times (seconds from ``iter``)."""
    t0 = result["started"]
    requests = []
    for name in os.listdir(trace):
        pid = int(name.split(".")[0])
        with open(os.path.join(trace, name), encoding="utf-8") as handle:
            requests += [[*json.loads(line), pid] for line in handle]
    shard = [r for r in requests if r[1].endswith(".mds") or r[0] == "get_range"]
    first_request = min(r[2] for r in shard)
    last_byte = max(r[3] for r in shard)
    moved = sum(r[4] for r in requests)
    # Requests in flight over the fetch: idle time and the mean depth.
    events = sorted([(r[2], 1) for r in shard] + [(r[3], -1) for r in shard])
    depth, idle, area, previous = 0, 0.0, 0.0, first_request
    for when, step in events:
        span = when - previous
        if depth == 0:
            idle += span
        area += depth * span
        depth += step
        previous = when
    fetch = last_byte - first_request
    if show:
        for r in sorted(requests, key=lambda r: r[2]):
            print(f"  {r[0]:14s} {r[1][-24:]:24s} {r[2] - t0:7.3f} {r[3] - t0:7.3f} {r[4]:>10}"
                  f"  pid {r[5]}")  # fmt: skip
    batches = result["batches"]
    return {
        "epoch": result["ended"] - t0,
        "start": first_request - t0,
        "fetch": fetch,
        "fetch_of_link": moved / link_rate / fetch,
        "idle": idle,
        "mean_in_flight": area / fetch,
        "tail": result["ended"] - last_byte,
        "first_batch": batches[0] - t0 if batches else float("nan"),
        "of_link": moved / link_rate / (result["ended"] - t0),
        "requests": len(requests),
        "mb": moved / 1e6,
        "main_cpu": result["main_cpu"],
        "workers_cpu": result.get("workers_cpu", 0.0),
        "check": result.get("check", 0.0),
        "passed": float(result["checks"]["passed"]),
    }


def main() -> int:
    from tests.integration.seaweedfs import run_seaweedfs

    from benchmarks.download_bench import server_environment
    from benchmarks.wan_bench import SHARD_BYTES, WORKLOADS, linked, scratch, upload_folder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ranges", action="store_true", help="first_batch_ranges off")
    parser.add_argument(
        "--variants", default="ranges", help="alternated: ranges (as is), no-ranges, obstore, base"
    )
    parser.add_argument("--base-src", help="the variant 'base' reads with this src folder")
    parser.add_argument("--show", action="store_true", help="print every request")
    parser.add_argument("--quick", action="store_true", help="1/16 of the sizes")
    parser.add_argument("--link-mbps", type=float, default=125.0)
    parser.add_argument("--out", default=str(HERE / "results" / "wan-profile.json"))
    args = parser.parse_args()
    if args.child:
        args.workers = int(args.workers)
        child(args)
        return 0
    from benchmarks.streaming_worker import Payloads
    from shardstream import MDSWriter

    variants = args.variants.split(",")
    report: dict[str, Any] = {}
    with (
        scratch("shardstream-wan-profile-") as tmp,
        run_seaweedfs(Path(tmp) / "seaweedfs") as server,
        linked(server, tmp, ["--link-mbps", str(args.link_mbps)], "profile") as link,
    ):
        for name in args.workloads.split(","):
            spec = dict(WORKLOADS[name])
            spec["samples"] //= 16 if args.quick else 1
            payloads = Payloads(spec["samples"], spec["size"], spec["jitter"], SEED,
                                spec.get("tokens", 0))  # fmt: skip
            folder = os.path.join(tmp, name)
            with MDSWriter(out=folder, columns=payloads.columns, compression=None,
                           hashes=None, size_limit=SHARD_BYTES) as writer:  # fmt: skip
                for index in range(payloads.samples):
                    writer.write(payloads.sample(index))
            remote = upload_folder(server, folder, name)
            shutil.rmtree(folder)
            os.environ.clear()
            os.environ.update(server_environment(server), S3_ENDPOINT_URL=link.endpoint,
                              AWS_ENDPOINT_URL=link.endpoint)  # fmt: skip
            for workers in [int(w) for w in args.workers.split(",")]:
                runs = []
                for repeat in range(args.repeats * len(variants)):
                    variant = variants[repeat % len(variants)]
                    cache = tempfile.mkdtemp(dir=tmp)
                    trace = tempfile.mkdtemp(dir=tmp)
                    result_path = os.path.join(trace, "result.json")
                    traces = os.path.join(trace, "requests")
                    os.makedirs(traces)
                    environ = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}:{REPO}")
                    if variant == "base":  # another source tree (--base-src)
                        environ["PYTHONPATH"] = f"{args.base_src}:{REPO}"
                    if variant == "obstore":  # listings through obstore too
                        environ["SHARDSTREAM_S3_CLIENT"] = "obstore"
                    subprocess.run(
                        [sys.executable, __file__, "--child", "--spec", json.dumps(spec),
                         "--data", remote, "--cache", cache, "--trace", traces,
                         "--result", result_path, "--workers", str(workers),
                         *(["--no-ranges"] if variant == "no-ranges" else [])],
                        env=environ, check=True, timeout=600,
                    )  # fmt: skip
                    with open(result_path, encoding="utf-8") as handle:
                        result = json.load(handle)
                    found = phases(result, traces, args.link_mbps * 1e6, args.show)
                    runs.append({"variant": variant, **found})
                    print(f"{name} w={workers} {variant}: " + ", ".join(
                        f"{k} {v:.3f}" for k, v in found.items()), flush=True)  # fmt: skip
                    shutil.rmtree(cache, ignore_errors=True)
                    shutil.rmtree(trace, ignore_errors=True)
                for variant in variants:
                    mine = [r for r in runs if r["variant"] == variant]
                    median = {k: statistics.median(r[k] for r in mine)
                              for k in found}  # fmt: skip
                    report[f"{name} w={workers} {variant}"] = {
                        "runs": mine,
                        "median": median,
                    }
                    print(
                        f"== {name} w={workers} {variant} median: "
                        + ", ".join(f"{k} {v:.3f}" for k, v in median.items()),
                        flush=True,
                    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
