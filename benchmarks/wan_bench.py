"""Rows over an emulated WAN link: shardstream beside mosaicml-streaming, from S3 far away.

Usage::

    .venv/bin/python benchmarks/wan_bench.py [--quick] [--out benchmarks/results/wan.json]
        [--latency-ms 30 --jitter-ms 5 --connection-mbps 80 --link-mbps 125]
        [--baseline-src /tmp/base/src] [--docs docs/benchmarks.md]

Starts SeaweedFS on 127.0.0.1 and, in a process of its own, the emulated link
(``wan_link.py``) in front of its S3 port; every library reads through the link as a user
reads a bucket in another building (``S3_ENDPOINT_URL`` names the link). Uploads go to the
server directly. Each measurement is one worker process (``streaming_worker.py`` or
``download_worker.py``) under its library's venv, one at a time. Rows:

* the link itself: a small GET's first byte, one connection's and eight connections' MB/s
  after the first byte (``wan_probe.py``), direct and through the link with no shaping (the
  proxy's own overhead) and shaped;
* cold epoch (empty cache, every sample checked) of ``small-1KiB``, ``large-100KiB`` and
  ``tokens-2048``, 0 and 2 DataLoader workers;
* time to first batch, cold, with 100 and 10,000 shards of tiny samples;
* one 64 MiB shard downloaded (``download_file`` / the reference's ``CloudDownloader``);
* resume at 50% of ``small-1KiB`` from an empty cache (a new machine picking up a run).

Every row records the link's own limit (the bytes to move at the link's rate; for first
batches, four round trips plus the first shard's bytes) and each library's fraction of it,
the bytes that crossed the link and the proxy's CPU seconds. ``--baseline-src`` also runs
shardstream from another source tree (``shardstream@base``) beside the current one: before and
after a change, in one run. litdata is measured where ``.venv-ref`` holds it, from its own
format (``litdata.optimize``, the same samples, 64 MiB chunks; 10 samples a chunk for the
first-batch rows) uploaded beside the MDS copy; its boto3 and obstore clients find the link
through ``AWS_ENDPOINT_URL`` (the worker lets obstore use plain HTTP). It has no row for the
single 64 MiB download: it has no call that downloads one given object. AWS's
``s3torchconnector`` (``s3torch``, in ``.venv-ref`` too) reads each cold-epoch workload's MDS
objects raw, decoding nothing (``wan_ceiling.py``): the ceiling each cold-epoch row rates
shardstream against, not a peer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.integration.seaweedfs import S3Server, run_seaweedfs  # noqa: E402

from benchmarks.download_bench import reference_python, server_environment  # noqa: E402
from benchmarks.report import format_table, machine  # noqa: E402
from benchmarks.streaming_bench import WORKER_LIB, Runner  # noqa: E402
from benchmarks.wan_ceiling import CEILING, best_of, ceiling_run, object_sizes  # noqa: E402
from benchmarks.wan_probe import probe_link  # noqa: E402
from benchmarks.wan_report import docs_section, replace_section, table_rows  # noqa: E402
from shardstream.storage import S3Store  # noqa: E402

MiB = 1 << 20
MB = 1e6
#: ~256 MiB each (--quick: 1/16): a few seconds of a 1 Gbit/s link, minutes for every row.
WORKLOADS: dict[str, dict[str, int]] = {
    "small-1KiB": {"samples": 262_144, "size": 1024, "jitter": 0},
    "large-100KiB": {"samples": 2_560, "size": 100 * 1024, "jitter": 10 * 1024},
    "tokens-2048": {"samples": 65_536, "size": 4096, "jitter": 0, "tokens": 2048},
}
QUICK_SCALE = 16
SHARD_BYTES = 1 << 26  # both MDS libraries' default shard size
TTFB_SHARDS = (100, 10_000)
TTFB = {"size": 16, "jitter": 0}
TTFB_SAMPLES_PER_SHARD, TTFB_SIZE_LIMIT = 10, 530
DOWNLOAD_BYTES = 64 * MiB
BATCH_SIZE = 256
SEED = 20261127
PEERS = ("reference", "litdata")


class LinkProcess:
    """``wan_link.py`` in a process of its own; :meth:`counters` reads its counters so far."""

    def __init__(self, upstream: str, folder: str, args: list[str], name: str) -> None:
        self.stats = os.path.join(folder, f"link-{name}.json")
        command = [sys.executable, str(HERE / "wan_link.py"), "--upstream", upstream,
                   "--stats", self.stats, "--lifetime", "7200", *args]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "listening on 127.0.0.1:PORT"
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the WAN link did not start: {line!r}")
        self.endpoint = "http://" + line.split()[-1]

    def counters(self) -> dict[str, Any]:
        """The link's counters so far (SIGUSR1 makes it write them)."""
        with _suppress_missing():
            os.remove(self.stats)
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.stats):
            if time.monotonic() > deadline:
                raise RuntimeError("the WAN link did not report its counters")
            time.sleep(0.005)
        with open(self.stats, encoding="utf-8") as handle:
            found: dict[str, Any] = json.load(handle)
        return found

    def stop(self) -> None:
        """Stop the link and wait for it."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def linked(server: Any, folder: str, args: list[str], name: str) -> Iterator[LinkProcess]:
    """A link in front of ``server`` for the ``with`` block, stopped at its end."""
    link = LinkProcess(server.endpoint.rsplit("/", 1)[1], folder, args, name)
    try:
        yield link
    finally:
        link.stop()


@contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A scratch folder for the ``with`` block; at its end it goes and ``os.environ`` is back."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    saved = dict(os.environ)
    try:
        yield tmp
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _suppress_missing() -> Iterator[None]:
    with suppress(FileNotFoundError):
        yield


def measured(
    link: LinkProcess, call: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[Any, dict[str, float]]:
    """``call(*args, **kwargs)`` and what crossed the link meanwhile: bytes, requests, CPU."""
    before = link.counters()
    started = time.perf_counter()
    result = call(*args, **kwargs)
    wall = time.perf_counter() - started
    after = link.counters()
    return result, {
        "bytes_down": after["bytes_down"] - before["bytes_down"],
        "requests": after["requests"] - before["requests"],
        "proxy_cpu_seconds": after["cpu_seconds"] - before["cpu_seconds"],
        "wall_seconds": wall,
    }


def upload_folder(server: S3Server, folder: str, name: str) -> str:
    """Every file under ``folder`` to a fresh prefix, straight to the server; its URL."""
    remote = server.url(f"wan-{name}")
    store = S3Store(remote, endpoint_url=server.endpoint, key=server.key, secret=server.secret)
    paths = [os.path.join(parent, n) for parent, _, names in os.walk(folder) for n in names]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: store.put_file(p, os.path.relpath(p, folder)), paths))
    return remote


class PeerFailed(Exception):
    """A peer's worker failed: a finding for its row, not a reason to lose the run."""


