"""The machine's floors under the suite's missed rows: costs no loader can avoid here.

Usage::

    .venv/bin/python benchmarks/floors_bench.py [--out benchmarks/results/floors.json]

Runs no loader. Measures, on this machine, the primitive each missed row of the suite waits on
(``suite_limits.py`` names them; ``benchmarks/README.md``, "What limits the rows that miss",
sets them beside the rows):

* ``read``: one value out of a page-cached file at a random offset, by ``pread`` into a new
  ``bytes`` and by slicing a mapping that was touched once before (the copy a loader that
  yields ``bytes`` makes), for 100 KiB and 1 KiB values. Twice: each value dropped at once
  (its memory, still in the CPU's caches, takes the next one), and values held in batches
  of 256 as a loader's batch holds them, each copied to memory not in the caches (the floor
  of a loader's epoch). Then batches of 256 read with io_uring, one system call a batch
  into one buffer, and copied into ``bytes`` from there (``shardstream.cache.uring``, what
  shardstream's reading thread uses): one thread's cost, with nothing overlapped.
  glibc's trim threshold is raised first, as earlier frees of large blocks raise it in a
  loader's process (an epoch there takes ~2 page faults a sample);
  at its default, freeing each batch hands its memory back to the system and the next
  batch faults it in again, which would time the allocator instead.
* ``files``: a cache fill's file operations for 100 tiny shards in a fresh folder of the
  temporary directory's file system: a lock file, then a temporary written and renamed into
  place (shardstream's crash-safe fetch), against one file written in place.
* ``plan``: shardstream's epoch plan of 102,400 samples in 2 shards, resumed at half of it (the
  resume workload: one rank, py1e), the part of a resumed start that depends on the data.
  Measured first, with the allocator's defaults: its arrays are faulted in afresh each time,
  as in a resumed process, which computes one plan (kept memory halves the figure).
* ``dataloader``: torch's DataLoader over a dataset that holds one ready batch: from
  constructing it to the first batch, with 0 and 2 worker processes (the floor of any
  loader's first batch through it, with no plan and no shards).

Each figure is the best and the median of its repeats. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import mmap
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # for benchmarks.report

from benchmarks.report import format_table, machine  # noqa: E402
from benchmarks.streaming_bench import BATCH_SIZE as BATCH  # noqa: E402  (values a batch holds)
from shardstream.cache.uring import Ring, open_ring  # noqa: E402


def _raise_trim_threshold() -> bool:
    """Keep freed memory in this process, as a loader's process does (see the module doc).

    Returns:
        Whether it was done (glibc only).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 64 << 20))


def _summary(values: list[float]) -> dict[str, float]:
    return {"best": min(values), "median": statistics.median(values)}


def _repeat(measure: Callable[[], float], repeats: int) -> dict[str, float]:
    return _summary([measure() for _ in range(repeats)])


