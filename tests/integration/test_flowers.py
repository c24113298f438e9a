"""The flowers example end to end, driven as a user runs it, with SeaweedFS as the S3 store.

One Spark run (images -> binaryFile -> dataframe_to_mds to ``s3://``) and single-node training
from the store; then the same shards trained with DDP by torchrun (2 nodes x 2 ranks, stopped
mid-epoch and resumed) and by TorchDistributor (2 processes, local mode).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.integration.conftest import S3Server
from tests.integration.flowers_run import (
    TRAIN_IDS,
    environment,
    rank_ids,
    run,
    torchrun,
)

from shardstream import StreamingDataset

pytestmark = [pytest.mark.s3, pytest.mark.slow]

EPOCHS = 5
GLOBAL_BATCH = 16  # 4 ranks x 4 (DDP), or 1 rank x 16 (one node)
PER_EPOCH = len(TRAIN_IDS)  # each sample once (several ranks: a repeat or two to be equal)
STEPS = -(-PER_EPOCH // GLOBAL_BATCH)  # global steps per epoch, the last one short


@pytest.fixture(scope="module")
def flowers(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``flowers_demo.py --out s3://...``: the shards on the store, one node trained from them."""
    work = tmp_path_factory.mktemp("flowers")
    url = s3_server.url("flowers")
    env = environment(s3_server)
    result = run("flowers_demo.py", "--out", url, "--work", str(work), "--epochs", str(EPOCHS),
                 "--report", str(work / "report.json"), env=env)  # fmt: skip
    report = json.loads((work / "report.json").read_text())
    return {"url": url, "env": env, "report": report, "stdout": result.stdout,
            "stderr": result.stderr}  # fmt: skip


def test_the_demo_says_one_line_per_step(flowers: dict[str, Any]):
    lines = flowers["stdout"].splitlines()
    steps = [line.split(":")[0].split()[0] for line in lines if not line.startswith(" ")]
    epochs = [f"epoch {n}/{EPOCHS}" for n in range(1, EPOCHS + 1)]
    assert [line.split(":")[0] for line in lines if line.startswith("epoch ")] == epochs
    assert steps == ["images", "shards", *["epoch"] * EPOCHS, "data", "loader", "accuracy"]
    # Without -v, no log line of the example or of shardstream (each epoch's included).
    said = flowers["stderr"].splitlines()
    assert not [line for line in said if line.startswith(("INFO", "DEBUG"))], said


