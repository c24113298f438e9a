r"""Flowers on several processes: the same training with DDP (gloo), by torchrun or Spark.

Every rank streams its share of the same shards (``--remote``, written by ``flowers_demo.py``;
e.g. ``s3://bucket/flowers``) into its node's cache, and DDP averages the gradients.

torchrun, here two simulated nodes of two ranks each on one machine::

    for node in 0 1; do
        torchrun --nnodes=2 --nproc_per_node=2 --node_rank=$node --master_addr=127.0.0.1 \
            --master_port=29511 examples/flowers/flowers_ddp.py --remote s3://bucket/flowers &
    done; wait

TorchDistributor (Spark's launcher; ``local_mode`` runs the ranks beside the driver, on a
cluster drop ``--local-mode`` to run them on the executors)::

    python examples/flowers/flowers_ddp.py --torch-distributor 2 --local-mode --remote ...

On a cluster, the ranks must be able to import ``flowers_train`` (install this folder's
modules on the executors, or put ``run_rank``'s code in a notebook cell), and they need the
store's credentials in their environment: for ``dbfs:/Volumes/...`` URLs ``DATABRICKS_HOST``
and ``DATABRICKS_TOKEN``, which a notebook's own login does not pass on.

``--stop-after STEPS --checkpoint PATH`` stops mid-epoch as if the job died, having saved the
model, the optimizer and the loader's place; ``--resume PATH`` goes on from there and reads
exactly the samples the uninterrupted run would have read.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from typing import Any

import torch.distributed as dist
from flowers_data import log_progress
from flowers_train import TrainConfig, train


def run_rank(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One rank's job (torchrun or TorchDistributor started it): train, return its figures."""
    log_progress()
    dist.init_process_group("gloo")
    try:
        # Ranks of a node share its cache; GROUP_RANK is the node's number (set by torchrun).
        node = os.environ.get("GROUP_RANK", "0")
        cache = os.path.join(settings["cache"], f"node{node}")
        config = TrainConfig(**{**settings, "cache": cache})
        results = train(config)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return [{key: value for key, value in asdict(r).items() if key != "ids"} for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remote", required=True, help="the shards (train/ and validation/)")
    parser.add_argument("--cache", default="demo-data/flowers/ddp-cache")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank and step")
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank")
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--resume", default="")
    parser.add_argument("--stop-after", type=int, default=0, help="steps, then stop")
    parser.add_argument("--report", default="", help="folder for each rank's sample ids")
    parser.add_argument("--torch-distributor", type=int, default=0, metavar="PROCESSES",
                        help="launch PROCESSES ranks with Spark's TorchDistributor")  # fmt: skip
    parser.add_argument("--local-mode", action="store_true", help="TorchDistributor local mode")
    args = parser.parse_args()
    settings = {
        "remote": args.remote, "cache": os.path.abspath(args.cache), "epochs": args.epochs,
        "batch_size": args.batch_size, "workers": args.workers, "checkpoint": args.checkpoint,
        "resume": args.resume, "stop_after": args.stop_after, "report": args.report,
    }  # fmt: skip
    if not args.torch_distributor:
        run_rank(settings)  # started by torchrun: this process is one rank
        return

    from flowers_data import spark_session
    from pyspark.ml.torch.distributor import TorchDistributor

    log_progress()
    # The ranks unpickle run_rank, which imports this folder's modules: put it on their path.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    spark = spark_session()
    distributor = TorchDistributor(
        num_processes=args.torch_distributor, local_mode=args.local_mode, use_gpu=False
    )
    results = distributor.run(run_rank, settings)
    spark.stop()
    for result in results or []:
        print(
            f"epoch {result['epoch'] + 1}: loss {result['loss']:.3f}, {result['samples']} "
            f"samples over {args.torch_distributor} ranks in {result['seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
