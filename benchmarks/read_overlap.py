"""How much of a cold epoch's bytes must have landed before its batches can be read.

Usage::

    .venv/bin/python benchmarks/read_overlap.py [--quick] [--parts 16,1,0.0625]

Writes each cold-epoch workload of ``wan_bench.py`` (the same samples and 64 MiB shards) to a
local folder, reads one epoch of it, shuffled and not, and records the order of its samples
(their labels). Each shard is cut into byte ranges of the sizes given (MiB); a batch can be
read once every range holding one of its samples, and its shard's header, has landed. With
the ranges fetched in the best order for the reader (each when a batch first needs it), the
script prints the share of the epoch's bytes that must have landed before the first batch,
before a tenth and before half of the batches: the most that reading samples as their bytes
arrive could overlap the transfer. No network, no timing: the figures are the plans'.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.streaming_worker import Payloads  # noqa: E402
from benchmarks.wan_bench import BATCH_SIZE, QUICK_SCALE, SEED, SHARD_BYTES, WORKLOADS  # noqa: E402
from shardstream import MDSWriter, StreamingDataset  # noqa: E402

MiB = 1 << 20


def shard_offsets(folder: str) -> list[NDArray[np.int64]]:
    """Each shard's sample offsets (``samples + 1`` of them), from its header."""
    with open(os.path.join(folder, "index.json"), encoding="utf-8") as handle:
        shards = json.load(handle)["shards"]
    found = []
    for shard in shards:
        count = int(shard["samples"])
        with open(os.path.join(folder, shard["raw_data"]["basename"]), "rb") as handle:
            head = handle.read(4 * (count + 2))
        found.append(np.frombuffer(head, "<u4", count + 1, offset=4).astype(np.int64))
    return found


def needed_before(
    order: NDArray[np.int64], offsets: list[NDArray[np.int64]], part: int
) -> dict[str, float]:
    """Shares of the bytes that must have landed before batch 1, 10% and 50% of the batches."""
    counts = np.array([len(o) - 1 for o in offsets])
    starts = np.concatenate([[0], np.cumsum(counts)])
    sizes = [int(o[-1]) for o in offsets]
    shard = np.searchsorted(starts, order, side="right") - 1
    local = order - starts[shard]
    begin = np.concatenate(offsets)[starts[shard] + shard + local]  # offsets hold one more
    end = np.concatenate(offsets)[starts[shard] + shard + local + 1]
    first_range = np.concatenate([[0], np.cumsum([-(-size // part) for size in sizes])])
    batch = np.arange(len(order)) // BATCH_SIZE
    need = np.full(int(first_range[-1]), np.iinfo(np.int64).max)
    for ranges in (begin // part, (end - 1) // part, np.zeros_like(begin)):  # and the header
        np.minimum.at(need, first_range[shard] + ranges, batch)
    range_bytes = np.concatenate(
        [np.minimum(part, size - np.arange(0, size, part)) for size in sizes]
    )
    batches = int(batch[-1]) + 1
    total = sum(sizes)
    return {
        f"before {label}": float(range_bytes[need <= at].sum() / total)
        for label, at in (("batch 1", 0), ("10%", batches // 10), ("50%", batches // 2))
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/16 of the sizes")
    parser.add_argument("--parts", default="16,1,0.0625", help="range sizes, MiB")
    args = parser.parse_args()
    parts = [max(1, int(float(size) * MiB)) for size in args.parts.split(",")]
    scale = QUICK_SCALE if args.quick else 1
    tmp = tempfile.mkdtemp(prefix="shardstream-read-overlap-")
    try:
        for name, spec in WORKLOADS.items():
            payloads = Payloads(
                spec["samples"] // scale, spec["size"], spec["jitter"], SEED, spec.get("tokens", 0)
            )
            folder = os.path.join(tmp, name)
            with MDSWriter(out=folder, columns=payloads.columns, size_limit=SHARD_BYTES) as out:
                for index in range(payloads.samples):
                    out.write(payloads.sample(index))
            offsets = shard_offsets(folder)
            for shuffle in (True, False):
                dataset = StreamingDataset(local=folder, batch_size=BATCH_SIZE, shuffle=shuffle)
                order = np.array([int(sample["label"]) for sample in dataset], np.int64)
                for part in parts:
                    ranges = sum(-(-int(o[-1]) // part) for o in offsets)
                    shares = needed_before(order, offsets, part)
                    print(
                        f"{name:13} shuffle={shuffle!s:5} ranges of {part / MiB:g} MiB "
                        f"({ranges} requests): "
                        + ", ".join(f"{label} {share:.1%}" for label, share in shares.items()),
                        flush=True,
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
