"""Flowers, end to end on one node: images -> Spark -> MDS shards -> a CNN trained from them.

1. Draw a small flowers-like image set (five classes in sub-folders).
2. Load it with Spark's ``binaryFile`` source, label each image by its folder, resize it in a
   UDF, and write ``train`` and ``validation`` shards with ``dataframe_to_mds`` to ``--out``:
   a local folder standing in for a Unity Catalog volume, or any URL (``s3://bucket/flowers``,
   ``gs://...``, ``azure://...``, ``dbfs:/Volumes/catalog/schema/volume/flowers``).
3. Stream the shards into a small MobileNet-style CNN (StreamingDataset, StreamingDataLoader)
   and print loss, validation accuracy and the loader's throughput per epoch.

Run with ``scripts/demo`` (sets up the venv first) or ``python examples/flowers/flowers_demo.py``.
The same training on several processes: ``flowers_ddp.py`` (torchrun or TorchDistributor).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from flowers_data import CLASSES, convert_with_spark, log_progress, make_images, spark_session
from flowers_train import EpochResult, TrainConfig, train

DEFAULT_OUT = "demo-data/flowers/Volumes/main/default/flowers"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the shards go (folder or URL)")
    parser.add_argument("--work", default="demo-data/flowers", help="images and the cache")
    parser.add_argument("--images", type=int, default=100, help="images to draw (9 in 10 train)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--master", default="local[2]", help="Spark master when none is active")
    parser.add_argument("--skip-convert", action="store_true", help="train on existing shards")
    parser.add_argument("--report", default="", help="write the figures as JSON here")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log lines (-v info, -vv debug)"
    )
    args = parser.parse_args()
    # One line per step by default; the example's and shardstream's log lines with -v.
    log_progress(logging.WARNING - 10 * min(args.verbose, 2))
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    started = time.perf_counter()
    out = args.out if "://" in args.out or args.out.startswith("dbfs:") else _absolute(args.out)
    work = Path(args.work).resolve()

    images = work / "images"
    written: dict[str, int] = {}
    convert_seconds = 0.0
    if not args.skip_convert:
        made = make_images(images, args.images)
        print(f"images:    {made} drawn into {images} ({len(CLASSES)} classes: "
              f"{', '.join(CLASSES)})")  # fmt: skip
        # Spark's JVM prints its start-up and log lines to a file of the work folder unless -v.
        spark = spark_session(args.master, None if args.verbose else work / "spark.log")
        convert_started = time.perf_counter()
        written = convert_with_spark(spark, str(images), out)
        convert_seconds = time.perf_counter() - convert_started
        spark.stop()
        print(f"shards:    {written['train']} train + {written['validation']} validation "
              f"samples written by Spark (binaryFile -> dataframe_to_mds) in "
              f"{convert_seconds:.1f} s")  # fmt: skip
        print(f"           to {out}/{{train,validation}}")

    config = TrainConfig(remote=out, cache=str(work / "cache"), epochs=args.epochs,
                         batch_size=args.batch_size, workers=args.workers)  # fmt: skip

    def said(result: EpochResult) -> None:  # each epoch as it ends
        print(
            f"epoch {result.epoch + 1}/{args.epochs}: loss {result.loss:.3f}, validation "
            f"accuracy {100 * result.accuracy:5.1f}%, loader {result.loader_throughput:,.0f} "
            f"samples/s, {result.samples} samples in {result.seconds:.1f} s", flush=True,
        )  # fmt: skip

    results = train(config, on_epoch=said)
    samples = sum(r.samples for r in results)
    data_seconds = sum(r.data_seconds for r in results)
    final = results[-1].accuracy if results else float("nan")
    total = time.perf_counter() - started
    print(f"data:      {out} (cache: {config.cache})")
    print(f"loader:    {samples / max(data_seconds, 1e-9):,.0f} samples/s over {samples} "
          f"samples ({data_seconds:.2f} s waiting for batches)")  # fmt: skip
    print(f"accuracy:  {100 * final:.1f}% on validation after {len(results)} epochs "
          f"(chance: {100 / len(CLASSES):.0f}%); total {total:.1f} s")  # fmt: skip
    if args.report:
        report = {
            "out": out, "written": written, "convert_seconds": convert_seconds,
            "total_seconds": total, "epochs": [asdict(r) for r in results],
        }  # fmt: skip
        Path(args.report).write_text(json.dumps(report))


def _absolute(path: str) -> str:
    return str(Path(path).resolve())


if __name__ == "__main__":
    main()
