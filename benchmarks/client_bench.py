"""Object-store clients side by side: today's S3 stack (botocore) against obstore.

Starts a real SeaweedFS on 127.0.0.1 (auth enforced), seeds it, and measures each client in a
process of its own (a client's threads and pools skew the next one's figures), both straight to
the server and through the emulated link of ``wan_link.py`` (30 ms, 80 MB/s a connection,
125 MB/s in all). The clients: ``S3Store`` as it is (botocore), obstore's own ``S3Store``, and
``S3Store`` with ``SHARDSTREAM_S3_CLIENT=obstore`` (its reads through ``ObstoreClient``; its
listing stays botocore's and is not measured again). Each client measures:

- ``construct``: building the client, and its first request (a 1-byte GET), in CPU and wall
  seconds;
- ``small_get``: CPU seconds of this process per ranged GET of 1 KiB (``time.process_time``
  over ``--gets`` requests, one at a time), bare and through ``timed_request`` (the deadline
  and worker-thread hand-off every download goes through);
- ``stream_1`` and ``stream_8``: MB/s (and CPU seconds) of one GET of the whole large object,
  and of 8 ranges of it at once from 8 threads, as downloads run them; for obstore also its
  ``get_ranges`` (one call) and 8 ``get_range_async`` under one asyncio loop;
- ``listing``: ListObjectsV2 pages per second over ``--keys`` keys (1,000 a page).

CPU figures are robust on a shared machine; wall-clock ones are not (say so when quoting them).

``--kind gcs|azure|http`` measures the same for fake-gcs-server, Azurite or a static HTTP
server (``benchmarks/client_stores.py``): today's store (``GCSStore``, ``AzureStore``,
``HTTPStore``) against ``ObstoreClient`` of the same kind, without ``small_get_timed`` and,
for HTTP, without a listing.

Run::

    PYTHONPATH=src .venv/bin/python benchmarks/client_bench.py --out client.json
    PYTHONPATH=src .venv/bin/python benchmarks/client_bench.py --quick   # a smoke run
    PYTHONPATH=src .venv/bin/python benchmarks/client_bench.py --quick --kind gcs
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.integration.seaweedfs import S3Server, run_seaweedfs  # noqa: E402

from benchmarks.wan_bench import LinkProcess  # noqa: E402

MiB = 1 << 20
SMALL_OBJECT = "small.bin"  # 1 MiB, read 1 KiB at a time
LARGE_OBJECT = "large.bin"
# S3Store as it is; obstore alone; S3Store with SHARDSTREAM_S3_CLIENT=obstore (its reads).
CLIENTS = ("botocore", "obstore", "s3store-obstore")


def seed(server: S3Server, prefix: str, large_mib: int, keys: int) -> None:
    """The objects every client reads, written through obstore (the fastest way to many keys)."""
    import obstore
    from obstore.store import S3Store as ObStore

    store = ObStore(
        server.bucket, prefix=prefix, endpoint=server.endpoint, access_key_id=server.key,
        secret_access_key=server.secret, region="us-east-1", allow_http=True,
        virtual_hosted_style_request=False,
    )  # fmt: skip
    obstore.put(store, SMALL_OBJECT, os.urandom(MiB))
    obstore.put(store, LARGE_OBJECT, os.urandom(large_mib * MiB))

    async def many() -> None:
        semaphore = asyncio.Semaphore(64)

        async def one(index: int) -> None:
            async with semaphore:
                await obstore.put_async(store, f"list/{index:07d}.bin", b"x")

        await asyncio.gather(*(one(index) for index in range(keys)))

    asyncio.run(many())


def measure(client: str, endpoint: str, server: S3Server, prefix: str, args: Any) -> Any:
    """Run one client's measurements in a process of its own; its JSON answer."""
    command = [sys.executable, __file__, "--worker", client, "--endpoint", endpoint,
               "--key", server.key, "--bucket", server.bucket, "--prefix", prefix,
               "--gets", str(args.gets), "--keys", str(args.keys),
               "--large-mib", str(args.large_mib)]  # fmt: skip
    environ = {**os.environ, "AWS_SECRET_ACCESS_KEY": server.secret, "AWS_EC2_METADATA_DISABLED":
               "true", "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE":
               "/nonexistent"}  # fmt: skip
    done = subprocess.run(command, env=environ, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout)


class Clock:
    """CPU and wall seconds of a block, as ``with Clock() as c: ...; c.cpu, c.wall``."""

    def __enter__(self) -> Clock:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self.cpu0
        self.wall = time.perf_counter() - self.wall0


