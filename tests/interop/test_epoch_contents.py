"""What an epoch holds, against mosaicml-streaming 0.13: samples, repeats, len(), batches.

The reference runs in its own venv (``ref_epoch.py``); every expectation here is a comparison
with what it answered. On one device both yield every sample once and a short last batch. On
several ranks both give every rank as many samples; shardstream repeats only as many as that
takes, the reference as many or more (it also evens out the canonical nodes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from shardstream import MDSWriter, StreamingDataset
from shardstream.sampling import EpochPlan, ShuffleConfig, Topology
from tests.interop.conftest import reference_python

pytestmark = pytest.mark.interop

SIZES = (117, 61, 5)
BATCH = 4

# Real runs through torch's DataLoader: one rank, or several started together.
RUNS: list[dict[str, Any]] = [
    {"samples": 117},
    {"samples": 117, "workers": 2, "drop_last": True},
    {"samples": 61, "workers": 2},
    {"samples": 5, "drop_last": True},
    {"samples": 117, "epoch_size": 50, "ncn": 8},
    {"samples": 117, "epoch_size": 300, "ncn": 8, "ranks": 2},
    {"samples": 117, "ranks": 2},
    {"samples": 117, "ranks": 2, "ncn": 4},
    {"samples": 117, "ranks": 4, "workers": 2},
    {"samples": 61, "ranks": 4, "drop_last": True},
]

# The partition alone: (samples, nodes, ranks per node, workers per rank, batch, NCN).
KEYS = ("samples", "nodes", "per_node", "workers", "batch", "ncn")
PARTITIONS = [
    (samples, *shape)
    for samples in (1, 3, 5, 17, 61, 117, 1000)
    for shape in [
        (1, 1, 1, 4, 1), (1, 1, 2, 4, 1), (1, 2, 1, 4, 1), (1, 4, 1, 4, 1), (2, 2, 1, 4, 2),
        (2, 2, 2, 4, 2), (2, 1, 1, 4, 4), (2, 4, 2, 3, 2), (1, 1, 1, 4, 8), (2, 2, 1, 4, 8),
        (1, 8, 1, 4, 1), (4, 2, 1, 2, 2), (1, 3, 1, 4, 1),
    ]
]  # fmt: skip


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Our datasets, and what the reference measured on copies of them."""
    base = tmp_path_factory.mktemp("epoch")
    for samples in SIZES:
        out = str(base / f"ours{samples}")
        with MDSWriter(out=out, columns={"id": "int"}, size_limit=300) as writer:
            for i in range(samples):
                writer.write({"id": i})
        shutil.copytree(base / f"ours{samples}", base / f"ref{samples}")
    runs = [{**run, "folder": str(base / f"ref{run['samples']}"), "batch": BATCH} for run in RUNS]
    job = {
        "runs": runs,
        "partitions": [dict(zip(KEYS, case, strict=True)) for case in PARTITIONS],
    }
    (base / "job.json").write_text(json.dumps(job))
    script = Path(__file__).with_name("ref_epoch.py")
    done = subprocess.run(
        [reference_python(), str(script), str(base / "job.json"), str(base / "answer.json")],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    if done.returncode:
        pytest.fail(f"the reference failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads((base / "answer.json").read_text())
    answer["base"] = base
    return answer


def our_run(base: Path, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The same run with shardstream: each rank's len(), len(loader) and batches."""
    ranks = run.get("ranks", 1)
    out = []
    for rank in range(ranks):
        dataset = StreamingDataset(
            local=str(base / f"ours{run['samples']}"), batch_size=BATCH,
            epoch_size=run.get("epoch_size"), num_canonical_nodes=run.get("ncn"), rank=rank,
            world_size=ranks, ranks_per_node=ranks,
        )  # fmt: skip
        loader = DataLoader(dataset, batch_size=BATCH, num_workers=run.get("workers", 0),
                            drop_last=run.get("drop_last", False))  # fmt: skip
        out.append({"len": len(dataset), "len_loader": len(loader),
                    "batches": [[int(i) for i in batch["id"]] for batch in loader]})  # fmt: skip
    return out


def sizes(rank: dict[str, Any]) -> list[int]:
    return [len(batch) for batch in rank["batches"]]


@pytest.mark.parametrize("index", range(len(RUNS)))
def test_a_real_epoch_holds_what_the_reference_s_does_or_fewer_repeats(
    answers: dict[str, Any], index: int
) -> None:
    run, theirs = RUNS[index], answers["runs"][index]
    ours = our_run(answers["base"], run)
    epoch = run.get("epoch_size") or run["samples"]
    # len(dataset) and len(loader) mean what they mean in the reference.
    assert [(r["len"], r["len_loader"]) for r in ours] == [
        (r["len"], r["len_loader"]) for r in theirs
    ]
    # Ours are exact: each rank yields len(loader) batches, only the last one maybe short.
    for rank in ours:
        assert len(rank["batches"]) == rank["len_loader"]
        assert all(size == BATCH for size in sizes(rank)[:-1])
    assert len({tuple(sizes(rank)) for rank in ours}) == 1  # every rank alike
    delivered = Counter(i for rank in ours for batch in rank["batches"] for i in batch)
    their_count = sum(len(batch) for rank in theirs for batch in rank["batches"])
    our_count = sum(delivered.values())
    assert our_count <= their_count
    their_sizes = [sizes(rank) for rank in theirs]
    if their_count == our_count:  # the reference repeated only to make the ranks equal too
        assert [sizes(rank) for rank in ours] == their_sizes
    else:
        assert all(len(mine) <= len(other) for mine, other in zip(
            [sizes(rank) for rank in ours], their_sizes, strict=True))  # fmt: skip
    if run.get("drop_last"):
        return
    ranks = run.get("ranks", 1)
    assert our_count == epoch + -epoch % ranks  # each sample once, then the fewest repeats
    if run.get("epoch_size") is None:
        assert set(delivered) == set(range(run["samples"]))


def our_partition(samples: int, nodes: int, per_node: int, workers: int, batch: int,
                  ncn: int) -> list[dict[str, int]]:  # fmt: skip
    """Per rank, as ``ref_epoch.py`` counts it: samples, batches, whole batches."""
    ranks = []
    for rank in range(nodes * per_node):
        counts = {"samples": 0, "batches": 0, "whole_batches": 0}
        for worker in range(workers):
            plan = EpochPlan.for_worker(
                np.array([samples]), topology=Topology(nodes, per_node, workers, rank, worker),
                num_canonical_nodes=ncn, global_batch_size=batch * nodes * per_node, epoch=0,
                shuffle=ShuffleConfig(),
            )  # fmt: skip
            counts["samples"] += len(plan.ids)
            counts["batches"] += len(plan.batches)
            counts["whole_batches"] += sum(len(b) == batch for b in plan.batches)
        ranks.append(counts)
    return ranks


@pytest.mark.parametrize("index", range(len(PARTITIONS)))
def test_the_partition_repeats_no_more_than_the_reference_s(
    answers: dict[str, Any], index: int
) -> None:
    samples = PARTITIONS[index][0]
    theirs = answers["partitions"][index]
    ours = our_partition(*PARTITIONS[index])
    assert len({tuple(rank.values()) for rank in ours}) == 1  # every rank alike
    our_repeats = sum(rank["samples"] for rank in ours) - samples
    assert 0 <= our_repeats <= theirs["delivered"] - samples
    for mine, other in zip(ours, theirs["ranks"], strict=True):
        assert mine["samples"] <= other["samples"]
        assert mine["batches"] <= other["batches"]
        assert mine["whole_batches"] <= other["whole_batches"]
        if theirs["delivered"] - samples == our_repeats:
            assert mine == other  # the same counts where the reference needs no more
