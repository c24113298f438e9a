"""Where a cold first batch's time goes, request by request, through the emulated link.

Usage::

    .venv/bin/python benchmarks/first_batch_profile.py [--shards 10000] [--repeats 3]
        [--latency-ms 30 --jitter-ms 5 --connection-mbps 80 --link-mbps 125]

Starts SeaweedFS and the emulated link (``wan_link.py``) as ``wan_bench.py`` does, writes and
uploads the first-batch rows' dataset (tiny shards of 10 samples), then runs a cold first
batch (0 workers, empty cache) in a fresh process per repeat, with every store request timed
(its start and end, from the loader's creation): the listing's pages, the index, the ranges.
Prints each phase's span and the requests in flight, and the floor the round trips set (the
requests on the longest chain, times the round trip). Nothing is asserted.
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
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))


def child(url: str, cache: str, batch_size: int) -> None:
    """One cold first batch, its store requests timed; the timeline as JSON on stdout."""
    from shardstream.storage import store_base

    events: list[tuple[str, str, float, float]] = []
    lock = threading.Lock()
    origin = time.perf_counter()

    def timed(name: str, method: Any) -> Any:
        def wrapper(self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            begun = time.perf_counter() - origin
            try:
                return method(self, key, *args, **kwargs)
            finally:
                with lock:
                    events.append((name, key, begun, time.perf_counter() - origin))

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

    ranged: list[float] = []
    views = sample_ranges.SampleRanges.views

    def timed_views(self: Any, *args: Any, **kwargs: Any) -> Any:
        cpu = time.process_time()
        try:
            return views(self, *args, **kwargs)
        finally:
            ranged.append(time.process_time() - cpu)

    sample_ranges.SampleRanges.views = timed_views  # type: ignore[method-assign]
    from benchmarks.streaming_worker import make_loader

    profile = cProfile.Profile() if os.environ.get("FIRST_BATCH_CPROFILE") else None
    origin = time.perf_counter()
    cpu = time.process_time()
    if profile is not None:
        profile.enable()
    _, loader = make_loader("shardstream", url, cache, batch_size, 0)
    constructed = time.perf_counter() - origin
    next(iter(loader))
    first = time.perf_counter() - origin
    if profile is not None:
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    print(json.dumps({"constructed": constructed, "first": first, "events": events,
                      "cpu": time.process_time() - cpu, "ranges_cpu": sum(ranged)}))  # fmt: skip


def summary(run: dict[str, Any], rtt: float) -> dict[str, Any]:
    """Each kind of request's count and span, the most in flight, and the round-trip floor."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    for name, key, begun, ended in run["events"]:
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
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--connection-mbps", type=float, default=80.0)
    parser.add_argument("--link-mbps", type=float, default=125.0)
    parser.add_argument("--baseline-src", help="also run this src folder, alternating")
    parser.add_argument("--child", nargs=2, metavar=("URL", "CACHE"), help=argparse.SUPPRESS)
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
        url, cache = args.child
        child(url, cache, BATCH_SIZE)
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
                environ = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(REPO)]))
                done = subprocess.run(
                    [sys.executable, __file__, "--child", url, cache], env=environ,
                    capture_output=True, text=True, check=True, timeout=300,
                )  # fmt: skip
                print(tree, flush=True)
                if done.stderr.strip():
                    print(done.stderr, file=sys.stderr)
                run = json.loads(done.stdout.strip().splitlines()[-1])
                print(json.dumps(summary(run, args.latency_ms / 1e3), indent=1), flush=True)
                shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