def worker(args: Any) -> dict[str, Any]:
    """One client's figures (this process measures only itself)."""
    from shardstream.storage.download import timed_request
    from shardstream.storage.download_options import DownloadOptions

    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    small, large = f"{args.prefix}/{SMALL_OBJECT}", f"{args.prefix}/{LARGE_OBJECT}"
    size = args.large_mib * MiB
    report: dict[str, Any] = {"client": args.worker}
    with Clock() as clock:
        if args.worker != "obstore":
            # S3Store reads through obstore by default: name each client
            os.environ["SHARDSTREAM_S3_CLIENT"] = (
                "obstore" if args.worker == "s3store-obstore" else "botocore"
            )
            from shardstream.storage import S3Store

            store = S3Store(f"s3://{args.bucket}", endpoint_url=args.endpoint, key=args.key,
                            secret=secret)  # fmt: skip
            store.get_range(small, 0, 1)

            def get(key: str, start: int, end: int) -> bytes:
                return store.get_range(key, start, end)

        else:
            import obstore
            from obstore.store import S3Store as ObStore

            ob = ObStore(
                args.bucket, endpoint=args.endpoint, access_key_id=args.key,
                secret_access_key=secret, region="us-east-1", allow_http=True,
                virtual_hosted_style_request=False,
            )  # fmt: skip
            obstore.get_range(ob, small, start=0, end=1)

            def get(key: str, start: int, end: int) -> bytes:
                return bytes(obstore.get_range(ob, key, start=start, end=end))

    report["construct"] = {"cpu_s": clock.cpu, "wall_s": clock.wall}

    get(small, 0, 1024)  # a warm connection
    with Clock() as clock:
        for index in range(args.gets):
            start = (index * 1024) % (MiB - 1024)
            assert len(get(small, start, start + 1024)) == 1024
    report["small_get"] = {"cpu_ms": 1e3 * clock.cpu / args.gets,
                           "wall_ms": 1e3 * clock.wall / args.gets}  # fmt: skip
    options = DownloadOptions()
    with Clock() as clock:
        for index in range(args.gets):
            start = (index * 1024) % (MiB - 1024)
            timed_request(functools.partial(get, small, start, start + 1024), options, "reading")
    report["small_get_timed"] = {"cpu_ms": 1e3 * clock.cpu / args.gets,
                                 "wall_ms": 1e3 * clock.wall / args.gets}  # fmt: skip

    with Clock() as clock:
        assert len(get(large, 0, size)) == size
    report["stream_1"] = {"mb_s": size / 1e6 / clock.wall, "cpu_s": clock.cpu}
    part = size // 8
    with Clock() as clock, ThreadPoolExecutor(8) as pool:
        parts = list(pool.map(lambda i: get(large, i * part, (i + 1) * part), range(8)))
        assert sum(len(p) for p in parts) == 8 * part
    report["stream_8"] = {"mb_s": 8 * part / 1e6 / clock.wall, "cpu_s": clock.cpu}
    if args.worker == "obstore":
        starts = [i * part for i in range(8)]
        with Clock() as clock:
            buffers = obstore.get_ranges(ob, large, starts=starts, ends=[s + part for s in starts])
            assert sum(len(b) for b in buffers) == 8 * part
        report["stream_8_get_ranges"] = {"mb_s": 8 * part / 1e6 / clock.wall, "cpu_s": clock.cpu}

        async def ranges() -> list[Any]:
            return await asyncio.gather(
                *(obstore.get_range_async(ob, large, start=s, end=s + part) for s in starts)
            )

        with Clock() as clock:
            assert sum(len(b) for b in asyncio.run(ranges())) == 8 * part
        report["stream_8_async"] = {"mb_s": 8 * part / 1e6 / clock.wall, "cpu_s": clock.cpu}

    pages = -(-args.keys // 1000)
    if args.worker == "s3store-obstore":
        return report  # its listing is botocore's (the switch moves reads only)
    with Clock() as clock:
        if args.worker == "botocore":
            listed = len(store.list_info(f"{args.prefix}/list/"))
        else:
            listed = sum(
                len(chunk) for chunk in obstore.list(ob, f"{args.prefix}/list", chunk_size=1000)
            )
    assert listed == args.keys, listed
    report["listing"] = {"pages_s": pages / clock.wall, "cpu_ms_page": 1e3 * clock.cpu / pages}
    return report


def store_worker(args: Any) -> dict[str, Any]:
    """One GCS, Azure or HTTP client's figures (``--kind``), as :func:`worker` measures S3's."""
    from benchmarks.client_stores import client

    size = args.large_mib * MiB
    report: dict[str, Any] = {"client": args.worker}
    with Clock() as clock:
        get, list_all, _ = client(args.kind, args.worker, args.url, args.endpoint)
        get(SMALL_OBJECT, 0, 1)
    report["construct"] = {"cpu_s": clock.cpu, "wall_s": clock.wall}
    get(SMALL_OBJECT, 0, 1024)
    with Clock() as clock:
        for index in range(args.gets):
            start = (index * 1024) % (MiB - 1024)
            assert len(get(SMALL_OBJECT, start, start + 1024)) == 1024
    report["small_get"] = {"cpu_ms": 1e3 * clock.cpu / args.gets,
                           "wall_ms": 1e3 * clock.wall / args.gets}  # fmt: skip
    report["small_get_timed"] = report["small_get"]  # not measured again here
    with Clock() as clock:
        assert len(get(LARGE_OBJECT, 0, size)) == size
    report["stream_1"] = {"mb_s": size / 1e6 / clock.wall, "cpu_s": clock.cpu}
    part = size // 8
    with Clock() as clock, ThreadPoolExecutor(8) as pool:
        parts = list(pool.map(lambda i: get(LARGE_OBJECT, i * part, (i + 1) * part), range(8)))
        assert sum(len(p) for p in parts) == 8 * part
    report["stream_8"] = {"mb_s": 8 * part / 1e6 / clock.wall, "cpu_s": clock.cpu}
    if args.kind != "http":
        pages = -(-args.keys // 1000)
        with Clock() as clock:
            listed = list_all("list/")
        assert listed == args.keys, listed
        report["listing"] = {"pages_s": pages / clock.wall, "cpu_ms_page": 1e3 * clock.cpu / pages}
    return report


def run_store_kind(args: Any) -> dict[str, dict[str, Any]]:
    """GCS, Azure or HTTP: today's client against obstore, straight and through the link."""
    from benchmarks.client_stores import run_server, seed

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, run_server(args.kind, "client-bench") as server:
        seed(server, {SMALL_OBJECT: os.urandom(MiB),
                      LARGE_OBJECT: os.urandom(args.large_mib * MiB)}, args.keys)  # fmt: skip
        link = LinkProcess(f"127.0.0.1:{server.port}", tmp, ["--latency-ms", "30",
                           "--connection-mbps", "80", "--link-mbps", "125"], "client")  # fmt: skip
        direct = f"127.0.0.1:{server.port}"
        linked = link.endpoint.removeprefix("http://")
        try:
            for path, gets in (("direct", args.gets), ("link", args.link_gets)):
                host = direct if path == "direct" else linked
                url, endpoint = (server.url.replace(direct, host),
                                 server.endpoint.replace(direct, host))  # fmt: skip
                results[path] = {}
                for which in ("current", "obstore"):
                    command = [sys.executable, __file__, "--worker", which, "--kind", args.kind,
                               "--url", url, "--endpoint", endpoint, "--gets", str(gets),
                               "--keys", str(args.keys),
                               "--large-mib", str(args.large_mib)]  # fmt: skip
                    done = subprocess.run(command, capture_output=True, text=True, check=False)
                    results[path][which] = (json.loads(done.stdout) if done.returncode == 0
                                            else {"error": done.stderr[-2000:]})  # fmt: skip
        finally:
            link.stop()
    return results


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| path | client | construct CPU s | CPU ms/GET | CPU ms/GET timed | MB/s 1 | "
             "MB/s 8 | pages/s | CPU ms/page |", "|" + " --- |" * 9]  # fmt: skip
    for path, clients in results.items():
        for name, row in clients.items():
            if "error" in row:
                lines.append(f"| {path} | {name} | error |" + " |" * 6)
                continue
            listing = row.get("listing")
            pages = (
                f"{listing['pages_s']:.1f} | {listing['cpu_ms_page']:.2f}" if listing else "- | -"
            )
            lines.append(
                f"| {path} | {name} | {row['construct']['cpu_s']:.3f} | "
                f"{row['small_get']['cpu_ms']:.3f} | {row['small_get_timed']['cpu_ms']:.3f} | "
                f"{row['stream_1']['mb_s']:.0f} | {row['stream_8']['mb_s']:.0f} | {pages} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=1000, help="small GETs straight to the server")
    parser.add_argument("--link-gets", type=int, default=200, help="small GETs through the link")
    parser.add_argument("--keys", type=int, default=5000, help="keys listed")
    parser.add_argument("--large-mib", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer of everything")
    parser.add_argument("--out", help="write the JSON report here")
    parser.add_argument("--kind", choices=("s3", "gcs", "azure", "http"), default="s3",
                        help="the kind of store: SeaweedFS, fake-gcs-server, Azurite, a static "
                        "HTTP server")  # fmt: skip
    parser.add_argument("--worker", choices=(*CLIENTS, "current"), help=argparse.SUPPRESS)
    for name in ("endpoint", "key", "bucket", "prefix", "url"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args) if args.kind == "s3" else store_worker(args)))
        return 0
    if args.quick:
        args.gets, args.link_gets, args.keys, args.large_mib = 200, 50, 2000, 16
    if args.kind != "s3":
        stores = run_store_kind(args)
        print(table(stores))
        if args.out:
            Path(args.out).write_text(json.dumps(stores, indent=2) + "\n", encoding="utf-8")
        return 0
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, run_seaweedfs(Path(tmp) / "weed") as server:
        prefix = "client-bench"
        seed(server, prefix, args.large_mib, args.keys)
        upstream = server.endpoint.removeprefix("http://")
        link = LinkProcess(upstream, tmp, ["--latency-ms", "30", "--connection-mbps", "80",
                                           "--link-mbps", "125"], "client")  # fmt: skip
        try:
            for path, endpoint, gets in (("direct", server.endpoint, args.gets),
                                         ("link", link.endpoint, args.link_gets)):  # fmt: skip
                run_args = argparse.Namespace(**{**vars(args), "gets": gets})
                results[path] = {
                    client: measure(client, endpoint, server, prefix, run_args)
                    for client in CLIENTS
                }
        finally:
            link.stop()
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
