"""One cold read of a dataset's objects with AWS's ``s3torchconnector``: the raw-object ceiling.

Usage (under the reference venv, which holds ``s3torchconnector``)::

    .venv-ref/bin/python benchmarks/s3torch_worker.py --uri s3://bucket/prefix/ \
        --endpoint http://127.0.0.1:PORT --manifest sizes.json --workers 2 --result out.json

``S3IterableDataset.from_prefix`` lists the prefix and reads every object under it (the MDS
shards and ``index.json``), whole, through a ``DataLoader`` of ``--workers`` workers (sharded
across them). Nothing is decoded, shuffled or cached: this is what a Python reader of S3 moves
when it only fetches bytes, the practical ceiling of a loader over the same objects. The
credentials come from the environment (``AWS_ACCESS_KEY_ID``...); path-style addressing, as
SeaweedFS needs. The check: every object of ``--manifest`` (``{key: size}``) read exactly once,
whole, and no other.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from collections import Counter
from typing import Any

__all__ = ["check_objects", "main"]


def check_objects(read: list[tuple[str, int]], manifest: dict[str, int]) -> dict[str, Any]:
    """Whether ``read`` (``(key, bytes)`` pairs) is each object of ``manifest`` once, whole."""
    counts = Counter(key for key, _ in read)
    missing = sorted(set(manifest) - set(counts))
    extra = sorted(set(counts) - set(manifest))
    repeated = sorted(key for key, seen in counts.items() if seen > 1)
    short = sorted(key for key, size in read if key in manifest and size != manifest[key])
    return {
        "passed": not (missing or extra or repeated or short),
        "objects": len(read), "missing": missing[:5], "extra": extra[:5],
        "repeated": repeated[:5], "wrong_size": short[:5],
    }  # fmt: skip


def _key_and_size(reader: Any) -> tuple[str, int]:
    """The object's key (below the prefix's bucket) and the bytes read from it, whole."""
    size = 0
    while chunk := reader.read(8 << 20):
        size += len(chunk)
    return str(reader.key), size


def _cpu_seconds() -> float:
    times = os.times()  # the DataLoader's workers end with the epoch, and are counted here
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True, help="s3://bucket/prefix/ (end it with /)")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--manifest", required=True, help="JSON {key: size} of the objects")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    with open(args.manifest, encoding="utf-8") as handle:
        manifest: dict[str, int] = json.load(handle)

    connector = importlib.import_module("s3torchconnector")  # the reference venv's: untyped
    from torch.utils.data import DataLoader

    started, cpu_started = time.perf_counter(), _cpu_seconds()
    dataset = connector.S3IterableDataset.from_prefix(
        args.uri, region=args.region, endpoint=args.endpoint, transform=_key_and_size,
        s3client_config=connector.S3ClientConfig(force_path_style=True), enable_sharding=True,
    )  # fmt: skip
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers)
    read = [(key, size) for key, size in loader]
    seconds = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_started
    total = sum(size for _, size in read)
    checks = check_objects(read, manifest)
    result = {
        "version": connector.__version__, "seconds": seconds, "cpu_seconds": cpu,
        "bytes": total, "mb_per_s": total / seconds / 1e6, "checks": checks,
        "checks_passed": checks["passed"],
    }  # fmt: skip
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
