"""One library's half of the download benchmark, run by ``download_bench.py`` under its own venv.

``--lib shardstream``: ``shardstream.storage.download_file`` with default ``DownloadOptions``
and one ``S3Store`` for every shard, given each shard's size as a dataset gives it from
``index.json``. ``--lib streaming``: mosaicml-streaming 0.13's S3
downloader (``CloudDownloader.get(remote).download(remote, local, timeout)``), one downloader
for every shard, as its ``Stream`` keeps one. Both read the endpoint and credentials from the
environment (``S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``).

Shards download one after another (``--shard-concurrency 1``, the default, as one reader thread
of either library does), or ``K`` at a time from a thread pool. The first shard is downloaded
once untimed so that client creation and imports are never counted. Every file is checked
(size after each pass, sha256 after the last) outside the timings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Download = Callable[[str, str, int], None]


def shardstream_downloader(remote: str) -> tuple[Download, str]:
    from shardstream import __version__
    from shardstream.storage import download_file, open_store

    store = open_store(remote)

    def download(name: str, local: str, size: int) -> None:
        download_file(store, name, local, expected_size=size)  # the size from index.json

    return download, __version__


def streaming_downloader(remote: str) -> tuple[Download, str]:
    import streaming
    from streaming.base.storage import CloudDownloader

    downloader = CloudDownloader.get(remote)

    def download(name: str, local: str, size: int) -> None:
        downloader.download(f"{remote}/{name}", local, 60.0)  # it takes no size

    return download, str(streaming.__version__)


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=["shardstream", "streaming"], required=True)
    parser.add_argument("--remote", required=True, help="s3://bucket/prefix of the shards")
    parser.add_argument("--manifest", required=True, help="JSON list of [name, size, sha256]")
    parser.add_argument("--dest", required=True, help="a folder to download into (emptied)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shard-concurrency", type=int, default=1)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()

    with open(args.manifest, encoding="utf-8") as handle:
        manifest: list[list[Any]] = json.load(handle)
    started = time.perf_counter()
    make = shardstream_downloader if args.lib == "shardstream" else streaming_downloader
    download, version = make(args.remote)
    import_seconds = time.perf_counter() - started

    warm = os.path.join(args.dest, "warm-up")
    os.makedirs(warm, exist_ok=True)
    first, first_size, _ = manifest[0]
    download(first, os.path.join(warm, first), first_size)  # client, connections: untimed
    shutil.rmtree(warm)

    total = sum(int(size) for _, size, _ in manifest)
    seconds: list[float] = []
    failures: list[str] = []
    folder = os.path.join(args.dest, "shards")
    for _ in range(args.repeats):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        targets = [(name, os.path.join(folder, name), size) for name, size, _ in manifest]
        begin = time.perf_counter()
        if args.shard_concurrency == 1:
            for name, local, size in targets:
                download(name, local, size)
        else:
            with ThreadPoolExecutor(args.shard_concurrency) as pool:
                list(pool.map(lambda target: download(*target), targets))
        seconds.append(time.perf_counter() - begin)
        for name, size, _ in manifest:  # untimed
            actual = os.path.getsize(os.path.join(folder, name))
            if actual != size:
                failures.append(f"{name}: {actual} bytes, expected {size}")
    for name, _, digest in manifest:  # untimed, after the last pass
        if sha256_file(os.path.join(folder, name)) != digest:
            failures.append(f"{name}: sha256 differs")
    shutil.rmtree(folder, ignore_errors=True)

    best = min(seconds)
    result = {
        "lib": args.lib,
        "version": version,
        "python": sys.version.split()[0],
        "shard_concurrency": args.shard_concurrency,
        "shards": len(manifest),
        "bytes": total,
        "seconds": {"all": seconds, "best": best, "median": statistics.median(seconds)},
        "mb_per_s": {
            "best": total / best / 1e6,
            "median": total / statistics.median(seconds) / 1e6,
        },
        "import_seconds": import_seconds,
        "checks": {"passed": not failures, "failures": failures[:20]},
    }
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
