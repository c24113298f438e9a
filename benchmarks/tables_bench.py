"""Parquet files and a Delta table read by shardstream, beside pyarrow's own reader (the floor).

    .venv/bin/python benchmarks/tables_bench.py [--quick] [--rows N] [--repeats R]
        [--batch 256 1024] [--baseline-src PATH [--rounds 2]] [--out results/tables.json]

Two tables of ``rows`` rows each, in 8 files of row groups of ``--row-group`` rows, written as a
Delta table by deltalake, the same data files copied into a plain Parquet folder:

* ``numeric``: an int64 id, an int32, a float32 and a float64;
* ``text``: an int64 id, a float32 and a ~100-character string.

Each table, in each format and at each batch size, is read a whole epoch at a time three ways,
in one process (the files in the page cache after a first, untimed epoch of each):

* ``floor``: pyarrow's own ``to_batches(batch_size=...)`` (``pyarrow.dataset`` over the
  Parquet files; ``DeltaTable.to_pyarrow_dataset()`` for the Delta version), each batch's
  numeric columns turned into torch tensors (``torch.from_numpy``) and its strings into a list;
* ``unshuffled``: ``StreamingDataset(shuffle=False)`` + ``StreamingDataLoader``, 0 workers;
* ``shuffled``: the same with ``shuffle=True`` and the default shuffle (``py1e``).

The three take turns, ``--repeats`` rounds, each round in another order; each epoch's wall
time and process CPU time (every thread of the process) are recorded, and the median of each
reported with rows/s and the ratio to the floor's. Every epoch checks that each id arrives
exactly once, so a fast wrong answer cannot win.

``--baseline-src`` compares two trees on the same files: each table, format and batch size is
measured in a fresh process per tree (``PYTHONPATH`` set to this tree's ``src`` or the
baseline's), ``--rounds`` rounds taking turns in ABBA order (``abba.py``: both trees copied
under ``/tmp``, the same heap settings, pinned to one core); each tree's ratios to the floor
(of its own process) are reported as their median over the rounds, and after's CPU time over
before's as the median over paired runs with its bootstrap 95% interval.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # for benchmarks.report

from benchmarks import abba  # noqa: E402
from benchmarks.report import format_table, machine, write_report  # noqa: E402

FILES = 8
METHODS = ("floor", "unshuffled", "shuffled")


def build(folder: Path, rows: int, row_group: int, names: list[str]) -> dict[str, dict[str, str]]:
    """Write the tables ``names`` as Delta and Parquet; return ``{table: {format: folder}}``."""
    import numpy as np
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    rng = np.random.default_rng(7)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    text = [bytes(rng.choice(letters, 100)).decode() for _ in range(1000)]
    ids = np.arange(rows, dtype=np.int64)
    tables = {
        "numeric": pa.table(
            {
                "id": ids,
                "label": rng.integers(0, 1000, rows, dtype=np.int32),
                "x": rng.random(rows, dtype=np.float32),
                "y": rng.random(rows),
            }
        ),
        "text": pa.table(
            {
                "id": ids,
                "x": rng.random(rows, dtype=np.float32),
                "text": pa.array([text[i % len(text)] for i in range(rows)]),
            }
        ),
    }
    out: dict[str, dict[str, str]] = {}
    per_file = -(-rows // FILES)
    for name in names:
        table = tables[name]
        delta = folder / name / "delta"
        for k in range(FILES):
            write_deltalake(
                str(delta), table.slice(k * per_file, per_file), mode="append",
                writer_properties=WriterProperties(max_row_group_size=row_group),
            )  # fmt: skip
        parquet = folder / name / "parquet"
        parquet.mkdir()
        for path in sorted(delta.glob("*.parquet")):
            shutil.copy(path, parquet / path.name)
        out[name] = {"delta": str(delta), "parquet": str(parquet)}
    return out


def floor_batches(folder: str, kind: str, batch: int) -> Iterator[dict[str, Any]]:
    """The batches pyarrow reads of the files: torch tensors (numbers) and lists (strings)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import torch

    if kind == "delta":
        from deltalake import DeltaTable

        dataset = DeltaTable(folder).to_pyarrow_dataset()
    else:
        dataset = ds.dataset(folder, format="parquet")
    for record_batch in dataset.to_batches(batch_size=batch):
        out: dict[str, Any] = {}
        for name, column in zip(record_batch.schema.names, record_batch.columns, strict=True):
            if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
                out[name] = torch.from_numpy(column.to_numpy(zero_copy_only=False))
            else:
                out[name] = column.to_pylist()
        yield out


