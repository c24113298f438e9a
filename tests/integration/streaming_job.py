"""A training job's data side, run by torchrun in the distributed streaming tests.

Each rank streams from the S3 URL into a cache folder shared by the ranks of its "node"
(``GROUP_RANK``), through a StreamingDataLoader, and writes the ids of every batch it got to
``<out>/rank<RANK>.json``. Options stop it after some steps (rank 0 saves the loader's state),
resume from a saved state, or kill -9 one DataLoader worker mid-epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream._torch import worker_info


class KillingDataset(StreamingDataset):
    """Kills DataLoader worker 1 with SIGKILL after it yielded ``kill_after`` samples."""

    kill_after = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = worker_info()
        for count, sample in enumerate(super().__iter__()):
            if self.kill_after and info is not None and info[0] == 1 and count == self.kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            yield sample


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--stop-after", type=int, default=0)
    parser.add_argument("--resume", default="")
    parser.add_argument("--kill-after", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    node = int(os.environ["GROUP_RANK"])
    dataset = KillingDataset(
        remote=args.remote, local=os.path.join(args.cache, f"node{node}"),
        batch_size=args.batch_size, shuffle=True, num_canonical_nodes=2, shuffle_seed=17,
    )  # fmt: skip
    dataset.kill_after = args.kill_after
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    if args.resume:
        with open(args.resume) as handle:
            loader.load_state_dict(json.load(handle))
    batches: list[list[int]] = []
    for batch in loader:
        batches.append([int(i) for i in batch["id"]])
        if args.stop_after and len(batches) == args.stop_after:
            if rank == 0:
                with open(os.path.join(args.out, "state.json"), "w") as handle:
                    json.dump(loader.state_dict(), handle)
            break
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as handle:
        json.dump(batches, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
