"""One library's half of the Spark -> MDS benchmark (run by ``spark_bench.py``, once per venv).

Run with the Python of the venv that holds the library under test (and pyspark)::

    .venv/bin/python benchmarks/spark_worker.py --lib shardstream --workloads '[...]' ...
    .venv-ref/bin/python benchmarks/spark_worker.py --lib streaming --workloads '[...]' ...

Steps, each reported on its own:

1. import the library (``import_seconds``, never counted);
2. start a local SparkSession, ``local[2]`` on 127.0.0.1 (``session_seconds``, never counted);
3. build the DataFrame: ``spark.range`` in ``partitions`` partitions, its columns generated
   from ``numpy.random.default_rng`` seeded by each batch's first id (so both venvs build the
   same rows), persisted to Spark's disk store and counted (``prepare_seconds``, not counted);
   a digest of every row (``bit_xor`` of ``xxhash64`` over all columns) lets the driver check
   both libraries saw the very same data;
4. warm up: one untimed conversion of a small DataFrame of the same schema, so the Python
   workers have started and imported the library before timing;
5. time a ``mapInArrow`` that only counts the batches of the DataFrame, twice (the first pass
   warms the JVM's path over the persisted data; the second is ``spark_floor_seconds``): what
   Spark itself spends reading the data and handing it to Python, which no converter can go
   below;
6. time ``dataframe_to_mds(df, merge_index=True, mds_kwargs={out, columns, compression})``
   ``--repeats`` times per compression, each into a fresh folder (``os.sync()`` before each,
   untimed). The last folder of each compression is kept for the driver to check.

Several workloads (``--workloads``, JSON) run in one session, one after the other.

The result is one JSON object written to ``--result``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

_import_started = time.perf_counter()
import numpy as np  # noqa: E402 - the import is timed
import pyarrow as pa  # noqa: E402

_imports_done = time.perf_counter()

#: workload -> Spark DDL schema and MDS columns (the same for both libraries).
SCHEMAS: dict[str, tuple[str, dict[str, str]]] = {
    "tabular": (
        "id long, x float, text string, blob binary, vec array<float>",
        {"id": "int64", "x": "float32", "text": "str", "blob": "bytes", "vec": "ndarray:float32"},
    ),
    "image": (
        "id long, label int, image binary",
        {"id": "int64", "label": "int32", "image": "bytes"},
    ),
}
VECTOR = 16
TEXT_CHARS = 100
WORDS = 2000


def vocabulary(seed: int) -> list[str]:
    """``WORDS`` lowercase words of 2 to 9 letters (text that compresses like text)."""
    rng = np.random.default_rng([seed, 1])
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
    weights = np.linspace(2.0, 0.1, len(letters))
    weights /= weights.sum()
    lengths = rng.integers(2, 10, WORDS)
    return [bytes(rng.choice(letters, n, p=weights)).decode("ascii") for n in lengths]


def binary_array(payloads: bytes, lengths: np.ndarray[Any, Any]) -> Any:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(payloads)]
    )


class Generator:
    """``mapInArrow`` function: ids in, the workload's columns out (deterministic per batch)."""

    def __init__(self, workload: str, seed: int, size: int, jitter: int) -> None:
        self.workload, self.seed, self.size, self.jitter = workload, seed, size, jitter

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        """One batch of the workload's columns per batch of ids."""
        words = np.array(vocabulary(self.seed), dtype=object)
        for batch in batches:
            ids = batch.column(0).to_numpy()
            count = len(ids)
            if count == 0:
                continue
            rng = np.random.default_rng([self.seed, int(ids[0]), count])
            lengths = (
                rng.integers(self.size - self.jitter, self.size + self.jitter + 1, count)
                if self.jitter
                else np.full(count, self.size, dtype=np.int64)
            )
            payload = binary_array(rng.bytes(int(lengths.sum())), lengths)
            if self.workload == "image":
                labels = rng.integers(0, 1000, count, dtype=np.int32)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(ids), pa.array(labels), payload], names=["id", "label", "image"]
                )
                continue
            x = rng.random(count, dtype=np.float32)
            chosen = words[rng.integers(0, WORDS, (count, TEXT_CHARS // 3))]
            text = [" ".join(row)[:TEXT_CHARS] for row in chosen]
            values = pa.array(rng.standard_normal(count * VECTOR, dtype=np.float32))
            offsets = pa.array(np.arange(0, (count + 1) * VECTOR, VECTOR, dtype=np.int32))
            vec = pa.ListArray.from_arrays(offsets, values, type=pa.list_(pa.float32()))
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids), pa.array(x), pa.array(text, pa.string()), payload, vec],
                names=["id", "x", "text", "blob", "vec"],
            )


