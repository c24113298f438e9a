"""What checking the cache against the remote costs at start, with many shards.

Usage::

    .venv/bin/python benchmarks/start_check_bench.py [--shards 10000 100000] [--stores local s3]
        [--baseline-src PATH] [--listing-only] [--link-ms 30] [--start-link] [--cold-only]
        [--repeat 3] [--reference-python .venv-ref/bin/python] [--no-listing] [--whole-shards]

Writes a dataset of tiny one-sample MDS shards (the listing and the index grow with the shard
count, not with the bytes), to a local folder and to SeaweedFS on 127.0.0.1, then times
``StreamingDataset(...).prepare()`` (index check, listing, record, index parse) in a fresh
process, wall and CPU (every thread of it): a cold start (empty cache), a warm start (nothing
changed) and a start after every object was rewritten in place (``--cold-only``: the cold
start alone, ``--repeat`` times, each on an empty cache). ``--baseline-src`` names the ``src``
folder of another checkout (for example ``/work/base/src``) to time the same starts with its
code. ``--reference-python`` names the Python of a venv holding mosaicml-streaming: its cold
start (the ``StreamingDataset`` constructor, which fetches ``index.json`` and lists nothing) is
timed the same way, on S3. Each start also times its first sample (``first_sample_s``) and
the end of a listing left running after ``prepare()`` (``listed_s``; the CPU of each too).
``--whole-shards``: the first batch's shards are fetched whole (no first-batch ranges), so a
warm start's first sample comes from a shard the cache held, once the listing vouches for it.

On S3 it also times the listing alone, in a fresh process with the client made: serial, and in
key ranges split at the index's shard names (``list_info(split_at=...)``), with the CPU time
and the number of pages of each (``--link-ms``: also through the emulated WAN link of
``wan_link.py`` with that latency). ``--start-link``: the S3 starts go through that link too,
with the issue's caps (80 MB/s a connection, 1 Gbit/s in all). ``--listing-only`` skips the
starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # for tests.integration.seaweedfs, the tests' server launcher

from tests.integration.seaweedfs import S3Server, run_seaweedfs  # noqa: E402

from benchmarks.wan_link import MB, LinkSettings, run_link  # noqa: E402

_PROBE = """
import json, sys, time
from shardstream import StreamingDataset
remote, local, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if options.pop("_whole_shards", False):  # the first batch's shards fetched whole, and cached
    from shardstream import ReadPolicy
    options["read_policy"] = ReadPolicy(first_batch_ranges=False)
started, cpu = time.perf_counter(), time.process_time()
dataset = StreamingDataset(remote=remote, local=local, batch_size=1, **options)
dataset.prepare()
times = {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu}
if options.get("_first_sample", True) is not False:
    next(iter(dataset))
    times["first_sample_s"] = time.perf_counter() - started
    times["first_sample_cpu_s"] = time.process_time() - cpu
# The listing may run on after the start (cache/listing_check.py): its end, and the CPU of all.
checks = [s.check for s in dataset._prepare().cache.streams if getattr(s, "check", None)]
for check in checks:
    check.wait()
times["listed_s"] = time.perf_counter() - started
times["listed_cpu_s"] = time.process_time() - cpu
print(json.dumps(times))
"""

# The reference's start: its constructor fetches index.json (rank 0) and lists nothing.
_REFERENCE_PROBE = """
import json, sys, time
from streaming import StreamingDataset
remote, local = sys.argv[1], sys.argv[2]
started, cpu = time.perf_counter(), time.process_time()
StreamingDataset(remote=remote, local=local, batch_size=1)
print(json.dumps({"seconds": time.perf_counter() - started,
                  "cpu_seconds": time.process_time() - cpu}))
"""


_LISTING_PROBE = """
import json, sys, time
from shardstream.storage import open_store
remote, shards, split = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "split"
store = open_store(remote)
store.info("index.json")  # the client made and a connection open before the clock starts
names = [f"shard.{k:06d}.mds" for k in range(shards)] if split else []
pages = 0
page = store._list_page
def counted(*args):
    global pages
    pages += 1
    return page(*args)
store._list_page = counted
wall, cpu = time.perf_counter(), time.process_time()
listing = store.list_info("", split_at=names)
print(json.dumps({"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu,
                  "pages": pages, "objects": len(listing)}))
