"""The training side of the flowers example: a small MobileNet-style CNN fed by shardstream.

:func:`train` runs on one process or on every rank of a DDP job (torchrun, TorchDistributor):
it streams the ``train`` split of the shards through a :class:`StreamingDataLoader`, evaluates
on the ``validation`` split after each epoch, and can stop mid-epoch with a checkpoint
(model, optimizer and the loader's state) and resume from it exactly where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional

from shardstream import StreamingDataLoader, StreamingDataset

__all__ = ["EpochResult", "MobileNetish", "TrainConfig", "evaluate", "normalise", "train"]

logger = logging.getLogger("flowers.train")


class MobileNetish(nn.Module):
    """A small MobileNet-style classifier: depthwise separable convolutions and global pooling.

    Takes uint8 images (batch, 3, height, width) and normalises them itself.
    """

    def __init__(self, classes: int = 5, width: int = 16) -> None:
        super().__init__()

        def separable(inputs: int, outputs: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(inputs, inputs, 3, stride, 1, groups=inputs, bias=False),
                nn.BatchNorm2d(inputs),
                nn.ReLU6(inplace=True),
                nn.Conv2d(inputs, outputs, 1, bias=False),
                nn.BatchNorm2d(outputs),
                nn.ReLU6(inplace=True),
            )

        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU6(inplace=True),
            separable(width, 2 * width, 2),
            separable(2 * width, 4 * width, 2),
            separable(4 * width, 4 * width, 2),
        )
        self.classifier = nn.Linear(4 * width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of uint8 images."""
        x = self.features(normalise(images))
        logits: torch.Tensor = self.classifier(x.mean(dim=(2, 3)))
        return logits


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 pixels to floats around zero."""
    return (images.float() - 127.5) / 64.0


@dataclass
class TrainConfig:
    """What :func:`train` does.

    Attributes:
        remote: The shards' URL or folder (holding ``train/`` and ``validation/``).
        cache: The node-local cache folder.
        epochs: Epochs to train.
        batch_size: Samples per device batch.
        workers: DataLoader workers per rank.
        lr: The learning rate (AdamW).
        seed: The model's seed (the shuffle's is the dataset's default).
        checkpoint: Where to save a checkpoint when stopping early.
        resume: A checkpoint to resume from.
        stop_after: Stop after this many steps in all (mid-epoch, as if the job died), having
            saved ``checkpoint``; 0 never stops early.
        report: A folder to write each rank's sample ids per epoch to (``ids-rank<R>.json``).
    """

    remote: str
    cache: str
    epochs: int = 5
    batch_size: int = 16
    workers: int = 2
    lr: float = 0.01
    seed: int = 17
    checkpoint: str = ""
    resume: str = ""
    stop_after: int = 0
    report: str = ""


@dataclass
class EpochResult:
    """One epoch's figures: loss, accuracy and samples of all ranks; times and ids this rank's."""

    epoch: int
    loss: float
    accuracy: float
    samples: int
    seconds: float
    data_seconds: float
    ids: list[int] = field(default_factory=list, repr=False)

    @property
    def loader_throughput(self) -> float:
        """Samples per second of the loader alone (time spent waiting for batches)."""
        return self.samples / max(self.data_seconds, 1e-9)


def train(
    config: TrainConfig, on_epoch: Callable[[EpochResult], None] | None = None
) -> list[EpochResult]:
    """Train :class:`MobileNetish` on the shards; DDP when a process group is initialised.

    Returns the figures of the epochs this call ran (rank 0's; the others return theirs);
    ``on_epoch`` is called on rank 0 with each as it ends (else each is logged).
    """
    torch.manual_seed(config.seed)
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0

    # The loader, in two lines: the shards stream from `remote` into the node's cache.
    dataset = StreamingDataset(remote=config.remote, local=config.cache, split="train",
                               batch_size=config.batch_size, shuffle=True)  # fmt: skip
    loader = StreamingDataLoader(dataset, batch_size=config.batch_size, num_workers=config.workers)

    model: nn.Module = MobileNetish()
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    first_epoch, step = 0, 0
    if config.resume:
        state = torch.load(config.resume, weights_only=False)
        _bare(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])  # the next iter() starts where it stopped
        first_epoch, step = state["epoch"], state["step"]
        logger.info("resumed at epoch %d, step %d, from %s", first_epoch, step, config.resume)

    results: list[EpochResult] = []
    for epoch in range(first_epoch, config.epochs):
        model.train()
        started = time.perf_counter()
        data_seconds, loss_sum, samples = 0.0, 0.0, 0
        ids: list[int] = []
        waited = time.perf_counter()
        for batch in loader:
            data_seconds += time.perf_counter() - waited
            ids.extend(int(i) for i in batch["id"])
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(batch["image"]), batch["label"])
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            loss_sum += loss.item() * len(batch["id"])
            samples += len(batch["id"])
            step += 1
            if config.stop_after and step == config.stop_after:
                _save(config.checkpoint, model, optimizer, loader, epoch, step, rank)
                _write_ids(config.report, rank, epoch, ids)
                logger.info("stopped at epoch %d, step %d (as if the job died)", epoch, step)
                return results
            waited = time.perf_counter()
        _write_ids(config.report, rank, epoch, ids)
        totals = torch.tensor([loss_sum, float(samples)], dtype=torch.float64)
        if distributed:
            dist.all_reduce(totals)
        accuracy = evaluate(_bare(model), config)
        result = EpochResult(
            epoch=epoch, loss=float(totals[0] / totals[1]), accuracy=accuracy,
            samples=int(totals[1]), seconds=time.perf_counter() - started,
            data_seconds=data_seconds, ids=ids,
        )  # fmt: skip
        results.append(result)
        if rank == 0 and on_epoch is not None:
            on_epoch(result)
        elif rank == 0:
            logger.info(
                "epoch %d: loss %.3f, validation accuracy %.1f%%, %d samples in %.1f s",
                epoch, result.loss, 100 * accuracy, result.samples, result.seconds,
            )  # fmt: skip
    return results


@torch.no_grad()
def evaluate(model: nn.Module, config: TrainConfig) -> float:
    """Accuracy on the ``validation`` split, each rank reading its share (every rank gets it)."""
    dataset = StreamingDataset(remote=config.remote, local=config.cache, split="validation",
                               batch_size=config.batch_size)  # fmt: skip
    was_training = model.training
    model.eval()
    right: dict[int, bool] = {}  # by sample id: on several ranks a sample or two repeats
    for batch in StreamingDataLoader(dataset, batch_size=config.batch_size):
        predicted = model(batch["image"]).argmax(dim=1)
        hits = (predicted == batch["label"]).tolist()
        right.update(zip(batch["id"].tolist(), hits, strict=True))
    model.train(was_training)
    if dist.is_available() and dist.is_initialized():
        shares: list[dict[int, bool] | None] = [None] * dist.get_world_size()
        dist.all_gather_object(shares, right)
        right = {key: hit for share in shares if share for key, hit in share.items()}
    return sum(right.values()) / max(len(right), 1)


def _bare(model: nn.Module) -> nn.Module:
    """The model inside DDP's wrapper."""
    module = getattr(model, "module", model)
    assert isinstance(module, nn.Module)
    return module


def _save(
    path: str, model: nn.Module, optimizer: torch.optim.Optimizer,
    loader: StreamingDataLoader, epoch: int, step: int, rank: int,
) -> None:  # fmt: skip
    """Rank 0 writes the checkpoint: model, optimizer, the loader's place, epoch and step."""
    state = loader.state_dict()  # every rank may call it; it is the same on every rank
    if rank != 0 or not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    partial = f"{path}.partial"
    torch.save(
        {"model": _bare(model).state_dict(), "optimizer": optimizer.state_dict(),
         "loader": state, "epoch": epoch, "step": step},
        partial,
    )  # fmt: skip
    os.replace(partial, path)


def _write_ids(folder: str, rank: int, epoch: int, ids: list[int]) -> None:
    """Append this epoch's sample ids (in order) to ``folder/ids-rank<rank>.json``."""
    if not folder:
        return
    path = Path(folder) / f"ids-rank{rank}.json"
    seen: dict[str, list[int]] = json.loads(path.read_text()) if path.exists() else {}
    seen.setdefault(str(epoch), []).extend(ids)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(seen))