def import_library(lib: str) -> tuple[Any, str]:
    """``(dataframe_to_mds, version)`` of the library under test."""
    if lib == "shardstream":
        import shardstream
        from shardstream.converters import dataframe_to_mds

        return dataframe_to_mds, shardstream.__version__
    if lib == "streaming":
        # Imported by name: mosaicml-streaming lives only in the reference venv.
        streaming = importlib.import_module("streaming")
        converters = importlib.import_module("streaming.base.converters")
        return converters.dataframe_to_mds, streaming.__version__
    raise SystemExit(f"--lib must be shardstream or streaming, not {lib!r}")


def start_session(scratch: str, lib: str) -> Any:
    """A local[2] SparkSession bound to 127.0.0.1, its Python workers this interpreter's."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName(f"spark-bench-{lib}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", scratch)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def build(
    spark: Any, workload: str, rows: int, partitions: int, seed: int, size: int, jitter: int
) -> Any:
    schema = SCHEMAS[workload][0]
    generator = Generator(workload, seed, size, jitter)
    return spark.range(0, rows, numPartitions=partitions).mapInArrow(generator, schema)


def digest(dataframe: Any) -> dict[str, Any]:
    """Row count and ``bit_xor(xxhash64(all columns))``: equal only for equal data."""
    from pyspark.sql import functions as F

    row = dataframe.select(
        F.count(F.lit(1)).alias("rows"),
        F.bit_xor(F.xxhash64(*dataframe.columns)).alias("xor"),
    ).collect()[0]
    return {"rows": int(row["rows"]), "xor": int(row["xor"])}


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and its descendants (the JVM, Python workers).

    Read from ``/proc`` (Linux): user + system time of every live process of the tree, plus
    what each has collected from children it reaped. Under load, CPU time moves far less than
    wall time, so its ratio backs the wall-time one. NaN where ``/proc`` is missing.
    """
    if not os.path.isdir("/proc/self"):
        return float("nan")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process is gone
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(value) for value in fields[11:15])  # utime stime cu cs
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(times.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def folder_stats(folder: str) -> dict[str, Any]:
    total = shards = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            total += os.path.getsize(os.path.join(parent, name))
            shards += name.endswith((".mds", ".mds.zstd"))
    return {"bytes": total, "shard_files": shards}


def convert(convert_fn: Any, dataframe: Any, out: str, columns: dict[str, str], comp: Any) -> None:
    convert_fn(
        dataframe,
        merge_index=True,
        mds_kwargs={"out": out, "columns": dict(columns), "compression": comp},
    )


def floor(dataframe: Any) -> tuple[float, float]:
    """Wall and CPU seconds of a ``mapInArrow`` that only counts its batches: Spark's share."""

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        rows = sum(batch.num_rows for batch in batches)
        yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})

    cpu_started = tree_cpu_seconds()
    started = time.perf_counter()
    total = sum(row["rows"] for row in dataframe.mapInArrow(count, "rows long").collect())
    elapsed = time.perf_counter() - started
    cpu = tree_cpu_seconds() - cpu_started
    assert total == dataframe.count()
    return elapsed, cpu