def failure(exc: BaseException) -> dict[str, str]:
    """A failed peer's row entry: the last line of its output that names an error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return {"failed": (errors or lines or ["(no output)"])[-1][:300]}


class Bench:
    """The run's shared state: the runner, the link, the environment, the settings."""

    def __init__(self, args: argparse.Namespace, runner: Runner, link: LinkProcess) -> None:
        self.args = args
        self.run = runner
        self.link = link
        self.link_rate = args.link_mbps * MB
        self.rtt = args.latency_ms / 1e3
        self.libs = [lib for lib in args.libs.split(",") if lib]
        if args.baseline_src:
            self.libs.insert(1, "shardstream@base")
        self.readers = [lib for lib in self.libs if lib != CEILING]  # the ceiling: cold epochs

    def call(self, lib: str, mode: str, params: dict[str, Any], **options: Any) -> Any:
        """One worker run of ``lib`` (``shardstream@base``: shardstream from the baseline)."""
        source = self.args.baseline_src if lib == "shardstream@base" else str(REPO / "src")
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([source, str(REPO)])
        try:
            return self.run(lib, mode, params, **options)
        except RuntimeError as exc:
            if lib.startswith("shardstream"):  # our own failure ends the run
                raise
            raise PeerFailed(str(exc)) from exc
        except subprocess.TimeoutExpired as exc:
            if lib.startswith("shardstream"):
                raise
            raise PeerFailed(f"ran past {exc.timeout:.0f} s and was stopped") from exc
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def litdata_copy(bench: Bench, server: S3Server, params: dict[str, Any], name: str,
                 **write: Any) -> str | None:  # fmt: skip
    """The workload in litdata's own format, uploaded beside the MDS copy; its URL.

    ``None`` when litdata is not measured, or its writer failed (its rows then say so).
    """
    if "litdata" not in bench.libs:
        return None
    folder = bench.run.fresh(f"wan-{name}-litdata")
    try:
        bench.call("litdata", "write", params, out=folder, **write)
    except PeerFailed as exc:
        print(f"  litdata could not write {name}: {failure(exc)}", flush=True)
        return None
    remote = upload_folder(server, folder, f"{name}-litdata")
    shutil.rmtree(folder, ignore_errors=True)
    return remote