def test_one_node_learns_and_reads_every_sample_once_per_epoch(flowers: dict[str, Any]):
    report = flowers["report"]
    assert report["written"] == {"train": 90, "validation": 10}
    epochs = report["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(EPOCHS))
    for epoch in epochs:
        counts = Counter(epoch["ids"])
        assert set(counts) == TRAIN_IDS  # every training sample, no validation sample
        assert sum(counts.values()) == PER_EPOCH  # one rank: nothing repeated
    assert epochs[-1]["loss"] < epochs[0]["loss"] / 2
    assert max(e["accuracy"] for e in epochs[-2:]) >= 0.5  # five classes: chance is 0.2
    stdout = flowers["stdout"]
    assert f"to {flowers['url']}/{{train,validation}}" in stdout
    assert "samples/s" in stdout
    assert "accuracy:" in stdout


def planned_ids(flowers: dict[str, Any], cache: Path, epochs: int) -> list[dict[int, list[int]]]:
    """What each of 2 nodes x 2 ranks reads per epoch uninterrupted, read here in one process.

    The example's dataset, with the torchrun run's topology given explicitly: the sequence does
    not depend on the processes or DataLoader workers that read it, so this stands in for an
    uninterrupted torchrun (a third launch of four training ranks, ~40 s of CI).
    """
    found: list[dict[int, list[int]]] = []
    with pytest.MonkeyPatch.context() as patch:  # the store's settings, as the ranks get them
        for name in [name for name in os.environ if name.startswith("AWS_")]:
            patch.delenv(name)
        for name, value in flowers["env"].items():
            if name.startswith(("AWS_", "S3_")):
                patch.setenv(name, value)
        for rank in range(4):
            dataset = StreamingDataset(
                remote=flowers["url"], local=str(cache / f"node{rank // 2}"), split="train",
                batch_size=4, shuffle=True, rank=rank, world_size=4, ranks_per_node=2,
            )  # fmt: skip
            found.append({epoch: [int(s["id"]) for s in dataset] for epoch in range(epochs)})
    return found


def test_torchrun_two_nodes_resumed_mid_epoch_read_what_an_uninterrupted_run_reads(
    flowers: dict[str, Any], tmp_path: Path
):
    common = ("--remote", flowers["url"], "--epochs", "2", "--batch-size", "4")
    env = flowers["env"]
    whole = planned_ids(flowers, tmp_path / "c1", epochs=2)
    for epoch in (0, 1):
        per_rank = [ids[epoch] for ids in whole]
        assert {len(ids) for ids in per_rank} == {-(-PER_EPOCH // 4)}  # equal: no DDP hang
        assert set().union(*per_rank) == TRAIN_IDS
    assert whole[0][0] != whole[0][1]  # a new order each epoch

    checkpoint = str(tmp_path / "checkpoint.pt")
    stop = STEPS + 2  # two steps into the second epoch
    torchrun(*common, "--cache", str(tmp_path / "c2"), "--report", str(tmp_path / "first"),
             "--stop-after", str(stop), "--checkpoint", checkpoint, env=env)  # fmt: skip
    torchrun(*common, "--cache", str(tmp_path / "c2"), "--report", str(tmp_path / "second"),
             "--resume", checkpoint, env=env)  # fmt: skip
    first, second = rank_ids(tmp_path / "first", 4), rank_ids(tmp_path / "second", 4)
    for rank in range(4):
        assert first[rank][0] == whole[rank][0]
        assert len(first[rank][1]) == 2 * 4  # stopped mid-epoch
        assert list(second[rank]) == [1]
        assert first[rank][1] + second[rank][1] == whole[rank][1]


def test_torch_distributor_two_processes_train_from_the_store(
    flowers: dict[str, Any], tmp_path: Path
):
    result = run("flowers_ddp.py", "--torch-distributor", "2", "--local-mode",
                 "--remote", flowers["url"], "--epochs", "1", "--batch-size", "8",
                 "--cache", str(tmp_path / "cache"), "--report", str(tmp_path / "ids"),
                 env=flowers["env"])  # fmt: skip
    per_rank = [ids[0] for ids in rank_ids(tmp_path / "ids", 2)]
    assert len(per_rank[0]) == len(per_rank[1]) == -(-PER_EPOCH // 2)
    assert set(per_rank[0]) | set(per_rank[1]) == TRAIN_IDS
    assert f"{PER_EPOCH} samples over 2 ranks" in result.stdout


def test_lightning_resumed_mid_epoch_from_its_checkpoint_trains_on_what_one_run_reads(
    flowers: dict[str, Any], tmp_path: Path
):
    common = ("--remote", flowers["url"], "--cache", str(tmp_path / "cache"), "--epochs", "2",
              "--batch-size", "16")  # fmt: skip
    steps = STEPS + 2  # two steps into the second epoch
    checkpoint = str(tmp_path / "flowers.ckpt")
    run("flowers_lightning.py", *common, "--stop-after", str(steps), "--checkpoint", checkpoint,
        "--report", str(tmp_path / "first.json"), env=flowers["env"])  # fmt: skip
    result = run("flowers_lightning.py", *common, "--resume", checkpoint,
                 "--report", str(tmp_path / "second.json"), env=flowers["env"])  # fmt: skip
    first = json.loads((tmp_path / "first.json").read_text())
    second = json.loads((tmp_path / "second.json").read_text())
    # The demo's single-node run read the same shards with the same batch size and seed.
    reference = [epoch["ids"] for epoch in flowers["report"]["epochs"]]
    assert first["0"] == reference[0]
    assert len(first["1"]) == 2 * GLOBAL_BATCH
    assert list(second) == ["1"]
    assert first["1"] + second["1"] == reference[1]
    assert "lightning: 2 epochs" in result.stdout


def test_keras_learns_from_the_same_shards_through_tf_data(flowers: dict[str, Any], tmp_path):
    report = tmp_path / "keras.json"
    result = run("flowers_keras.py", "--remote", flowers["url"], "--cache", str(tmp_path / "c"),
                 "--epochs", "6", "--report", str(report), env=flowers["env"])  # fmt: skip
    figures = json.loads(report.read_text())
    assert len(figures["loss"]) == 6
    assert figures["loss"][-1] < figures["loss"][0] / 2
    assert figures["accuracy"][-1] >= 0.6  # training accuracy; five classes: chance is 0.2
    assert max(figures["val_accuracy"]) >= 0.4
    assert "validation accuracy" in result.stdout
