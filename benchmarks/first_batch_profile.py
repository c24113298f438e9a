"""Where a cold first batch's time goes, request by request, through the emulated link.

Usage::

    .venv/bin/python benchmarks/first_batch_profile.py [--shards 10000] [--repeats 3]
        [--workers 0] [--latency-ms 30 --jitter-ms 5 --connection-mbps 80 --link-mbps 125]

Starts SeaweedFS and the emulated link (``wan_link.py``) as ``wan_bench.py`` does, writes and
uploads the first-batch rows' dataset (tiny shards of 10 samples), then runs a cold first
batch (an empty cache; ``--workers`` forked DataLoader workers, default none) in a fresh
process per repeat, with every store request of every process timed (its start and end, from
the loader's creation): the listing's pages, the index, the ranges, the whole shards. Prints
each kind's span and the requests in flight and, with workers, each worker's fork, requests,
last answer, first sample and CPU time to it. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))


def child(url: str, cache: str, batch_size: int, workers: int, trace: str) -> None:
    """One cold first batch, its store requests timed in every process; its end as JSON.

    Each process (the loader's and each forked DataLoader worker) appends its requests, and
    the workers their fork and first sample, to ``trace/<pid>.jsonl`` (``time.perf_counter``
    is one clock for the processes of a machine).
    """
    from shardstream.storage import store_base

    lock = threading.Lock()

    def record(name: str, key: str, begun: float, ended: float) -> None:
        line = json.dumps([name, key, begun, ended]) + "\n"
        with lock, open(os.path.join(trace, f"{os.getpid()}.jsonl"), "a") as handle:
            handle.write(line)

    # A store may serve a call through another store (S3 reads through obstore): only the
    # outermost call of a thread is a request.
    depth = threading.local()

    def timed(name: str, method: Any) -> Any:
        def wrapper(self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            if getattr(depth, "inside", False):
                return method(self, key, *args, **kwargs)
            depth.inside = True
            begun = time.perf_counter()
            try:
                return method(self, key, *args, **kwargs)
            finally:
                depth.inside = False
                record(name, key, begun, time.perf_counter())

        return wrapper

    base = store_base.BaseStore
    base.get_range = timed("range", base.get_range)  # type: ignore[method-assign]
    if hasattr(base, "get_range_info"):  # a shard's first range, naming its version
        base.get_range_info = timed("range", base.get_range_info)  # type: ignore[method-assign]
    base.get_bytes = timed("get", base.get_bytes)  # type: ignore[method-assign]
    base.get_bytes_info = timed("get", base.get_bytes_info)  # type: ignore[method-assign]
    base._list_page = timed("list page", base._list_page)  # type: ignore[method-assign]
    for cls in base.__subclasses__() + [
        c for s in base.__subclasses__() for c in s.__subclasses__()
    ]:
        if "_list_page" in vars(cls):
            cls._list_page = timed("list page", vars(cls)["_list_page"])  # type: ignore[method-assign]
    import shardstream.loader  # noqa: F401 (imported whole first, as the benchmark's worker does)
    from shardstream.cache import sample_ranges
    from shardstream.dataset import streaming

    ranged: list[float] = []
    views = sample_ranges.SampleRanges.views

    def timed_views(self: Any, *args: Any, **kwargs: Any) -> Any:
        cpu = time.process_time()
        try:
            return views(self, *args, **kwargs)
        finally:
            ranged.append(time.process_time() - cpu)

    sample_ranges.SampleRanges.views = timed_views  # type: ignore[method-assign]
    os.register_at_fork(after_in_child=lambda: record("forked", "", *[time.perf_counter()] * 2))
    samples = streaming.StreamingDataset.__iter__

    def first_sample(self: Any) -> Any:
        iterator = samples(self)
        value = next(iterator)
        now = time.perf_counter()
        record(f"worker's first sample, CPU {time.process_time():.3f} s", "", now, now)
        yield value
        yield from iterator

    if workers:
        streaming.StreamingDataset.__iter__ = first_sample  # type: ignore[method-assign]
    from benchmarks.streaming_worker import make_loader

    profile = cProfile.Profile() if os.environ.get("FIRST_BATCH_CPROFILE") else None
    origin = time.perf_counter()
    cpu = time.process_time()
    if profile is not None:
        profile.enable()
    _, loader = make_loader("shardstream", url, cache, batch_size, workers)
    constructed = time.perf_counter() - origin
    next(iter(loader))
    first = time.perf_counter() - origin
    if profile is not None:
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    print(json.dumps({"origin": origin, "constructed": constructed, "first": first,
                      "cpu": time.process_time() - cpu, "ranges_cpu": sum(ranged),
                      "pid": os.getpid()}))  # fmt: skip


def gathered(run: dict[str, Any], trace: str) -> list[tuple[str, str, float, float, int]]:
    """Every process's events, ``(name, key, begun, ended, pid)``, from the loader's creation."""
    events = []
    for name in os.listdir(trace):
        pid = int(name.split(".")[0])
        with open(os.path.join(trace, name), encoding="utf-8") as handle:
            for line in handle:
                kind, key, begun, ended = json.loads(line)
                events.append((kind, key, begun - run["origin"], ended - run["origin"], pid))
    return sorted(events, key=lambda event: event[2])


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """Each kind of request's count and span and the most in flight; each worker's marks."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    workers: dict[int, dict[str, Any]] = {}
    for name, key, begun, ended, pid in run["events"]:
        if pid != run["pid"]:
            worker = workers.setdefault(pid, {"requests": 0})
            if name == "forked":
                worker["forked"] = round(begun, 3)
            elif name.startswith("worker's first sample"):
                worker["first sample"] = round(begun, 3)
                worker["CPU, s"] = float(name.rsplit("CPU ", 1)[1].split()[0])
            else:
                worker["requests"] += 1
                worker["last answer"] = round(max(worker.get("last answer", 0.0), ended), 3)
        if name == "forked" or name.startswith("worker's"):
            continue
        kind = "index" if key.endswith("index.json") else name
        kinds.setdefault(kind, []).append((begun, ended))
    out: dict[str, Any] = {"first batch, s": round(run["first"], 3), "CPU, s": round(run["cpu"], 3),
                           "ranges CPU, s": round(run["ranges_cpu"], 3),
                           "constructed, s": round(run["constructed"], 3)}  # fmt: skip
    for kind, spans in kinds.items():
        points = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
        flight = most = 0
        for _, step in points:
            flight += step
            most = max(most, flight)
        out[kind] = {
            "requests": len(spans), "from": round(min(b for b, _ in spans), 3),
            "to": round(max(e for _, e in spans), 3), "most in flight": most,
            "median, ms": round(1e3 * sorted(e - b for b, e in spans)[len(spans) // 2], 1),
        }  # fmt: skip
    for number, pid in enumerate(sorted(workers, key=lambda p: workers[p].get("forked", 0))):
        out[f"worker {number}"] = workers[pid]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--connection-mbps", type=float, default=80.0)
    parser.add_argument("--link-mbps", type=float, default=125.0)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (forked)")
    parser.add_argument("--baseline-src", help="also run this src folder, alternating")
    parser.add_argument("--child", nargs=3, metavar=("URL", "CACHE", "TRACE"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    from benchmarks.wan_bench import (
        BATCH_SIZE,
        TTFB,
        TTFB_SAMPLES_PER_SHARD,
        TTFB_SIZE_LIMIT,
        link_arguments,
        linked,
        scratch,
        upload_folder,
    )

    if args.child:
        url, cache, trace = args.child
        child(url, cache, BATCH_SIZE, args.workers, trace)
        return 0
    from tests.integration.seaweedfs import run_seaweedfs

    from benchmarks.download_bench import server_environment
    from benchmarks.streaming_bench import Runner

    link_args = link_arguments(args)
    with (
        scratch("shardstream-first-batch-") as tmp,
        run_seaweedfs(Path(tmp) / "seaweedfs") as server,
    ):
        runner = Runner({"shardstream": sys.executable}, tmp, 600)
        folder = runner.fresh("data")
        params = {**TTFB, "samples": args.shards * TTFB_SAMPLES_PER_SHARD}
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
        runner("shardstream", "write", params, out=folder, size_limit=TTFB_SIZE_LIMIT)
        url = upload_folder(server, folder, f"profile-{args.shards}")
        with linked(server, tmp, link_args, "profile") as link:
            os.environ.update(server_environment(server), S3_ENDPOINT_URL=link.endpoint)
            trees = {"this tree": str(REPO / "src")}
            if args.baseline_src:
                trees["baseline"] = args.baseline_src
            for repeat, (tree, src) in enumerate(
                (tree, src) for _ in range(args.repeats) for tree, src in trees.items()
            ):
                cache = os.path.join(tmp, f"cache-{repeat}")
                trace = tempfile.mkdtemp(dir=tmp)
                environ = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(REPO)]))
                done = subprocess.run(
                    [sys.executable, __file__, "--child", url, cache, trace,
                     "--workers", str(args.workers)], env=environ,
                    capture_output=True, text=True, check=True, timeout=300,
                )  # fmt: skip
                print(tree, flush=True)
                if done.stderr.strip():
                    print(done.stderr, file=sys.stderr)
                run = json.loads(done.stdout.strip().splitlines()[-1])
                run["events"] = gathered(run, trace)
                print(json.dumps(summary(run), indent=1), flush=True)
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(trace, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
