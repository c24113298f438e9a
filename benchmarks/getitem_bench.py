"""CPU time of random access, ``ds[i]``, under two source trees: before and after a change.

    .venv/bin/python benchmarks/getitem_bench.py --trees OLD_SRC NEW_SRC [--reads 50000]
        [--rounds 4] [--out results/getitem.json]

One small dataset is written three ways (an int, a float and a ~100-byte string a sample):
MDS shards read through ``StreamingDataset`` and ``LocalDataset``, and Parquet files read
through ``ParquetDataset``. Each measurement is a fresh process run with ``PYTHONPATH`` set to
one tree: it opens the dataset, reads every sample once (shards opened, pages warm), then
times ``--reads`` random ``ds[i]`` by ``time.process_time`` (CPU time, robust to a loaded
machine). The trees alternate ABBA over ``--rounds`` rounds; the medians and each tree's
spread are printed, and the new tree's median as a ratio of the old one's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KINDS = ("streaming", "local", "parquet")


def build(folder: Path, rows: int) -> None:
    """Write the MDS shards and the Parquet files of ``rows`` samples under ``folder``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardstream.writer import MDSWriter

    rng = np.random.default_rng(7)
    text = ["".join(rng.choice(list("abcdefgh "), 100)) for _ in range(64)]
    columns = {"id": "int", "x": "float64", "text": "str"}
    with MDSWriter(out=str(folder / "mds"), columns=columns, size_limit=1 << 20) as out:
        for i in range(rows):
            out.write({"id": i, "x": float(i) / 3, "text": text[i % 64]})
    (folder / "parquet").mkdir()
    for part in range(4):
        ids = np.arange(part * rows // 4, (part + 1) * rows // 4, dtype=np.int64)
        table = pa.table(
            {"id": ids, "x": ids / 3, "text": pa.array([text[i % 64] for i in ids.tolist()])}
        )
        pq.write_table(table, folder / "parquet" / f"part-{part}.parquet", row_group_size=5000)


def measure(kind: str, folder: Path, reads: int) -> float:
    """CPU seconds of ``reads`` random ``ds[i]`` on the ``kind`` dataset (in this process)."""
    import time

    import numpy as np

    ds: Any
    if kind == "streaming":
        from shardstream import StreamingDataset

        ds = StreamingDataset(local=str(folder / "mds"), batch_size=1)
    elif kind == "local":
        from shardstream.dataset import LocalDataset

        ds = LocalDataset(str(folder / "mds"))
    else:
        from shardstream.tables.dataset import ParquetDataset
        from shardstream.tables.layout_index import local_layouts

        root = str(folder / "parquet")
        ds = ParquetDataset(root, local_layouts(root))
    size = len(ds)
    for i in range(size):  # every shard opened, every page in
        ds[i]
    keys = np.random.default_rng(11).integers(0, size, reads).tolist()
    start = time.process_time()
    for key in keys:
        ds[key]
    return time.process_time() - start


def child(args: argparse.Namespace) -> None:
    print(json.dumps({kind: measure(kind, Path(args.data), args.reads) for kind in KINDS}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, metavar=("OLD_SRC", "NEW_SRC"))
    parser.add_argument("--reads", type=int, default=50_000)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child-data", dest="data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data:
        child(args)
        return
    if not args.trees:
        parser.error("--trees OLD_SRC NEW_SRC is required")
    trees = [str(Path(tree).resolve()) for tree in args.trees]
    times: dict[str, dict[str, list[float]]] = {t: {k: [] for k in KINDS} for t in ("old", "new")}
    with tempfile.TemporaryDirectory(prefix="getitem-bench-") as scratch:
        folder = Path(scratch)
        code = (
            "from pathlib import Path; from benchmarks.getitem_bench import build; "
            f"build(Path({str(folder)!r}), {args.rows})"
        )
        path = f"{trees[1]}:{Path(__file__).resolve().parent.parent}"
        env = {**os.environ, "PYTHONPATH": path}
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        order = [("old", 0), ("new", 1), ("new", 1), ("old", 0)]
        for _ in range(args.rounds):
            for name, tree in order:
                env = {**os.environ, "PYTHONPATH": trees[tree]}
                command = [sys.executable, __file__, "--child-data", str(folder)]
                command += ["--reads", str(args.reads)]
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                for kind, seconds in json.loads(out.stdout.splitlines()[-1]).items():
                    times[name][kind].append(seconds)
    report: dict[str, Any] = {"reads": args.reads, "rounds": args.rounds, "kinds": {}}
    for kind in KINDS:
        old, new = statistics.median(times["old"][kind]), statistics.median(times["new"][kind])
        report["kinds"][kind] = {"old": times["old"][kind], "new": times["new"][kind]}
        print(
            f"{kind:10s} old {old * 1e6 / args.reads:6.2f} us  new {new * 1e6 / args.reads:6.2f}"
            f" us a read  new/old {new / old:.3f}  (old {min(times['old'][kind]):.3f}-"
            f"{max(times['old'][kind]):.3f} s, new {min(times['new'][kind]):.3f}-"
            f"{max(times['new'][kind]):.3f} s)"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