def epoch(batches: Callable[[], Iterator[dict[str, Any]]], rows: int) -> dict[str, Any]:
    """One epoch: wall and CPU seconds, and whether each id came exactly once."""
    import numpy as np

    wall = time.perf_counter()
    cpu = time.process_time()
    ids = [batch["id"].numpy() for batch in batches()]
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    seen = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    ok = len(seen) == rows and bool((np.bincount(seen, minlength=rows) == 1).all())
    return {"wall_s": wall, "cpu_s": cpu, "checks_passed": ok}


def measure(folder: str, kind: str, batch: int, rows: int, repeats: int) -> dict[str, Any]:
    """The three methods on one table in one format, ``repeats`` rounds taking turns."""
    from shardstream import StreamingDataLoader, StreamingDataset

    loaders = {
        method: StreamingDataLoader(
            StreamingDataset(
                local=folder, format=kind, batch_size=batch, shuffle=method == "shuffled"
            ),
            batch_size=batch,
        )
        for method in METHODS[1:]
    }
    runs: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {
        "floor": lambda: floor_batches(folder, kind, batch),
        "unshuffled": lambda: iter(loaders["unshuffled"]),
        "shuffled": lambda: iter(loaders["shuffled"]),
    }
    timed: dict[str, list[dict[str, Any]]] = {method: [] for method in METHODS}
    for method in METHODS:  # warm: the page cache, imports, footers read
        epoch(runs[method], rows)
    for number in range(repeats):
        order = METHODS[number % 3 :] + METHODS[: number % 3]
        for method in order if number % 2 == 0 else order[::-1]:
            timed[method].append(epoch(runs[method], rows))
    out: dict[str, Any] = {}
    for method, epochs in timed.items():
        wall = statistics.median(e["wall_s"] for e in epochs)
        cpu = statistics.median(e["cpu_s"] for e in epochs)
        out[method] = {
            "wall_s": wall,
            "cpu_s": cpu,
            "rows_per_s": rows / wall,
            "rows_per_cpu_s": rows / cpu if cpu > 0 else None,
            "epochs": len(epochs),
            "checks_passed": all(e["checks_passed"] for e in epochs),
        }
    for method in METHODS:
        floor = out["floor"]
        out[method]["ratio_to_floor"] = floor["wall_s"] / out[method]["wall_s"]
        out[method]["cpu_ratio_to_floor"] = floor["cpu_s"] / max(out[method]["cpu_s"], 1e-9)
    return out