"""


def listing_row(
    remote: str, shards: int, env: dict[str, str], link_ms: float = 0.0
) -> dict[str, Any]:
    """The listing alone, serial and split, each in a fresh process (best of three).

    ``link_ms``: through the emulated WAN link (``wan_link.py``: that first-byte latency, no
    bandwidth cap), in a thread of this process, as a distant store would answer.
    """
    if link_ms:
        endpoint = env["S3_ENDPOINT_URL"]
        upstream = (endpoint.rsplit(":", 1)[0].split("//")[1], int(endpoint.rsplit(":", 1)[1]))
        settings = LinkSettings(link_ms / 1e3, link_ms / 6e3, 0.0, 0.0)
        with run_link(upstream, settings) as link:
            linked = {**env, "S3_ENDPOINT_URL": link.endpoint}
            return {"link_ms": link_ms, **listing_row(remote, shards, linked)}
    row: dict[str, Any] = {}
    for mode in ("serial", "split"):
        runs = []
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-c", _LISTING_PROBE, remote, str(shards), mode],
                env={**env, "PYTHONPATH": str(REPO / "src")},
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        row[mode] = min(runs, key=lambda run: run["seconds"])
    return row


def shard_bytes(value: int) -> bytes:
    """One MDS shard of one sample holding an int64 column."""
    return struct.pack("<I", 1) + struct.pack("<II", 12, 20) + struct.pack("<q", value)


def index_bytes(shards: int) -> bytes:
    """The index of ``shards`` one-sample shards."""
    entry: dict[str, Any] = {
        "column_encodings": ["int"],
        "column_names": ["id"],
        "column_sizes": [8],
        "compression": None,
        "format": "mds",
        "hashes": [],
        "samples": 1,
        "size_limit": 1 << 26,
        "version": 2,
        "zip_data": None,
    }
    entries = [
        {**entry, "raw_data": {"basename": f"shard.{k:06d}.mds", "bytes": 20, "hashes": {}}}
        for k in range(shards)
    ]
    return json.dumps({"shards": entries, "version": 2}).encode()


def write_local(root: Path, shards: int, generation: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for k in range(shards):
        temporary = root / f".tmp-{k}"
        temporary.write_bytes(shard_bytes(k * 10 + generation))
        os.replace(temporary, root / f"shard.{k:06d}.mds")
    (root / "index.json").write_bytes(index_bytes(shards))


def write_s3(server: S3Server, prefix: str, shards: int, generation: int) -> None:
    filesystem = server.filesystem()
    base = f"{server.bucket}/{prefix}"

    def put(k: int) -> None:
        filesystem.pipe_file(f"{base}/shard.{k:06d}.mds", shard_bytes(k * 10 + generation))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(shards)))
    filesystem.pipe_file(f"{base}/index.json", index_bytes(shards))


def start_seconds(
    python_path: str,
    remote: str,
    local: Path,
    options: dict[str, Any],
    env: dict[str, str],
    python: str = sys.executable,
    probe: str = _PROBE,
) -> dict[str, float]:
    """One start in a fresh process: its wall and CPU seconds."""
    out = subprocess.run(
        [python, "-c", probe, remote, str(local), json.dumps(options)],
        env={**env, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return {key: round(float(value), 3) for key, value in answer.items()}


def cold_starts(
    codes: dict[str, str], remote: str, tmp: Path, env: dict[str, str], repeat: int, reference: str
) -> dict[str, list[dict[str, float]]]:
    """``repeat`` cold starts of each code (and of the reference), each on an empty cache."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
    if reference:
        runs["reference"] = []
    for _ in range(repeat):  # interleaved: a change of the machine's load falls on each
        for name, python_path in codes.items():
            local = tmp / f"cache-{name}"
            shutil.rmtree(local, ignore_errors=True)
            runs[name].append(start_seconds(python_path, remote, local, {}, env))
        if reference:
            local = tmp / "cache-reference"
            shutil.rmtree(local, ignore_errors=True)
            shm = {**env, "PYTHONPATH": ""}
            runs["reference"].append(
                start_seconds("", remote, local, {}, shm, reference, _REFERENCE_PROBE)
            )
    return runs