def data_of(lib: str, remote: str, lit_remote: str | None) -> str | None:
    """Where ``lib`` reads a workload: litdata its own format, the others the MDS copy."""
    return lit_remote if lib == "litdata" else remote


NOT_WRITTEN = {"failed": "litdata's copy of the data could not be written"}


def cold_epochs(bench: Bench, server: S3Server, scale: int, measure: bool = True) -> dict[str, Any]:
    """Each workload written and uploaded, then (``measure``) its cold epochs through the link."""
    results: dict[str, Any] = {}
    for name, spec in WORKLOADS.items():
        wanted = name in bench.args.workloads.split(",") if measure else name == "small-1KiB"
        if not wanted:  # (without cold epochs, the resume rows need small-1KiB alone)
            continue
        params = {**spec, "samples": spec["samples"] // scale}
        folder = bench.run.fresh(f"wan-{name}")
        written = bench.call("shardstream", "write", params, out=folder, size_limit=SHARD_BYTES)
        remote = upload_folder(server, folder, name)
        objects = object_sizes(folder, remote)
        shutil.rmtree(folder, ignore_errors=True)
        lit_remote = litdata_copy(bench, server, params, name, size_limit=SHARD_BYTES)
        limit = written["bytes"] / bench.link_rate
        print(f"[cold {name}] {params['samples']:,} samples, {written['bytes'] / MB:,.0f} MB "
              f"({limit:.2f} s at the link's rate)", flush=True)  # fmt: skip
        workload: dict[str, Any] = {
            "params": params, "bytes": written["bytes"], "remote": remote,
            "litdata_remote": lit_remote, "limit_seconds": limit, "runs": {},
        }  # fmt: skip
        for workers in (0, 2) if measure else ():
            setting: dict[str, Any] = {}
            for lib in bench.libs:
                if lib == CEILING:
                    setting[lib] = best_of(bench.args.repeats, limit, workers, partial(
                        ceiling_run, bench.run.pythons["reference"], remote, bench.link.endpoint,
                        objects, workers, bench.run.fresh("s3torch"), bench.args.timeout,
                        partial(measured, bench.link)))  # fmt: skip
                    continue
                best: dict[str, Any] | None = None
                data = data_of(lib, remote, lit_remote)
                if data is None:
                    setting[lib] = NOT_WRITTEN
                    continue
                for _ in range(bench.args.repeats):
                    cache = bench.run.fresh(f"cache-{lib}")
                    try:
                        result, moved = measured(
                            bench.link, bench.call, lib, "epoch", params, data=data,
                            cache=cache, workers=workers, epochs=0, batch_size=BATCH_SIZE,
                        )  # fmt: skip
                    except PeerFailed as exc:
                        setting[lib] = failure(exc)
                        print(f"  workers={workers} {lib}: FAILED {setting[lib]}", flush=True)
                        break
                    finally:
                        shutil.rmtree(cache, ignore_errors=True)
                    first = result["first_epoch"]
                    run = {"seconds": first["seconds"], "samples_per_s": first["samples_per_s"],
                           "checks_passed": result["checks_passed"], "link": moved,
                           "fraction_of_link": limit / first["seconds"]}  # fmt: skip
                    if best is None or run["seconds"] < best["seconds"]:
                        best = run
                if best is not None:
                    setting[lib] = best
                    print(f"  workers={workers} {lib}: {best['seconds']:.2f} s, "
                          f"{best['fraction_of_link']:.0%} of the link, proxy CPU "
                          f"{best['link']['proxy_cpu_seconds']:.1f} s", flush=True)  # fmt: skip
            workload["runs"][f"workers={workers}"] = setting
        results[name] = workload
    return results


def first_batches(bench: Bench, server: S3Server, scale: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for shards in TTFB_SHARDS:
        shards = max(10, shards // scale)
        params = {**TTFB, "samples": shards * TTFB_SAMPLES_PER_SHARD}
        folder = bench.run.fresh("wan-ttfb")
        written = bench.call("shardstream", "write", params, out=folder, size_limit=TTFB_SIZE_LIMIT)
        remote = upload_folder(server, folder, f"ttfb-{shards}")
        shard_bytes = max(
            os.path.getsize(os.path.join(folder, n))
            for n in os.listdir(folder)
            if n.endswith(".mds")
        )
        index_bytes = os.path.getsize(os.path.join(folder, "index.json"))
        shutil.rmtree(folder, ignore_errors=True)
        lit_remote = litdata_copy(bench, server, params, f"ttfb-{shards}",
                                  chunk_items=TTFB_SAMPLES_PER_SHARD)  # fmt: skip
        limit = 4 * bench.rtt + shard_bytes / bench.link_rate
        print(f"[first batch, {shards:,} shards] index {index_bytes:,} bytes", flush=True)
        entry: dict[str, Any] = {
            "params": params, "shards": written["files"] - 1, "index_bytes": index_bytes,
            "limit_seconds": limit, "runs": {},
        }  # fmt: skip
        for workers in (0, 2):
            setting: dict[str, Any] = {}
            for lib in bench.readers:
                times = []
                data = data_of(lib, remote, lit_remote)
                if data is None:
                    setting[lib] = NOT_WRITTEN
                    continue
                try:
                    for _ in range(bench.args.repeats):
                        cache = bench.run.fresh(f"ttfb-{lib}")
                        result, moved = measured(
                            bench.link, bench.call, lib, "ttfb", params, data=data,
                            cache=cache, workers=workers, batch_size=BATCH_SIZE,
                        )  # fmt: skip
                        shutil.rmtree(cache, ignore_errors=True)
                        times.append((result["ttfb_seconds"], result, moved))
                except PeerFailed as exc:
                    setting[lib] = failure(exc)
                    print(f"  workers={workers} {lib}: FAILED {setting[lib]}", flush=True)
                    continue
                seconds, result, moved = min(times, key=lambda item: item[0])
                setting[lib] = {"seconds": seconds, "all": [t[0] for t in times],
                                "cpu_all": [t[1].get("ttfb_cpu_seconds") for t in times],
                                "construct_seconds": result["construct_seconds"],
                                "checks_passed": all(t[1]["checks_passed"] for t in times),
                                "link": moved, "fraction_of_link": limit / seconds}  # fmt: skip
                cpu = result.get("ttfb_cpu_seconds")
                print(f"  workers={workers} {lib}: {seconds:.3f} s, CPU {cpu or 0:.3f} s "
                      f"({moved['requests']} requests, {moved['bytes_down']:,} bytes)",
                      flush=True)  # fmt: skip
            entry["runs"][f"workers={workers}"] = setting
        results[f"{shards} shards"] = entry
    return results


def one_shard(bench: Bench, server: S3Server, scale: int) -> dict[str, Any]:
    size = DOWNLOAD_BYTES // scale
    remote = server.url("wan-download")
    store = S3Store(remote, endpoint_url=server.endpoint, key=server.key, secret=server.secret)
    folder = bench.run.fresh("wan-download")
    os.makedirs(folder)
    source = os.path.join(folder, "shard.00000.mds")
    data = np.random.default_rng(SEED).bytes(size)
    with open(source, "wb") as handle:
        handle.write(data)
    store.put_file(source, "shard.00000.mds")
    import hashlib

    manifest = os.path.join(folder, "manifest.json")
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump([["shard.00000.mds", size, hashlib.sha256(data).hexdigest()]], handle)
    limit = size / bench.link_rate
    print(f"[one {size / MiB:g} MiB shard] {limit:.2f} s at the link's rate", flush=True)
    results: dict[str, Any] = {"bytes": size, "limit_seconds": limit, "runs": {}}
    for lib in [lib for lib in bench.readers if lib != "litdata"]:
        worker_lib = "streaming" if lib == "reference" else "shardstream"
        python = bench.run.pythons[lib]
        source_tree = bench.args.baseline_src if lib == "shardstream@base" else str(REPO / "src")
        result_path = os.path.join(folder, f"{lib}.json")
        command = [python, str(HERE / "download_worker.py"), "--lib", worker_lib, "--remote",
                   remote, "--manifest", manifest, "--dest", os.path.join(folder, lib),
                   "--repeats", str(bench.args.repeats + 2), "--result", result_path]  # fmt: skip
        environ = dict(os.environ, PYTHONPATH=os.pathsep.join([source_tree, str(REPO)]))
        completed, moved = measured(
            bench.link, subprocess.run, command, env=environ, capture_output=True, text=True,
            check=False, timeout=600,
        )  # fmt: skip
        if completed.returncode != 0:
            message = f"{lib} download failed:\n{completed.stdout}\n{completed.stderr}"
            if lib.startswith("shardstream"):
                raise RuntimeError(message)
            results["runs"][lib] = failure(RuntimeError(message))
            continue
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
        seconds = result["seconds"]["best"]
        results["runs"][lib] = {"seconds": seconds, "mb_per_s": size / seconds / MB,
                                "checks_passed": result["checks"]["passed"], "link": moved,
                                "fraction_of_link": limit / seconds}  # fmt: skip
        print(f"  {lib}: {size / seconds / MB:,.0f} MB/s, {limit / seconds:.0%} of the link",
              flush=True)  # fmt: skip
    shutil.rmtree(folder, ignore_errors=True)
    return results


def resumes(bench: Bench, workload: dict[str, Any]) -> dict[str, Any]:
    """Resume at 50% of ``small-1KiB`` with an empty cache: a new machine picks the run up."""
    params, remote, lit_remote = workload["params"], workload["remote"], workload["litdata_remote"]
    shard_bytes = min(SHARD_BYTES, workload["bytes"])
    limit = 4 * bench.rtt + shard_bytes / bench.link_rate
    print(f"[resume small-1KiB at 50%, cold cache] limit {limit:.2f} s", flush=True)
    results: dict[str, Any] = {"limit_seconds": limit, "runs": {}}
    for workers in (0, 2):
        setting: dict[str, Any] = {}
        for lib in bench.readers:
            data = data_of(lib, remote, lit_remote)
            if data is None:
                setting[lib] = NOT_WRITTEN
                continue
            state = bench.run.fresh("state") + ".json"
            # The same cache path, emptied in between: litdata's state names its cache folder
            # and refuses another one; a new machine with the same job settings has it too.
            first_cache = cache = bench.run.fresh("resume")
            try:
                bench.call(lib, "resume", params, data=data, cache=first_cache,
                           workers=workers, batch_size=BATCH_SIZE, state=state)  # fmt: skip
                shutil.rmtree(first_cache, ignore_errors=True)
                result, moved = measured(
                    bench.link, bench.call, lib, "resume", params, data=data, cache=cache,
                    workers=workers, batch_size=BATCH_SIZE, state=state, resume=True,
                )  # fmt: skip
            except PeerFailed as exc:
                setting[lib] = failure(exc)
                print(f"  workers={workers} {lib}: FAILED {setting[lib]}", flush=True)
                continue
            finally:
                shutil.rmtree(first_cache, ignore_errors=True)
                shutil.rmtree(cache, ignore_errors=True)
            seconds = result["resume_seconds"]
            setting[lib] = {"seconds": seconds, "rest_seconds": result["rest_seconds"],
                            "checks_passed": result["checks_passed"], "link": moved,
                            "fraction_of_link": limit / seconds}  # fmt: skip
            print(f"  workers={workers} {lib}: first batch {seconds:.2f} s, rest "
                  f"{result['rest_seconds']:.2f} s", flush=True)  # fmt: skip
        results["runs"][f"workers={workers}"] = setting
    return results


def link_checks(server: S3Server, tmp: str, args: argparse.Namespace) -> dict[str, Any]:
    """The proxy's overhead (no shaping against direct) and the shaped link's calibration."""
    remote = server.url("wan-probe")
    store = S3Store(remote, endpoint_url=server.endpoint, key=server.key, secret=server.secret)
    path = os.path.join(tmp, "probe.bin")
    with open(path, "wb") as handle:
        handle.write(np.random.default_rng(SEED).bytes(32 * MiB))
    store.put_file(path, "big")
    with open(path, "wb") as handle:
        handle.write(b"{}")
    store.put_file(path, "index.json")
    os.remove(path)
    upstream = server.endpoint.rsplit("/", 1)[1]
    prefix = remote.split("/", 3)[3]

    def probe(endpoint: str) -> dict[str, float]:
        return probe_link(endpoint, server.key, server.secret, server.bucket,
                          f"{prefix}/index.json", f"{prefix}/big", 32 * MiB)  # fmt: skip

    found: dict[str, Any] = {"direct": probe(server.endpoint)}
    for name, options in (("unshaped", ["--latency-ms", "0", "--jitter-ms", "0",
                                        "--connection-mbps", "0", "--link-mbps", "0"]),
                          ("shaped", link_arguments(args))):  # fmt: skip
        link = LinkProcess(upstream, tmp, options, name)
        try:
            found[name], moved = measured(link, probe, link.endpoint)
            found[name]["proxy_cpu_seconds"] = moved["proxy_cpu_seconds"]
        finally:
            link.stop()
    print("[link] " + json.dumps(found), flush=True)
    return found


def link_arguments(args: argparse.Namespace) -> list[str]:
    """``wan_link.py``'s shaping options from the driver's."""
    return [
        "--latency-ms", str(args.latency_ms), "--jitter-ms", str(args.jitter_ms),
        "--connection-mbps", str(args.connection_mbps), "--link-mbps", str(args.link_mbps),
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/16 of the sizes (a smoke run)")
    parser.add_argument("--out", default=str(HERE / "results" / "wan.json"))
    parser.add_argument("--libs", default=f"shardstream,reference,litdata,{CEILING}")
    parser.add_argument("--parts", default="link,epoch,ttfb,download,resume")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="cold-epoch rows")
    parser.add_argument("--repeats", type=int, default=1, help="runs per row (best is kept)")
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--connection-mbps", type=float, default=80.0, help="MB/s a connection")
    parser.add_argument("--link-mbps", type=float, default=125.0, help="MB/s the whole link")
    parser.add_argument("--baseline-src", help="also run shardstream from this src folder")
    parser.add_argument("--docs", help="write the rows into this page's WAN section")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per worker run")
    parser.add_argument("--from-json", help="run nothing: the table (and --docs) of this report")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as handle:
            return finish(json.load(handle), args)
    ref_python = reference_python()
    pythons = {"shardstream": sys.executable, "shardstream@base": sys.executable,
               "reference": ref_python, "litdata": ref_python}  # fmt: skip
    WORKER_LIB["shardstream@base"] = "shardstream"
    for lib, module in (("litdata", "litdata"), (CEILING, "s3torchconnector")):
        if (
            lib in args.libs.split(",")
            and subprocess.run(
                [ref_python, "-c", f"import {module}"], capture_output=True, check=False
            ).returncode
        ):
            print(f"{module} is not installed in the reference venv: not measured", flush=True)
            args.libs = ",".join(name for name in args.libs.split(",") if name != lib)
    parts = set(args.parts.split(","))
    scale = QUICK_SCALE if args.quick else 1
    report: dict[str, Any] = {
        "machine": machine(), "quick": args.quick, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {"latency_ms": args.latency_ms, "jitter_ms": args.jitter_ms,
                     "connection_mb_per_s": args.connection_mbps, "link_mb_per_s": args.link_mbps},
        "command": " ".join(sys.argv), "platform": platform.platform(),
    }  # fmt: skip
    saved = dict(os.environ)
    with scratch("shardstream-wan-bench-") as tmp, run_seaweedfs(Path(tmp) / "seaweedfs") as server:
        if "link" in parts:
            report["link"] = link_checks(server, tmp, args)
        with linked(server, tmp, link_arguments(args), "run") as link:
            os.environ.clear()
            # litdata's boto3 and obstore clients take the endpoint from AWS_ENDPOINT_URL.
            os.environ.update(server_environment(server), S3_ENDPOINT_URL=link.endpoint,
                              AWS_ENDPOINT_URL=link.endpoint)  # fmt: skip
            # shardstream's own switches (SHARDSTREAM_S3_CLIENT, ...) reach its workers.
            os.environ.update({k: v for k, v in saved.items() if k.startswith("SHARDSTREAM_")})
            report["shardstream_env"] = {
                k: v for k, v in saved.items() if k.startswith("SHARDSTREAM_")
            }
            bench = Bench(args, Runner(pythons, tmp, args.timeout), link)
            report["libs"] = bench.libs
            epochs = (
                cold_epochs(bench, server, scale, measure="epoch" in parts)
                if parts & {"epoch", "resume"}
                else {}
            )
            if "epoch" in parts:
                report["cold_epoch"] = epochs
            if "ttfb" in parts:
                report["first_batch"] = first_batches(bench, server, scale)
            if "download" in parts:
                report["download"] = one_shard(bench, server, scale)
            if "resume" in parts:
                report["resume"] = resumes(bench, epochs["small-1KiB"])
            report["link_total"] = link.counters()
    return finish(report, args)


def finish(report: dict[str, Any], args: argparse.Namespace) -> int:
    """Print the table, write the JSON (not ``--from-json``'s) and the docs' section."""
    rows = table_rows(report)
    report["rows"] = rows["rows"]
    print()
    print(format_table(rows["table"]))
    for row in rows["rows"]:
        for failure_text in row["peer_failures"]:
            print(f"  {row['row']}, {row['metric']}: {failure_text}")
    if not args.from_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    if args.docs:
        page = Path(args.docs)
        page.write_text(replace_section(page.read_text(), docs_section(report)))
    checks = rows["checks_passed"]
    print(
        f"\ncorrectness (every sample checked, each exactly once): {'PASS' if checks else 'FAIL'}"
    )
    return 0 if checks else 1


if __name__ == "__main__":
    sys.exit(main())
