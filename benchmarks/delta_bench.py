"""A Delta table's version streamed in place, beside plain Parquet, MDS and the Spark routes.

    .venv/bin/python benchmarks/delta_bench.py [--quick] [--rows N] [--out results/delta.json]

One table (an int64 id, a float32, a ~100-character string and a list of 16 float32) is written
as a Delta table by deltalake (8 appends, row groups of 10,000 rows), the same data files are
copied into a plain Parquet folder, and the rows are converted to MDS (``arrow_to_mds``,
uncompressed). Each is then read in a fresh process of its own:

* ``delta``, ``parquet``, ``mds``: ``StreamingDataset`` + ``StreamingDataLoader`` (batch 256,
  0 workers, shuffled), local disk read in place: seconds to the first batch (from
  constructing the dataset; pyarrow and deltalake are imported before), rows/s over a full
  epoch, and resumption: a state taken half way, loaded in a new process, seconds to its
  first batch; the two halves must cover every id exactly once, and each epoch must too, so
  a fast wrong answer cannot win.
* ``spark_topandas``: what a Spark user writes without a loader: ``spark.read.parquet`` of
  the same files, ``toPandas()``, then torch tensors batch by batch (Spark cannot read Delta
  here: its Delta jars come from Maven, which these machines cannot reach, so it reads the
  version's Parquet files), Arrow transfer on as Databricks has it. Session start is reported,
  not counted.
* ``petastorm_materialize``: Petastorm's converter materializes the DataFrame as Parquet
  (``df.write.parquet``) before reading; that write is timed (Petastorm itself does not run
  beside Spark 4). ``make_spark_converter``: shardstream's converter, which materializes MDS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
FILES = 8


def build(folder: Path, rows: int) -> dict[str, str]:
    """Write the Delta table, its files as plain Parquet, and MDS; return ``{name: folder}``."""
    import numpy as np
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    from shardstream.converters import arrow_to_mds

    rng = np.random.default_rng(7)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    text = [bytes(rng.choice(letters, 100)).decode() for _ in range(1000)]
    table = pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "x": rng.random(rows, dtype=np.float32),
            "text": pa.array([text[i % len(text)] for i in range(rows)]),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(rows * 16, dtype=np.float32)), 16
            ).cast(pa.list_(pa.float32())),
        }
    )
    delta = folder / "delta"
    per_file = -(-rows // FILES)
    for k in range(FILES):
        write_deltalake(
            str(delta), table.slice(k * per_file, per_file), mode="append",
            writer_properties=WriterProperties(max_row_group_size=10_000),
        )  # fmt: skip
    parquet = folder / "parquet"
    parquet.mkdir()
    for path in sorted(delta.glob("*.parquet")):
        shutil.copy(path, parquet / path.name)
    mds = folder / "mds"
    arrow_to_mds(table, str(mds), compression=None, progress=False)
    return {"delta": str(delta), "parquet": str(parquet), "mds": str(mds)}


def measure_stream(data: str, kind: str, rows: int) -> dict[str, Any]:
    """First batch, a checked epoch, and the first half of a resumed epoch (state saved)."""
    import deltalake  # noqa: F401 (imported before any timing, as a running job has it)
    import pyarrow.parquet  # noqa: F401

    from shardstream import StreamingDataLoader, StreamingDataset

    started = time.perf_counter()
    fmt = {"delta": "delta", "parquet": "parquet", "mds": "mds"}[kind]
    dataset = StreamingDataset(local=data, batch_size=BATCH, shuffle=True, format=fmt)
    loader = StreamingDataLoader(dataset, batch_size=BATCH)
    seen = bytearray(rows)
    first = None
    count = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - started
        for i in batch["id"].tolist():
            seen[i] += 1
        count += len(batch["id"])
    epoch = time.perf_counter() - started
    ok = count == rows and seen.count(1) == rows
    # Half of the next epoch, then the state a checkpoint would keep.
    half = []
    for number, batch in enumerate(loader):
        half.extend(batch["id"].tolist())
        if number + 1 >= (rows // BATCH) // 2:
            break
    return {
        "first_batch_s": first,
        "epoch_s": epoch,
        "rows_per_s": rows / epoch,
        "checks_passed": ok,
        "state": loader.state_dict(),
        "half": half,
    }


def measure_resume(data: str, kind: str, rows: int, state_file: str) -> dict[str, Any]:
    """Load the saved state in a new process: seconds to its first batch, and the rest."""
    import deltalake  # noqa: F401 (imported before any timing)
    import pyarrow.parquet  # noqa: F401

    from shardstream import StreamingDataLoader, StreamingDataset

    saved = json.loads(Path(state_file).read_text())
    started = time.perf_counter()
    dataset = StreamingDataset(local=data, batch_size=BATCH, shuffle=True, format=kind)
    loader = StreamingDataLoader(dataset, batch_size=BATCH)
    loader.load_state_dict(saved["state"])
    first = None
    rest: list[int] = []
    for batch in loader:
        if first is None:
            first = time.perf_counter() - started
        rest.extend(batch["id"].tolist())
    both = saved["half"] + rest
    ok = len(both) == rows and set(both) == set(range(rows))
    return {"resume_first_batch_s": first, "resume_checks_passed": ok}


def measure_spark(data: str, rows: int, scratch: str) -> dict[str, Any]:
    """Spark's routes: read -> toPandas -> torch, and Petastorm-style materialization."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import torch
    from pyspark.sql import SparkSession

    from shardstream.loader import make_spark_converter

    began = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", scratch)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")  # as Databricks has it
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    session = time.perf_counter() - began
    try:
        started = time.perf_counter()
        frame: Any = spark.read.parquet(data).toPandas()
        first = None
        count = 0
        ids = frame["id"].to_numpy()
        xs = frame["x"].to_numpy()
        for start in range(0, len(frame), BATCH):
            batch = {"id": torch.from_numpy(ids[start : start + BATCH]),
                     "x": torch.from_numpy(xs[start : start + BATCH])}  # fmt: skip
            if first is None:
                first = time.perf_counter() - started
            count += len(batch["id"])
        epoch = time.perf_counter() - started
        df = spark.read.parquet(data)
        started = time.perf_counter()
        df.write.parquet(os.path.join(scratch, "petastorm-cache"))
        materialize = time.perf_counter() - started
        started = time.perf_counter()
        make_spark_converter(df, parent_cache_dir_url="file://" + os.path.join(scratch, "conv"))
        converter = time.perf_counter() - started
    finally:
        spark.stop()
    return {
        "session_s": session,
        "topandas_first_batch_s": first,
        "topandas_epoch_s": epoch,
        "topandas_rows_per_s": rows / epoch,
        "topandas_checks_passed": count == rows,
        "petastorm_materialize_s": materialize,
        "make_spark_converter_s": converter,
    }


