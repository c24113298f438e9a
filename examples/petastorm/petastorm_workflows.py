"""Petastorm's Spark converter workflows, run on shardstream with only the imports changed.

A Spark DataFrame of features (an ML Vector) and a label is converted once, then:

* ``keras``: single-node TensorFlow training, ``converter.make_tf_dataset()`` into ``model.fit``;
* ``torch``: single-node PyTorch training, ``converter.make_torch_dataloader()``;
* ``hyperopt``: distributed hyperparameter tuning with Hyperopt's ``SparkTrials``, each trial
  reading the converter inside a Spark task (on Spark Connect, which ``SparkTrials`` cannot
  use, Hyperopt's ``Trials`` with each trial sent to a Spark task by ``mapInPandas``);
* ``distributor``: distributed data-parallel training with Spark's ``TorchDistributor``, each
  rank reading its shard (``cur_shard``/``shard_count``);
* ``batch-reader``: no conversion: the DataFrame written as Parquet by Spark, then read with
  ``make_batch_reader`` into a torch ``DataLoader`` for training.

Run one with ``python examples/petastorm/petastorm_workflows.py torch`` (a local Spark on
127.0.0.1; ``--cache`` is the converter's parent cache folder). ``--remote sc://HOST:PORT``
runs ``keras``, ``torch`` and ``hyperopt`` on a Spark Connect server instead, as Databricks'
serverless compute and shared clusters do. ``--report FILE`` writes what each workflow
measured and saw, as JSON (the tests read it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

import numpy as np

# before: from petastorm.spark import SparkDatasetConverter, make_spark_converter
from shardstream.loader import SparkDatasetConverter, make_spark_converter

FEATURES = 8
logger = logging.getLogger("petastorm_workflows")


def spark_session(remote: str = "") -> Any:
    """A local SparkSession bound to 127.0.0.1 (or the active one, on a cluster).

    With ``remote`` (an ``sc://`` URL), a Spark Connect session on that server.
    """
    from pyspark.sql import SparkSession

    if remote:
        return SparkSession.builder.remote(remote).getOrCreate()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("shardstream-petastorm-workflows")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def make_dataframe(spark: Any, rows: int) -> Any:
    """``id``, ``features`` (an ML Vector) and ``label`` = a fixed linear rule of the features."""
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    df = spark.range(rows).repartition(4)
    names = [f"f{i}" for i in range(FEATURES)]
    for i, name in enumerate(names):
        df = df.withColumn(name, F.rand(seed=i) * 2 - 1)
    rule = F.lit(0.0)
    for i, name in enumerate(names):
        rule = rule + F.col(name) * (1 if i % 2 else -1)
    df = df.withColumn("label", (rule > 0).cast("long"))
    return (
        VectorAssembler(inputCols=names, outputCol="features")
        .transform(df)
        .select("id", "features", "label")
    )


def train_torch(
    converter: SparkDatasetConverter, lr: float, epochs: int, **kwargs: Any
) -> dict[str, Any]:
    """Logistic regression on the converter's torch loader; its last loss and the ids it read."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    ids: list[int] = []
    loss = float("nan")
    with converter.make_torch_dataloader(batch_size=32, num_epochs=epochs, **kwargs) as loader:
        for batch in loader:
            loss = train_step(model, optimizer, batch)
            ids += batch["id"].tolist()
    return {"loss": loss, "ids": ids}


def train_step(model: Any, optimizer: Any, batch: dict[str, Any]) -> float:
    """One step of logistic regression on a batch of ``features`` and ``label``; its loss."""
    import torch

    optimizer.zero_grad()
    logits = model(batch["features"]).squeeze(1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["label"].float())
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return float(loss)


def keras(converter: SparkDatasetConverter, args: argparse.Namespace) -> dict[str, Any]:
    """Petastorm's TF idiom: ``dataset.map(lambda x: (x.features, x.label))`` into ``fit``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.random.set_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(1)])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.5),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    steps = len(converter) // 32
    with converter.make_tf_dataset(batch_size=32) as dataset:
        pairs = dataset.map(lambda x: (x.features, x.label))
        history = model.fit(pairs, steps_per_epoch=steps, epochs=args.epochs, shuffle=False,
                            verbose=0)  # fmt: skip
    losses = [float(v) for v in history.history["loss"]]
    return {"losses": losses, "accuracy": float(history.history["accuracy"][-1])}


def torch_single(converter: SparkDatasetConverter, args: argparse.Namespace) -> dict[str, Any]:
    """Single-node PyTorch training, two worker processes reading the copy."""
    first = train_torch(converter, 0.5, 1, workers_count=2)
    result = train_torch(converter, 0.5, args.epochs, workers_count=2)
    return {"first_epoch_loss": first["loss"], "loss": result["loss"], "ids": result["ids"]}


def hyperopt(converter: SparkDatasetConverter, args: argparse.Namespace) -> dict[str, Any]:
    """Hyperopt's SparkTrials: each trial trains on the converter inside a Spark task.

    On Spark Connect, which ``SparkTrials`` cannot use (it needs a ``SparkContext``), each
    trial of Hyperopt's ``Trials`` runs in a Spark task of its own through ``mapInPandas``.
    """
    from hyperopt import STATUS_OK, SparkTrials, Trials

    driver = os.getpid()

    def objective(lr: float) -> dict[str, Any]:
        result = train_torch(converter, lr, 1, workers_count=0)
        return {"loss": result["loss"], "status": STATUS_OK, "pid": os.getpid(),
                "rows": len(result["ids"]), "distinct": len(set(result["ids"]))}  # fmt: skip

    if args.remote:
        spark = spark_session(args.remote)
        trials: Any = Trials()
        return tune(lambda lr: in_spark_task(spark, objective, lr), trials, args, driver)
    return tune(objective, SparkTrials(parallelism=2), args, driver)


def in_spark_task(spark: Any, function: Any, argument: Any) -> Any:
    """``function(argument)``, run in a Spark task (one partition, one row); its JSON result."""

    def task(batches: Any) -> Any:
        import pandas as pd

        for _ in batches:
            pass
        yield pd.DataFrame({"result": [json.dumps(function(argument))]})

    rows = spark.range(1, numPartitions=1).mapInPandas(task, "result string").collect()
    return json.loads(rows[0]["result"])


def tune(objective: Any, trials: Any, args: argparse.Namespace, driver: int) -> dict[str, Any]:
    """Hyperopt's ``fmin`` over the learning rate with ``trials``; what each trial reported."""
    from hyperopt import fmin, hp, tpe

    best = fmin(objective, hp.loguniform("lr", np.log(0.01), np.log(1.0)), algo=tpe.suggest,
                max_evals=args.trials, trials=trials, rstate=np.random.default_rng(0),
                show_progressbar=False)  # fmt: skip
    results = [trial["result"] for trial in trials.trials]
    return {"best": best, "driver_pid": driver, "results": results}


def distributor(converter: SparkDatasetConverter, args: argparse.Namespace) -> dict[str, Any]:
    """TorchDistributor: DDP ranks, each reading its shard of the copy (gloo, CPU)."""
    from pyspark.ml.torch.distributor import TorchDistributor

    report = os.path.abspath(args.report + ".ranks") if args.report else ""
    TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(
        run_rank, converter, args.epochs, report
    )
    ranks = []
    if report:
        for rank in range(2):
            with open(f"{report}.{rank}") as file:
                ranks.append(json.load(file))
    return {"ranks": ranks}


def run_rank(converter: SparkDatasetConverter, epochs: int, report: str) -> None:
    """One DDP rank: its shard of every epoch, the same number of steps as every other rank."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        ids: list[int] = []
        steps, loss = 0, float("nan")
        # even_batches: every rank runs the same number of steps, so no rank waits for ever.
        with converter.make_torch_dataloader(batch_size=16, num_epochs=epochs, workers_count=0,
                                             cur_shard=rank, shard_count=world,
                                             even_batches=True) as loader:  # fmt: skip
            for batch in loader:
                loss = train_step(model, optimizer, batch)
                ids += batch["id"].tolist()
                steps += 1
        if report:
            with open(f"{report}.{rank}", "w") as file:
                json.dump({"rank": rank, "steps": steps, "ids": ids, "loss": loss}, file)
    finally:
        dist.destroy_process_group()


def batch_reader(args: argparse.Namespace) -> dict[str, Any]:
    """Parquet written by Spark, read with Petastorm's make_batch_reader, into training."""
    import torch

    # before: from petastorm import make_batch_reader; from petastorm.pytorch import DataLoader
    from shardstream.loader.petastorm import DataLoader, make_batch_reader

    folder = os.path.abspath(os.path.join(args.cache, "parquet"))
    # Petastorm's readers take arrays, not ML vectors: store the features as an array.
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    df = make_dataframe(spark_session(), args.rows)
    df.withColumn("features", vector_to_array(F.col("features"), "float32")).write.mode(
        "overwrite"
    ).parquet(folder)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids: list[int] = []
    losses = []
    with DataLoader(make_batch_reader("file://" + folder, num_epochs=args.epochs),
                    batch_size=32) as loader:  # fmt: skip
        for batch in loader:
            loss = train_step(model, optimizer, batch)
            ids += batch["id"].tolist()
            losses.append(loss)
    return {"ids": ids, "first_loss": float(np.mean(losses[:5])),
            "last_loss": float(np.mean(losses[-5:]))}  # fmt: skip


WORKFLOWS = {"keras": keras, "torch": torch_single, "hyperopt": hyperopt,
             "distributor": distributor}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("workflow", choices=[*sorted(WORKFLOWS), "batch-reader"])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=4, help="hyperopt: evaluations")
    parser.add_argument("--cache", default="demo-data/petastorm-cache")
    parser.add_argument("--report", default="", help="write what was measured here, as JSON")
    parser.add_argument("--remote", default="", help="a Spark Connect server's sc:// URL")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spark = spark_session(args.remote)
    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF,
                   "file://" + os.path.abspath(args.cache))  # fmt: skip
    if args.workflow == "batch-reader":  # no conversion: Parquet read as Spark wrote it
        started = time.perf_counter()
        result = batch_reader(args)
        report(args, {"rows": args.rows, "seconds": time.perf_counter() - started, **result})
        return
    df = make_dataframe(spark, args.rows)
    started = time.perf_counter()
    converter = make_spark_converter(df)
    convert_seconds = time.perf_counter() - started
    logger.info("converted %d rows in %.1f s: %s", len(converter), convert_seconds,
                converter.cache_dir_url)  # fmt: skip
    started = time.perf_counter()
    result = WORKFLOWS[args.workflow](converter, args)
    seconds = time.perf_counter() - started
    logger.info("%s: done in %.1f s", args.workflow, seconds)
    report(args, {"rows": len(converter), "convert_seconds": convert_seconds,
                  "seconds": seconds, **result})  # fmt: skip


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Write ``result`` to ``--report``, if given."""
    if args.report:
        with open(args.report, "w") as file:
            json.dump(result, file)


if __name__ == "__main__":
    main()
