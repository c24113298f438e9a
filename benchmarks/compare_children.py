"""The measurements ``compare_trees.py`` runs, one per fresh process, under one tree.

Each function imports shardstream from ``PYTHONPATH`` (the tree under test) and returns
``{row: {"cpu": s, "wall": s, "checks_passed": bool}}``.
"""

from __future__ import annotations

import gc
import resource
import time
from pathlib import Path
from typing import Any

SEED = 20240601
BATCH = 256


def _children_cpu() -> float:
    """CPU seconds of this process's reaped children (DataLoader workers, once joined)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def epoch(
    data: str,
    cache: str | None,
    workers: int,
    shuffle: bool,
    epochs: int,
    drop: int,
    samples: int,
    size: int,
    jitter: int,
    tokens: int = 0,
) -> dict[str, Any]:
    """``epochs`` warm epochs, every batch checked; the best kept epoch's CPU and wall time.

    With a ``cache``, ``data`` is the remote and the shards are read from their copies in the
    cache, as the suite's rows read them; without, in place.

    CPU time counts this process's threads and the epoch's workers (torch joins them at the
    epoch's end when they are not persistent, so their time is the children's by then).
    """
    from benchmarks.streaming_worker import Checker, Payloads
    from shardstream import StreamingDataLoader, StreamingDataset

    checker = Checker(Payloads(samples, size, jitter, SEED, tokens))
    dataset = StreamingDataset(
        remote=data if cache else None, local=cache or data, batch_size=BATCH, shuffle=shuffle
    )
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
    gc.collect()
    gc.freeze()
    cpus, walls, passed = [], [], True
    for _ in range(epochs):
        children = _children_cpu()
        cpu = time.process_time()
        wall = time.perf_counter()
        for batch in loader:
            checker.batch(batch)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu + _children_cpu() - children)
        passed = passed and bool(checker.end_epoch()["passed"])
    kept = slice(min(drop, epochs - 1), None)
    return {
        "cpu": min(cpus[kept]),
        "wall": min(walls[kept]),
        "checks_passed": passed,
        "cpus": cpus,
        "walls": walls,
    }


def getitem(folder: str, reads: int) -> dict[str, Any]:
    """``getitem_bench.measure`` for each kind of dataset: a row each."""
    from benchmarks.getitem_bench import KINDS, NAMES, measure

    out = {}
    for kind in KINDS:
        cpu, wall = measure(kind, Path(folder), reads)
        out[f"ds[i]: {NAMES[kind]}, {reads:,} reads"] = {"cpu": cpu, "wall": wall}
    return out


def table(folder: str, kind: str, rows: int, table: str) -> dict[str, Any]:
    """``tables_bench.measure`` at batches of 256: in order, shuffled, and pyarrow's floor.

    The floor does not run shardstream: its ratio is the run's control for the machine.
    """
    from benchmarks.tables_bench import measure

    result = measure(folder, kind, BATCH, rows, 3)
    names = {"unshuffled": "in order", "shuffled": "shuffled", "floor": "pyarrow floor (control)"}
    return {
        f"table: {table} {kind}, {name}": {
            "cpu": result[method]["cpu_s"],
            "wall": result[method]["wall_s"],
            "checks_passed": result[method]["checks_passed"],
        }
        for method, name in names.items()
    }