def read_costs(folder: str, value: int, file_bytes: int, reads: int, repeats: int) -> Any:
    """Microseconds per random read of ``value`` bytes: ``pread`` and a mapped slice."""
    path = os.path.join(folder, f"values-{value}")
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        for _ in range(file_bytes // len(chunk)):
            handle.write(chunk)
    rng = np.random.default_rng(0)
    offsets = (rng.integers(0, file_bytes // value - 1, reads) * value).tolist()
    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        for offset in range(0, file_bytes, mmap.PAGESIZE):  # page cache and mapping warm
            mapped[offset]

        def by_pread(held: int) -> float:
            read = os.pread
            started = time.perf_counter()
            for first in range(0, reads, held):
                batch = [read(fd, value, offset) for offset in offsets[first : first + held]]
                del batch
            return (time.perf_counter() - started) / reads * 1e6

        def by_slice(held: int) -> float:
            started = time.perf_counter()
            for first in range(0, reads, held):
                batch = [
                    mapped[offset : offset + value] for offset in offsets[first : first + held]
                ]
                del batch
            return (time.perf_counter() - started) / reads * 1e6

        def by_uring(ring: Ring, held: int) -> float:
            everything = np.asarray(offsets, dtype=np.int64)
            sizes = np.full(held, value, np.int64)
            into = np.empty(held * value, np.uint8)
            view = memoryview(into)  # type: ignore[arg-type]  # numpy arrays are buffers
            starts = range(0, held * value, value)
            started = time.perf_counter()
            fds = np.full(held, fd, np.int32)
            addresses = (into.ctypes.data + np.arange(held, dtype=np.int64) * value).astype(
                np.uint64
            )
            for first in range(0, reads, held):
                chunk = everything[first : first + held]
                todo = len(chunk)
                results = ring.read(fds[:todo], chunk, sizes[:todo], addresses[:todo])
                if (results != value).any():
                    raise OSError(f"io_uring read {results[results != value][:1]} of {value}")
                batch = [bytes(view[start : start + value]) for start in starts[: len(chunk)]]
                del batch
            return (time.perf_counter() - started) / reads * 1e6

        result: dict[str, Any] = {
            "pread_us": _repeat(functools.partial(by_pread, 1), repeats),
            "mapped_us": _repeat(functools.partial(by_slice, 1), repeats),
            "pread_batch_us": _repeat(functools.partial(by_pread, BATCH), repeats),
            "mapped_batch_us": _repeat(functools.partial(by_slice, BATCH), repeats),
        }
        try:
            ring = open_ring(BATCH)
        except OSError as exc:
            result["uring_batch_us"] = {"unavailable": str(exc)}
        else:
            try:
                by_batch = functools.partial(by_uring, ring, BATCH)
                result["uring_batch_us"] = _repeat(by_batch, repeats)
            finally:
                ring.close()
        mapped.close()
        return result
    finally:
        os.close(fd)
        os.unlink(path)


def file_costs(folder: str, shards: int, repeats: int) -> Any:
    """Microseconds per shard: lock + temporary + rename, against one file written in place."""
    payload = os.urandom(200)

    def fill(crash_safe: bool) -> float:
        target = tempfile.mkdtemp(dir=folder)
        started = time.perf_counter()
        for shard in range(shards):
            final = os.path.join(target, f"shard.{shard:05}.mds")
            if crash_safe:
                lock = os.open(final + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
                temporary = final + ".tmp"
                fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, payload)
                os.close(fd)
                os.rename(temporary, final)
                os.close(lock)
            else:
                fd = os.open(final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, payload)
                os.close(fd)
        return (time.perf_counter() - started) / shards * 1e6

    # Folders are left until the end: deleting many files makes the next creations slower on
    # an ext4 without a journal (see the time-to-first-batch notes), which would time that.
    return {
        "crash_safe_us": _repeat(lambda: fill(True), repeats),
        "one_file_us": _repeat(lambda: fill(False), repeats),
    }


def plan_cost(repeats: int) -> Any:
    """Milliseconds for one rank's py1e plan of 102,400 samples in 2 shards, from the half."""
    from shardstream.sampling import EpochPlan, ShuffleConfig, Topology

    sizes = np.array([51_200, 51_200], dtype=np.int64)

    def plan() -> float:
        started = time.perf_counter()
        EpochPlan.for_worker(
            sizes, topology=Topology(nodes=1, ranks_per_node=1, workers_per_rank=1),
            num_canonical_nodes=1, global_batch_size=256, epoch=0,
            shuffle=ShuffleConfig(shuffle=True, algo="py1e", seed=9176), drop_first=51_200,
        )  # fmt: skip
        return (time.perf_counter() - started) * 1e3

    plan()  # imports and first-call costs are not the plan's
    return {"ms": _repeat(plan, repeats)}


def dataloader_costs(workers: list[int], repeats: int) -> Any:
    """Milliseconds from a DataLoader's construction to its first (ready-made) batch."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    batch = {"data": [bytes(1024)] * 256, "label": torch.arange(256)}

    class OneBatch(IterableDataset[dict[str, Any]]):
        def __iter__(self) -> Iterator[dict[str, Any]]:
            yield batch

    def first(count: int) -> float:
        started = time.perf_counter()
        loader = DataLoader(OneBatch(), batch_size=None, num_workers=count)
        iterator = iter(loader)
        next(iterator)
        seconds = time.perf_counter() - started
        del iterator, loader  # workers are stopped outside the timed part
        return seconds * 1e3

    first(0)
    return {
        str(count): {"ms": _repeat(functools.partial(first, count), repeats)} for count in workers
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "floors.json")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller files, fewer reads")
    args = parser.parse_args()
    scale = 8 if args.quick else 1
    report: dict[str, Any] = {"benchmark": "floors", "quick": args.quick, "machine": machine()}
    # The plan first, with glibc's defaults: as in a resumed process, its arrays come from
    # memory the system hands over afresh (page faults included), not from freed memory kept.
    report["plan"] = plan_cost(args.repeats)
    report["trim_threshold_raised"] = _raise_trim_threshold()
    with tempfile.TemporaryDirectory() as folder:
        report["read"] = {
            "100KiB": read_costs(folder, 100 * 1024, (512 << 20) // scale, 5_000 // scale,
                                 args.repeats),
            "1KiB": read_costs(folder, 1024, (64 << 20) // scale, 200_000 // scale, args.repeats),
        }  # fmt: skip
        report["files"] = file_costs(folder, 100, args.repeats)
    report["dataloader"] = dataloader_costs([0, 2], args.repeats)

    def cell(summary: dict[str, float]) -> list[str]:
        return [f"{summary['best']:,.2f}", f"{summary['median']:,.2f}"]

    rows = [["what", "unit", "best", "median"]]
    for name, costs in report["read"].items():
        rows.append([f"read {name}, pread into bytes", "us", *cell(costs["pread_us"])])
        rows.append([f"read {name}, mapped slice", "us", *cell(costs["mapped_us"])])
        held = f"held {BATCH} a batch"
        rows.append([f"read {name}, pread, {held}", "us", *cell(costs["pread_batch_us"])])
        rows.append([f"read {name}, mapped, {held}", "us", *cell(costs["mapped_batch_us"])])
        uring = costs["uring_batch_us"]
        rows.append(
            [f"read {name}, io_uring, {held}", "us", *cell(uring)]
            if "best" in uring
            else [f"read {name}, io_uring: {uring['unavailable']}", "us", "-", "-"]
        )
    rows.append(["100 shards: lock + temporary + rename", "us/shard",
                 *cell(report["files"]["crash_safe_us"])])  # fmt: skip
    one_file = report["files"]["one_file_us"]
    rows.append(["100 shards: one file in place", "us/shard", *cell(one_file)])
    rows.append(["epoch plan from 50% of 102,400 samples", "ms", *cell(report["plan"]["ms"])])
    for count, costs in report["dataloader"].items():
        rows.append([f"DataLoader first batch, {count} workers", "ms", *cell(costs["ms"])])
    print(format_table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\n{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
