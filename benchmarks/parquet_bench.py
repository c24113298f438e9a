"""Streaming Parquet without conversion, beside the same rows converted to MDS.

    .venv/bin/python benchmarks/parquet_bench.py [--quick] [--out results/parquet.json]

One table (an int64 id, a float32, a ~100-character string, a list of 16 float32 and a ~1 KiB
binary) is written as Parquet files (row groups of 10,000 rows, zstd and uncompressed) and
converted to MDS with ``arrow_to_mds`` (uncompressed, and zstd). Each dataset is then read for
a full shuffled epoch through ``StreamingDataset`` and ``StreamingDataLoader`` (batch 256; 0 and
2 workers), read in place from local disk, one fresh process per measurement, best of two
epochs after a first one. Every epoch checks that each id arrives exactly once, so a fast wrong
answer cannot win.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # for benchmarks.report

from benchmarks.report import machine, write_report  # noqa: E402

BATCH = 256


def build(folder: Path, rows: int) -> dict[str, str]:
    """Write the Parquet files and their MDS conversions; return ``{name: folder}``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardstream.converters import arrow_to_mds

    rng = np.random.default_rng(7)
    ids = np.arange(rows, dtype=np.int64)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    text = [bytes(rng.choice(letters, 100)).decode() for _ in range(min(rows, 1000))]
    blobs = [rng.bytes(1024) for _ in range(min(rows, 1000))]
    table = pa.table(
        {
            "id": ids,
            "x": rng.random(rows, dtype=np.float32),
            "text": pa.array([text[i % len(text)] for i in range(rows)]),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(rows * 16, dtype=np.float32)), 16
            ).cast(pa.list_(pa.float32())),
            "blob": pa.array([blobs[i % len(blobs)] for i in range(rows)], pa.binary()),
        }
    )
    out: dict[str, str] = {}
    files = 8
    per_file = -(-rows // files)
    for codec in ("none", "zstd"):
        root = folder / f"parquet-{codec}"
        root.mkdir(parents=True)
        for k in range(files):
            part = table.slice(k * per_file, per_file)
            pq.write_table(part, root / f"part-{k:03d}.parquet", row_group_size=10_000,
                           compression=codec)  # fmt: skip
        out[f"parquet ({codec})"] = str(root)
    for name, compression in (("none", None), ("zstd", "zstd")):
        root = folder / f"mds-{name}"
        arrow_to_mds(table, str(root), compression=compression, progress=False)
        out[f"mds ({name})"] = str(root)
    return out


def measure(data: str, workers: int, epochs: int) -> dict[str, Any]:
    """In this process: ``1 + epochs`` shuffled epochs, each checked; samples/s per epoch."""
    from shardstream import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(local=data, batch_size=BATCH, shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
    rows = dataset.size
    runs = []
    for _ in range(1 + epochs):
        seen = bytearray(rows)
        count = 0
        started = time.perf_counter()
        for batch in loader:
            for i in batch["id"].tolist():
                seen[i] += 1
            count += len(batch["id"])
        seconds = time.perf_counter() - started
        ok = seen.count(0) == 0 and count == rows and sum(seen) == count  # one rank: no repeats
        runs.append({"seconds": seconds, "samples_per_s": count / seconds, "checks_passed": ok})
    timed = runs[1:]
    return {
        "rows": rows,
        "runs": runs,
        "best_samples_per_s": max(r["samples_per_s"] for r in timed),
        "checks_passed": all(r["checks_passed"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one timed epoch")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--out", default=str(HERE / "results" / "parquet.json"))
    parser.add_argument("--measure", nargs=3, metavar=("DATA", "WORKERS", "EPOCHS"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.measure:
        data, workers, epochs = args.measure
        print(json.dumps(measure(data, int(workers), int(epochs))))
        return
    rows = args.rows or (20_000 if args.quick else 500_000)
    epochs = 1 if args.quick else 2
    started = time.perf_counter()
    report: dict[str, Any] = {
        "rows": rows,
        "batch_size": BATCH,
        "machine": machine(),
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="shardstream-parquet-bench-") as tmp:
        datasets = build(Path(tmp), rows)
        for workers in [int(w) for w in args.workers.split(",")]:
            for name, folder in datasets.items():
                done = subprocess.run(
                    [sys.executable, __file__, "--measure", folder, str(workers), str(epochs)],
                    capture_output=True, text=True, timeout=1800, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    raise SystemExit(f"{name}, {workers} workers failed:\n{done.stderr[-3000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                report["results"][f"{name}, workers={workers}"] = result
                verdict = "PASS" if result["checks_passed"] else "FAIL"
                rate = result["best_samples_per_s"]
                print(f"  {name:<16} workers={workers}: {rate:>10,.0f} samples/s, checks {verdict}")
    report["checks_passed"] = all(r["checks_passed"] for r in report["results"].values())
    report["seconds"] = time.perf_counter() - started
    print(f"\nParquet beside MDS, {rows:,} rows, batch {BATCH} (samples/s, best epoch)")
    for workers in [int(w) for w in args.workers.split(",")]:
        for codec in ("none", "zstd"):
            pq_rate = report["results"][f"parquet ({codec}), workers={workers}"]
            mds_rate = report["results"][f"mds ({codec}), workers={workers}"]
            ratio = pq_rate["best_samples_per_s"] / mds_rate["best_samples_per_s"]
            print(
                f"  workers={workers} {codec:<5} parquet {pq_rate['best_samples_per_s']:>10,.0f}"
                f"  mds {mds_rate['best_samples_per_s']:>10,.0f}  parquet/mds {ratio:.2f}x"
            )
    write_report(report, args.out)


if __name__ == "__main__":
    main()
