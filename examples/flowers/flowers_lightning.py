"""Flowers with PyTorch Lightning: a LightningDataModule whose checkpoints carry the loader's place.

Run it on the shards ``flowers_demo.py`` wrote (``--remote`` a folder or a URL)::

    python examples/flowers/flowers_lightning.py --remote URL

``FlowersData`` builds the StreamingDataset / StreamingDataLoader pair for each split. Its
``state_dict`` is the place in the epoch of the samples the model has trained on, so a
checkpoint taken mid-epoch resumes with the very next sample (``trainer.fit(...,
ckpt_path=...)`` hands the state back through ``load_state_dict``).

``--stop-after STEPS --checkpoint PATH`` saves a checkpoint after STEPS steps and stops as if
the job died; ``--resume PATH`` goes on from it.
"""

from __future__ import annotations

import argparse
import json
import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from flowers_train import MobileNetish
from torch.nn import functional

from shardstream import StreamingDataLoader, StreamingDataset


class FlowersData(L.LightningDataModule):
    """The flowers shards for Lightning; checkpoints record where the training loader is.

    The state is the dataset's at the count of training samples that reached the model
    (``on_before_batch_transfer`` sees each batch as it is used), over every rank, so batches
    a trainer fetched ahead (``prefetch_batches``) are not counted as trained. Lightning
    2.1+ also saves the StreamingDataLoader's own state in its loop state; both agree.
    """

    def __init__(self, remote: str, cache: str, batch_size: int = 16, workers: int = 2) -> None:
        super().__init__()
        self.remote, self.cache = remote, cache
        self.batch_size, self.workers = batch_size, workers
        self.train_data: StreamingDataset | None = None
        self._used = 0  # training samples handed to the model since this epoch's iter()
        self._epoch = -1
        self._pending: Mapping[str, Any] | None = None

    def train_dataloader(self) -> StreamingDataLoader:
        """Shuffled training batches; resumes from a loaded checkpoint's place."""
        self.train_data = StreamingDataset(remote=self.remote, local=self.cache, split="train",
                                           batch_size=self.batch_size, shuffle=True)  # fmt: skip
        if self._pending is not None:
            self.train_data.load_state_dict(self._pending)
            self._pending = None
        return StreamingDataLoader(
            self.train_data, batch_size=self.batch_size, num_workers=self.workers
        )

    def val_dataloader(self) -> StreamingDataLoader:
        """The validation split in order."""
        data = StreamingDataset(remote=self.remote, local=self.cache, split="validation",
                                batch_size=self.batch_size)  # fmt: skip
        return StreamingDataLoader(data, batch_size=self.batch_size)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Count the training samples the model is about to see."""
        if self.trainer is not None and self.trainer.training:
            if self.trainer.current_epoch != self._epoch:
                self._epoch, self._used = self.trainer.current_epoch, 0
            self._used += len(batch["id"])
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The training loader's place: after the samples the model has seen, on every rank."""
        if self.train_data is None:
            return {}
        ranks = self.trainer.world_size if self.trainer is not None else 1
        return {"loader": self.train_data.state_dict(self._used * ranks, from_beginning=False)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume at the next ``train_dataloader()``'s first iteration."""
        self._pending = state_dict.get("loader")


class FlowersModel(L.LightningModule):
    """:class:`MobileNetish` as a LightningModule; remembers the sample ids it trained on."""

    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.model = MobileNetish()
        self.lr = lr
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """Cross-entropy on one batch."""
        self.seen.setdefault(self.current_epoch, []).extend(batch["id"].tolist())
        loss = functional.cross_entropy(self.model(batch["image"]), batch["label"])
        self.log("train_loss", loss, on_epoch=True, batch_size=len(batch["id"]))
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """Accuracy on one batch (the last one may repeat a few samples)."""
        hits = (self.model(batch["image"]).argmax(dim=1) == batch["label"]).float().mean()
        self.log("val_accuracy", hits, on_epoch=True, batch_size=len(batch["id"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW, as in the plain PyTorch loop."""
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


class _Died(Exception):
    """Raised after the checkpoint of ``--stop-after``: the job 'dies' there."""


class StopAfter(L.Callback):
    """Save a checkpoint after ``steps`` optimizer steps, then stop the run by raising."""

    def __init__(self, steps: int, path: str) -> None:
        self.steps, self.path = steps, path

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        """Checkpoint and stop once ``steps`` steps are done."""
        if trainer.global_step == self.steps:
            trainer.save_checkpoint(self.path)
            raise _Died


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remote", required=True, help="the shards (train/ and validation/)")
    parser.add_argument("--cache", default="demo-data/flowers/lightning-cache")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--resume", default="")
    parser.add_argument("--stop-after", type=int, default=0)
    parser.add_argument("--report", default="", help="write the sample ids per epoch here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Lightning's advice for GPUs and many workers does not apply to this small CPU example.
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*GPU available but not used.*")
    L.seed_everything(17, verbose=False)

    data = FlowersData(args.remote, args.cache, args.batch_size, args.workers)
    model = FlowersModel()
    callbacks: list[L.Callback] = (
        [StopAfter(args.stop_after, args.checkpoint)] if args.stop_after else []
    )
    trainer = L.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=callbacks, num_sanity_val_steps=0,
    )  # fmt: skip
    try:
        trainer.fit(model, datamodule=data, ckpt_path=args.resume or None)
    except _Died:
        print(f"stopped after {args.stop_after} steps; checkpoint: {args.checkpoint}")
    else:
        metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
        loss, accuracy = metrics.get("train_loss_epoch", 0.0), metrics.get("val_accuracy", 0.0)
        print(f"lightning: {trainer.current_epoch} epochs, train loss {loss:.3f}, validation "
              f"accuracy {100 * accuracy:.1f}%")  # fmt: skip
    if args.report:
        Path(args.report).write_text(json.dumps(model.seen))


if __name__ == "__main__":
    main()