def run_workload(
    spark: Any, convert_fn: Any, lib: str, spec: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """Build, persist and digest one workload's DataFrame, then time each compression."""
    from pyspark import StorageLevel

    name = spec["name"]
    params = (args.seed, spec["size"], spec["jitter"])
    columns = SCHEMAS[spec["workload"]][1]
    started = time.perf_counter()
    dataframe = build(spark, spec["workload"], spec["rows"], spec["partitions"], *params)
    dataframe = dataframe.persist(StorageLevel.DISK_ONLY)
    data_digest = digest(dataframe)  # also materializes the persisted data
    prepare_seconds = time.perf_counter() - started
    if data_digest["rows"] != spec["rows"]:
        raise SystemExit(f"built {data_digest['rows']} rows, expected {spec['rows']}")

    # Untimed warm-up: the Python workers start and import the library inside them.
    started = time.perf_counter()
    warm = build(spark, spec["workload"], 64, 2, *params)
    warm_out = os.path.join(args.tmp, f"{lib}-{name}-warmup")
    convert(convert_fn, warm, warm_out, columns, None)
    shutil.rmtree(warm_out)
    warmup_seconds = time.perf_counter() - started

    # Spark alone, twice: the first pass also warms the JVM's path over the persisted data.
    floor_seconds = [floor(dataframe) for _ in range(2)]

    runs: dict[str, Any] = {}
    for compression in spec["compressions"]:
        codec = None if compression == "none" else compression
        times: list[float] = []
        cpus: list[float] = []
        loads: list[float] = []
        folder = ""
        for repeat in range(args.repeats):
            if folder:
                shutil.rmtree(folder)
            folder = os.path.join(args.tmp, f"{lib}-{name}-{compression}-{repeat}")
            if hasattr(os, "sync"):
                os.sync()  # flush earlier writes so their writeback does not slow this run
            load = os.getloadavg()[0]
            cpu_started = tree_cpu_seconds()
            started = time.perf_counter()
            convert(convert_fn, dataframe, folder, columns, codec)
            times.append(time.perf_counter() - started)
            cpus.append(tree_cpu_seconds() - cpu_started)
            loads.append(load)
            print(
                f"  {lib} {name} {compression}: {times[-1]:.2f} s, CPU {cpus[-1]:.2f} s "
                f"(load {load:.2f})",
                flush=True,
            )
        runs[compression] = {
            "seconds": {"all": times, "best": min(times), "median": statistics.median(times)},
            "cpu_seconds": {"all": cpus, "best": min(cpus), "median": statistics.median(cpus)},
            "load_average_1min": loads,
            "folder": folder,
            **folder_stats(folder),
        }
    dataframe.unpersist()
    return {
        "prepare_seconds": prepare_seconds,
        "warmup_seconds": warmup_seconds,
        "spark_floor_seconds": floor_seconds[-1][0],
        "spark_floor_cpu_seconds": floor_seconds[-1][1],
        "spark_floor_first_seconds": floor_seconds[0][0],
        "data_digest": data_digest,
        "columns": columns,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, choices=["shardstream", "streaming"])
    parser.add_argument(
        "--workloads",
        required=True,
        help="JSON list of {name, workload, rows, partitions, size, jitter, compressions}",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--tmp", required=True, help="an existing folder for the outputs")
    parser.add_argument("--result", required=True, help="where the JSON result goes")
    args = parser.parse_args()
    specs: list[dict[str, Any]] = json.loads(args.workloads)

    started = time.perf_counter()
    convert_fn, version = import_library(args.lib)
    import_seconds = time.perf_counter() - started

    scratch = os.path.join(args.tmp, f"spark-local-{args.lib}")
    os.makedirs(scratch, exist_ok=True)
    started = time.perf_counter()
    spark = start_session(scratch, args.lib)
    session_seconds = time.perf_counter() - started
    try:
        workloads = {
            spec["name"]: run_workload(spark, convert_fn, args.lib, spec, args) for spec in specs
        }
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "lib": args.lib,
        "version": version,
        "module": getattr(sys.modules.get(args.lib), "__file__", None),
        "pyspark": importlib.import_module("pyspark").__version__,
        "pyarrow": pa.__version__,
        "pandas": importlib.import_module("pandas").__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "import_seconds": import_seconds,
        "numpy_pyarrow_import_seconds": _imports_done - _import_started,
        "session_seconds": session_seconds,
        "workloads": workloads,
    }
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
