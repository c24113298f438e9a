"""What an epoch holds under mosaicml-streaming 0.13, measured in its own venv.

For each case of the job file: every rank's batches through torch's DataLoader (a real
``StreamingDataset``; the ranks of the cases of several ranks run at once, one process each, as
torchrun would start them, each process running those cases in turn), or only the partition's
counts (``get_partitions``, which the dataset iterates, ``-1`` skipped). Writes the answers as
JSON.

Usage: python ref_epoch.py JOB.json OUT.json
       python ref_epoch.py --rank CASES.json   (one rank of cases; prints its answers)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings
from typing import Any


def _rank(case: dict[str, Any]) -> dict[str, Any]:
    """This process's rank of a real run: len(dataset), len(loader), each batch's sample ids."""
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader

    dataset = StreamingDataset(
        local=case["folder"], batch_size=case["batch"], epoch_size=case.get("epoch_size"),
        num_canonical_nodes=case.get("ncn"),
    )  # fmt: skip
    loader = DataLoader(dataset, batch_size=case["batch"], num_workers=case.get("workers", 0),
                        drop_last=case.get("drop_last", False))  # fmt: skip
    length, loader_length = len(dataset), len(loader)
    batches = [[int(i) for i in batch["id"]] for batch in loader]
    return {"len": length, "len_loader": loader_length, "batches": batches}


def _runs(cases: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Every rank of each case: one rank here, more as processes started together."""
    answers: list[list[dict[str, Any]]] = [[] for _ in cases]
    worlds: dict[int, list[int]] = {}
    for index, case in enumerate(cases):
        worlds.setdefault(case.get("ranks", 1), []).append(index)
    for world, indices in sorted(worlds.items()):
        if world == 1:  # torch.distributed stays off: this process is the job
            for index in indices:
                answers[index] = [_rank(cases[index])]
            continue
        per_rank = _processes(world, [cases[index] for index in indices])
        for at, index in enumerate(indices):
            answers[index] = [rank[at] for rank in per_rank]
    return answers


def _processes(world: int, cases: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The ranks of a job of ``world`` ranks on one node, each reading ``cases`` in turn."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "PYTHONWARNINGS": "ignore"}  # fmt: skip
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank", json.dumps(cases)], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode:
            raise SystemExit(f"a reference rank failed:\n{err[-3000:]}")
        answers.append(json.loads(out.strip().splitlines()[-1]))
    return answers


def _partition(case: dict[str, Any]) -> dict[str, Any]:
    """Per rank: samples, and DataLoader batches with drop_last off and on (per worker)."""
    from streaming.base.partition import get_partitions

    batch = case["batch"]
    ids = get_partitions("relaxed", case["samples"], case["ncn"], case["nodes"],
                         case["per_node"], case["workers"], batch)  # fmt: skip
    ranks = []
    for node in ids:
        for rank in node:
            real = [int((worker >= 0).sum()) for worker in rank]
            ranks.append({
                "samples": sum(real),
                "batches": sum(-(-count // batch) for count in real),
                "whole_batches": sum(count // batch for count in real),
            })  # fmt: skip
    return {"ranks": ranks, "delivered": int((ids >= 0).sum())}


def main() -> None:
    warnings.simplefilter("ignore")
    if sys.argv[1] == "--rank":
        print(json.dumps([_rank(case) for case in json.loads(sys.argv[2])]))
        return
    with open(sys.argv[1]) as handle:
        job = json.load(handle)
    answer = {
        "runs": _runs(job["runs"]),
        "partitions": [_partition(case) for case in job["partitions"]],
    }
    with open(sys.argv[2], "w") as handle:
        json.dump(answer, handle)


if __name__ == "__main__":
    main()