def child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", *args],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_child(argv: list[str]) -> None:
    what, data, rows = argv[0], argv[1], int(argv[2])
    if what == "resume":
        result = measure_resume(data, argv[3], rows, argv[4])
    elif what == "spark":
        result = measure_spark(data, rows, argv[3])
    else:
        result = measure_stream(data, what, rows)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--no-spark", action="store_true", help="leave the Spark routes out")
    parser.add_argument("--out", default=str(HERE / "results" / "delta.json"))
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        run_child(args.measure)
        return
    rows = args.rows or (20_000 if args.quick else 200_000)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "rows": rows,
        "batch_size": BATCH,
        "machine": machine(),
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="shardstream-delta-bench-") as tmp:
        datasets = build(Path(tmp), rows)
        for kind, folder in datasets.items():
            result = child(kind, folder, str(rows))
            state_file = os.path.join(tmp, f"{kind}-state.json")
            Path(state_file).write_text(json.dumps({"state": result.pop("state"),
                                                    "half": result.pop("half")}))  # fmt: skip
            result.update(child("resume", folder, str(rows), kind, state_file))
            report["results"][kind] = result
            print(
                f"  {kind:<8} first batch {result['first_batch_s']:.3f} s, "
                f"{result['rows_per_s']:>10,.0f} rows/s, resume first batch "
                f"{result['resume_first_batch_s']:.3f} s"
            )
        if not args.no_spark:
            spark = child("spark", datasets["parquet"], str(rows), os.path.join(tmp, "spark"))
            report["results"]["spark"] = spark
            print(
                f"  spark    session {spark['session_s']:.1f} s (not counted); toPandas first "
                f"batch {spark['topandas_first_batch_s']:.2f} s, "
                f"{spark['topandas_rows_per_s']:,.0f} rows/s; Petastorm-style materialization "
                f"{spark['petastorm_materialize_s']:.2f} s; make_spark_converter "
                f"{spark['make_spark_converter_s']:.2f} s"
            )
    checks = [
        value
        for result in report["results"].values()
        for key, value in result.items()
        if key.endswith("checks_passed")
    ]
    report["checks_passed"] = all(checks)
    report["seconds"] = time.perf_counter() - started
    write_report(report, args.out)


if __name__ == "__main__":
    main()