def measure(
    codes: dict[str, str],
    remote: str,
    tmp: Path,
    rewrite: Callable[[int], None],
    env: dict[str, str],
    options: dict[str, Any] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Cold, warm and after-rewrite starts of each code, each code on its own cache folder.

    ``options``: the probe's (``{"_whole_shards": True}``: no first-batch ranges, so the warm
    start's first sample is a cached shard, handed over once the listing vouches for it).
    """
    options = options or {}
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for generation, (name, python_path) in enumerate(codes.items(), start=1):
        local = tmp / f"cache-{name}"
        shutil.rmtree(local, ignore_errors=True)
        row = {
            "cold": start_seconds(python_path, remote, local, options, env),
            "warm": start_seconds(python_path, remote, local, options, env),
        }
        rewrite(generation)
        row["rewritten"] = start_seconds(python_path, remote, local, options, env)
        rows[name] = row
    return rows


@contextlib.contextmanager
def through_link(env: dict[str, str], link_ms: float) -> Iterator[dict[str, str]]:
    """``env`` with S3 requests sent through the issue's emulated link (``link_ms`` latency)."""
    endpoint = env["S3_ENDPOINT_URL"]
    upstream = (endpoint.rsplit(":", 1)[0].split("//")[1], int(endpoint.rsplit(":", 1)[1]))
    settings = LinkSettings(link_ms / 1e3, link_ms / 6e3, 80 * MB, 125 * MB)
    with run_link(upstream, settings) as link:
        yield {**env, "S3_ENDPOINT_URL": link.endpoint}


def s3_starts(
    args: argparse.Namespace,
    codes: dict[str, str],
    server: S3Server,
    remote: str,
    tmp: Path,
    env: dict[str, str],
    shards: int,
) -> dict[str, Any]:
    """The S3 starts the arguments ask for (none with ``--listing-only``)."""
    if args.listing_only:
        return {}
    with contextlib.ExitStack() as stack:
        linked = args.start_link and args.link_ms
        start_env = stack.enter_context(through_link(env, args.link_ms)) if linked else env
        rows: dict[str, Any] = {"start_link_ms": args.link_ms} if linked else {}
        if args.cold_only:
            rows["cold"] = cold_starts(
                codes, remote, tmp, start_env, args.repeat, args.reference_python
            )
        else:
            rewrite = partial(write_s3, server, "ds", shards)
            options = {"_whole_shards": True} if args.whole_shards else {}
            rows.update(measure(codes, remote, tmp, rewrite, start_env, options))
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--stores", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    parser.add_argument("--baseline-src", help="the src folder of the code to compare with")
    parser.add_argument("--listing-only", action="store_true", help="time the S3 listing only")
    parser.add_argument(
        "--link-ms", type=float, default=0.0, help="also list through a link of this latency"
    )
    parser.add_argument("--start-link", action="store_true", help="S3 starts through the link")
    parser.add_argument("--cold-only", action="store_true", help="time cold starts only")
    parser.add_argument("--no-listing", action="store_true", help="skip the listing rows")
    parser.add_argument("--repeat", type=int, default=1, help="cold starts of each code")
    parser.add_argument(
        "--whole-shards", action="store_true", help="no first-batch ranges: shards come whole"
    )
    parser.add_argument("--reference-python", default="", help="a Python with mosaicml-streaming")
    args = parser.parse_args()
    codes = {"shardstream": str(REPO / "src")}
    if args.baseline_src:
        codes["baseline"] = os.path.abspath(args.baseline_src)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="start-check-") as folder:
        tmp = Path(folder)
        for shards in args.shards:
            if "local" in args.stores:
                root = tmp / f"local-{shards}"
                write_local(root, shards, 0)
                rows = (
                    {"cold": cold_starts(codes, str(root), tmp, dict(os.environ), args.repeat, "")}
                    if args.cold_only
                    else measure(
                        codes, str(root), tmp, partial(write_local, root, shards), dict(os.environ)
                    )
                )
                results.append({"store": "local", "shards": shards, **rows})
                print(json.dumps(results[-1]), flush=True)
                shutil.rmtree(root)
            if "s3" in args.stores:
                with run_seaweedfs(tmp / f"weed-{shards}") as server:
                    started = time.perf_counter()
                    write_s3(server, "ds", shards, 0)
                    upload = time.perf_counter() - started
                    env = {
                        **os.environ,
                        "S3_ENDPOINT_URL": server.endpoint,
                        "AWS_ACCESS_KEY_ID": server.key,
                        "AWS_SECRET_ACCESS_KEY": server.secret,
                        "AWS_DEFAULT_REGION": "us-east-1",
                    }
                    remote = f"s3://{server.bucket}/ds"
                    listing = {} if args.no_listing else listing_row(remote, shards, env)
                    if args.link_ms and not args.no_listing:
                        listing = {
                            "loopback": listing,
                            "link": listing_row(remote, shards, env, args.link_ms),
                        }
                    rows = s3_starts(args, codes, server, remote, tmp, env, shards)
                    results.append(
                        {"store": "s3", "shards": shards, "upload_s": upload, "listing": listing}
                        | rows
                    )
                    print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