def measure_in(src: str, folder: str, kind: str, batch: int, rows: int, repeats: int) -> Any:
    """:func:`measure` in a fresh process importing shardstream from ``src`` (``abba.py``)."""
    command = [
        sys.executable, __file__, "--child", folder, kind, str(batch), str(rows), str(repeats)
    ]  # fmt: skip
    out = subprocess.run(
        abba.pinned(command), env=abba.tree_env(src), capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(
    trees: dict[str, str], folder: str, kind: str, batch: int, rows: int, repeats: int, rounds: int
) -> dict[str, Any]:
    """Each tree's :func:`measure` in ``rounds`` rounds (ABBA), and the medians of its ratios."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _, name in abba.abba(rounds):
        runs[name].append(measure_in(trees[name], folder, kind, batch, rows, repeats))
    out: dict[str, Any] = {}
    for name, results in runs.items():
        out[name] = {
            "runs": results,
            **{
                f"{method}_{key}": statistics.median(r[method][key] for r in results)
                for method in METHODS
                for key in ("cpu_s", "cpu_ratio_to_floor", "ratio_to_floor")
            },
            "checks_passed": all(r[m]["checks_passed"] for r in results for m in METHODS),
        }
    for method in METHODS[1:]:  # after's CPU time over before's, runs paired (abba.compare)
        comparison = abba.compare(
            *([r[method]["cpu_s"] for r in runs[name]] for name in abba.TREES)
        )
        out[f"{method}_after_over_before"] = {
            **comparison.as_dict(), "verdict": abba.verdict(comparison)
        }  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 2 rounds")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--row-group", type=int, default=65_536)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--tables", nargs="+", default=["numeric", "text"])
    parser.add_argument("--formats", nargs="+", default=["delta", "parquet"])
    parser.add_argument("--out", default=str(HERE / "results" / "tables.json"))
    parser.add_argument("--baseline-src", help="the src folder of the code to compare with")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (--baseline-src)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one tree's measurement, printed as JSON for the comparing parent
        folder, kind, batch, rows, repeats = args.child
        print(json.dumps(measure(folder, kind, int(batch), int(rows), int(repeats))), flush=True)
        # The floor's deltalake and pyarrow threads can abort the interpreter's exit
        # ("terminate called without an active exception"): the figures are out, so skip it.
        os._exit(0)
    rows = args.rows or (20_000 if args.quick else 2_000_000)
    repeats = args.repeats or (2 if args.quick else 5)
    row_group = min(args.row_group, max(1, rows // FILES))
    started = time.perf_counter()
    report: dict[str, Any] = {
        "rows": rows,
        "row_group": row_group,
        "repeats": repeats,
        "machine": machine(),
        "results": {},
    }
    table = [["table", "format, batch", *(f"{m} rows/s" for m in METHODS), "ratio", "cpu ratio"]]
    if args.baseline_src:
        table = [["table", "format, batch", "cpu ratio: before", "after", "shuffled costs"]]
        table[0].append("after/before cpu")
        sources = {"before": os.path.abspath(args.baseline_src), "after": str(HERE.parent / "src")}
        report["trees"] = sources
    with tempfile.TemporaryDirectory(prefix="shardstream-tables-bench-", dir="/tmp") as tmp:
        if args.baseline_src:  # both trees copied side by side (abba.copy_trees)
            trees = abba.copy_trees(sources, Path(tmp) / "trees")
        folders = build(Path(tmp), rows, row_group, args.tables)
        for name, kinds in folders.items():
            for kind, folder in kinds.items():
                if kind not in args.formats:
                    continue
                for batch in args.batch:
                    if args.baseline_src:
                        both = compare(trees, folder, kind, batch, rows, repeats, args.rounds)
                        report["results"][f"{name}/{kind}/{batch}"] = both
                        table.append([name, f"{kind}, {batch}", *_compared(both)])
                        print(format_table(table[:1] + table[-1:]).splitlines()[-1], flush=True)
                        continue
                    result = measure(folder, kind, batch, rows, repeats)
                    report["results"][f"{name}/{kind}/{batch}"] = result
                    table.append(
                        [
                            name,
                            f"{kind}, {batch}",
                            *(f"{result[m]['rows_per_s']:,.0f}" for m in METHODS),
                            " / ".join(f"{result[m]['ratio_to_floor']:.2f}" for m in METHODS[1:]),
                            " / ".join(
                                f"{result[m]['cpu_ratio_to_floor']:.2f}" for m in METHODS[1:]
                            ),
                        ]
                    )
                    print(format_table(table[:1] + table[-1:]).splitlines()[-1], flush=True)
    print(format_table(table))
    report["checks_passed"] = all(
        method["checks_passed"]
        for result in report["results"].values()
        for method in result.values()
        if "checks_passed" in method
    )  # per method, or (--baseline-src) per tree
    report["seconds"] = time.perf_counter() - started
    write_report(report, args.out)


def _compared(both: dict[str, Any]) -> list[str]:
    """The cells of one row of two trees compared.

    Unshuffled / shuffled CPU ratios to the floor before and after; shuffled's cost after;
    after's CPU time over before's, unshuffled / shuffled (``abba.compare``).
    """
    cells = [
        " / ".join(f"{both[tree][f'{m}_cpu_ratio_to_floor']:.2f}" for m in METHODS[1:])
        for tree in ("before", "after")
    ]
    after = both["after"]
    changes = " / ".join(
        f"{change['ratio']:.2f} ({change['verdict']})"
        for change in (both[f"{m}_after_over_before"] for m in METHODS[1:])
    )
    return [*cells, f"{after['shuffled_cpu_s'] / after['unshuffled_cpu_s']:.1f}x", changes]


if __name__ == "__main__":
    main()
