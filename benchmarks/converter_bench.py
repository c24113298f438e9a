"""Petastorm's workflow on shardstream: conversion time and rows/s through each loader.

Usage::

    .venv/bin/python benchmarks/converter_bench.py [--rows 200000] [--out converter.json]

A Spark DataFrame read from Parquet (an ``id``, a 32-float ML Vector ``features`` and a
``label``) goes through ``make_spark_converter`` and is then read for one epoch by
``make_torch_dataloader`` (0 and 2 workers) and ``make_tf_dataset``, every row checked once.
Beside it, the code a Petastorm user would otherwise write: ``df.toPandas()`` and a torch
``DataLoader`` over the stacked arrays, timed from the same DataFrame. Petastorm itself does
not import beside Spark 4's pyarrow, so it is not measured. Each figure is the best of
``--repeats`` epochs; the conversion is timed once (a second call reuses the copy, also timed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

FEATURES = 32
BATCH = 256


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("converter-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def source(spark: Any, rows: int, folder: str) -> Any:
    """The DataFrame, written to Parquet and read back, as a Petastorm user's would be."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=4).select(
        "id",
        array_to_vector(F.array(*[F.rand(seed=i) for i in range(FEATURES)])).alias("features"),
        (F.col("id") % 10).alias("label"),
    )
    df.write.parquet(folder)
    return spark.read.parquet(folder)


def check(ids: list[np.ndarray[Any, Any]], rows: int) -> None:
    seen = np.sort(np.concatenate(ids))
    if not np.array_equal(seen, np.arange(rows)):
        raise SystemExit(f"an epoch did not hold every row once ({len(seen)} ids)")


def best(epoch: Any, repeats: int) -> float:
    return float(min(epoch() for _ in range(repeats)))


def torch_epoch(converter: Any, rows: int, workers: int) -> float:
    started = time.perf_counter()
    with converter.make_torch_dataloader(batch_size=BATCH, num_epochs=1,
                                         workers_count=workers) as loader:  # fmt: skip
        ids = [batch["id"].numpy() for batch in loader]
    seconds = time.perf_counter() - started
    check(ids, rows)
    return seconds


def tf_epoch(converter: Any, rows: int) -> float:
    started = time.perf_counter()
    with converter.make_tf_dataset(batch_size=BATCH, num_epochs=1) as dataset:
        ids = [batch.id.numpy() for batch in dataset]
    seconds = time.perf_counter() - started
    check(ids, rows)
    return seconds


def pandas_epoch(df: Any, rows: int) -> float:
    """The baseline: toPandas, stacked arrays, a torch DataLoader over them."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    started = time.perf_counter()
    frame = df.select("id", "features", "label").toPandas()
    features = torch.from_numpy(np.stack([v.toArray() for v in frame["features"]]).astype("f4"))
    dataset = TensorDataset(torch.from_numpy(frame["id"].to_numpy()), features,
                            torch.from_numpy(frame["label"].to_numpy()))  # fmt: skip
    ids = [batch[0].numpy() for batch in DataLoader(dataset, batch_size=BATCH, shuffle=False)]
    seconds = time.perf_counter() - started
    check(ids, rows)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow  # noqa: F401 (imported before any timing: it takes seconds)

    from shardstream.loader import make_spark_converter

    work = tempfile.mkdtemp(prefix="converter-bench-")
    try:
        spark = spark_session()
        df = source(spark, args.rows, os.path.join(work, "parquet"))
        cache = os.path.join(work, "cache")
        started = time.perf_counter()
        converter = make_spark_converter(df, parent_cache_dir_url=cache)
        convert = time.perf_counter() - started
        started = time.perf_counter()
        make_spark_converter(df, parent_cache_dir_url=cache)
        reuse = time.perf_counter() - started
        seconds = {
            "torch_workers_0": best(lambda: torch_epoch(converter, args.rows, 0), args.repeats),
            "torch_workers_2": best(lambda: torch_epoch(converter, args.rows, 2), args.repeats),
            "tf": best(lambda: tf_epoch(converter, args.rows), args.repeats),
            "topandas_torch": best(lambda: pandas_epoch(df, args.rows), args.repeats),
        }
        result = {
            "rows": args.rows,
            "features": FEATURES,
            "batch_size": BATCH,
            "convert_seconds": convert,
            "reuse_seconds": reuse,
            "epoch_seconds": seconds,
            "rows_per_s": {name: args.rows / value for name, value in seconds.items()},
        }
        text = json.dumps(result, indent=2)
        if args.out:
            with open(args.out, "w") as file:
                file.write(text)
        sys.stdout.write(text + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
