"""CPU time of random access, ``ds[i]``, under two source trees: before and after a change.

    .venv/bin/python benchmarks/getitem_bench.py --trees OLD_SRC NEW_SRC [--reads 50000]
        [--rounds 4] [--out results/getitem.json]

One small dataset is written three ways (an int, a float and a ~100-byte string a sample):
MDS shards read through ``StreamingDataset`` and ``LocalDataset``, and Parquet files read
through ``ParquetDataset``. Each measurement is a fresh process run with ``PYTHONPATH`` set to
one tree: it opens the dataset, reads every sample once (shards opened, pages warm), then
times ``--reads`` random ``ds[i]`` by ``time.process_time`` (CPU time, robust to a loaded
machine). The trees alternate ABBA over ``--rounds`` rounds (``abba.py``: both trees copied
under one folder of ``/tmp``, the same heap settings, pinned to one core); the medians are
printed, and the new tree's over the old one's, the median over paired runs with its
bootstrap 95% interval. ``compare_trees.py`` runs the same measurement among its rows.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for benchmarks.abba

from benchmarks import abba

KINDS = ("streaming", "local", "parquet")
NAMES = {"streaming": "StreamingDataset", "local": "LocalDataset", "parquet": "ParquetDataset"}


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


def _parquet_dataset(root: str) -> Any:
    """A ``ParquetDataset`` over the files at ``root``, wherever the tree keeps the class."""
    try:
        dataset = importlib.import_module("shardstream.tables.dataset")
        layouts = importlib.import_module("shardstream.tables.layout_index")
    except ImportError:  # a tree from before tables/ was a folder of its own
        dataset = importlib.import_module("shardstream.dataset.parquet")
        layouts = importlib.import_module("shardstream.cache.parquet_index")
    return dataset.ParquetDataset(root, layouts.local_layouts(root))


def measure(kind: str, folder: Path, reads: int) -> tuple[float, float]:
    """CPU and wall seconds of ``reads`` random ``ds[i]`` on the ``kind`` dataset (here)."""
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
        ds = _parquet_dataset(str(folder / "parquet"))
    size = len(ds)
    for i in range(size):  # every shard opened, every page in
        ds[i]
    keys = np.random.default_rng(11).integers(0, size, reads).tolist()
    wall = time.perf_counter()
    start = time.process_time()
    for key in keys:
        ds[key]
    return time.process_time() - start, time.perf_counter() - wall


def child(args: argparse.Namespace) -> None:
    print(json.dumps({kind: measure(kind, Path(args.data), args.reads)[0] for kind in KINDS}))


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
    times: dict[str, dict[str, list[float]]] = {t: {k: [] for k in KINDS} for t in abba.TREES}
    with tempfile.TemporaryDirectory(prefix="getitem-bench-", dir="/tmp") as scratch:
        folder = Path(scratch)
        paths = [str(Path(tree).resolve()) for tree in args.trees]
        sources = dict(zip(abba.TREES, paths, strict=True))
        trees = abba.copy_trees(sources, folder)
        code = f"from pathlib import Path; from benchmarks.getitem_bench import build; build(Path({str(folder)!r}), {args.rows})"  # noqa: E501
        subprocess.run([sys.executable, "-c", code], check=True, env=abba.tree_env(trees["after"]))
        for _, name in abba.abba(args.rounds):
            command = [sys.executable, __file__, "--child-data", str(folder)]
            command += ["--reads", str(args.reads)]
            out = subprocess.run(
                abba.pinned(command), env=abba.tree_env(trees[name]), check=True,
                capture_output=True, text=True,
            )  # fmt: skip
            for kind, seconds in json.loads(out.stdout.splitlines()[-1]).items():
                times[name][kind].append(seconds)
    report: dict[str, Any] = {"reads": args.reads, "rounds": args.rounds, "kinds": {}}
    for kind in KINDS:
        old, new = times["before"][kind], times["after"][kind]
        comparison = abba.compare(old, new)
        report["kinds"][kind] = {"old": old, "new": new, **comparison.as_dict()}
        print(
            f"{kind:10s} old {statistics.median(old) * 1e6 / args.reads:6.2f} us  new "
            f"{statistics.median(new) * 1e6 / args.reads:6.2f} us a read  new/old "
            f"{comparison.ratio:.3f} ({comparison.low:.3f}-{comparison.high:.3f}, "
            f"{abba.verdict(comparison)})"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
