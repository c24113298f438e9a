"""Batches of a :class:`~shardstream.StreamingDataLoader` over epochs, each row once per epoch.

The converter's loaders and Petastorm's readers iterate a loader ``num_epochs`` times (``None``:
for ever) and cut from each epoch's last batch the rows that only repeat others
(:mod:`shardstream.loader.epoch_tail`). A state dict taken between batches resumes there: the
epochs already run and the batches already taken of the current one are counted, so the epoch
count and the cut stay right.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from shardstream._torch import require_torch
from shardstream.dataset.streaming import StreamingDataset
from shardstream.loader.dataloader import StreamingDataLoader
from shardstream.loader.epoch_tail import EpochTail

__all__ = ["ConverterDataLoader"]


class ConverterDataLoader:
    """Batches from a :class:`~shardstream.StreamingDataLoader` over ``num_epochs`` epochs.

    Iterating runs the epochs (``None``: for ever); each epoch's last batch loses the rows that
    only repeat others (unless the converter was asked for ``even_batches``).

    Attributes:
        loader: The underlying ``StreamingDataLoader`` (its ``state_dict`` resumes mid-epoch).
        num_epochs: Epochs per iteration, or ``None``.

    Example:
        converter = make_spark_converter(df, parent_cache_dir_url="file:///tmp/cache")
        with converter.make_torch_dataloader(batch_size=64, num_epochs=2) as loader:
            for batch in loader:  # loader is a ConverterDataLoader
                ...
    """

    def __init__(
        self, loader: StreamingDataLoader, num_epochs: int | None, tail: EpochTail | None
    ) -> None:
        self.loader = loader
        self.num_epochs = num_epochs
        self._tail = tail
        self._running: list[Iterator[Any]] = []
        self._closed = False
        self._start: tuple[int, int] | None = None  # (epoch, its batches taken) to resume at

    def __iter__(self) -> Iterator[Any]:
        epoch, first_step = self._start or (0, 0)
        self._start = None
        while not self._closed and (self.num_epochs is None or epoch < self.num_epochs):
            batches = iter(self.loader)
            self._running.append(batches)
            try:
                for step, batch in enumerate(batches, start=first_step):
                    if self._tail is not None and step == self._tail.steps - 1:
                        batch = _cut(batch, self._tail)
                        if batch is None:
                            continue
                    yield batch
            finally:
                if batches in self._running:  # close() may have stopped it already
                    self._running.remove(batches)
                _close(batches)
            epoch, first_step = epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """The loader's state after the batches taken so far (as the loader's own)."""
        return self.loader.state_dict()

    def load_state_dict(self, obj: Mapping[str, Any], *, strict: bool = True) -> None:
        """Resume from ``obj`` at the next iteration: its epoch, after its batches.

        The epochs before the state's count against ``num_epochs``.
        """
        self.loader.load_state_dict(obj, strict=strict)
        dataset = self.loader.dataset
        assert isinstance(dataset, StreamingDataset)
        epoch, done = int(obj["epoch"]), int(obj["sample_in_epoch"])
        if done >= dataset.epoch_size:  # saved at an epoch's very end: the next one begins
            epoch, done = epoch + 1, 0
        per_step = (dataset.batch_size or 1) * dataset.topology.world_size
        self._start = (epoch, done // per_step)

    def close(self) -> None:
        """Stop any epoch still running (its DataLoader workers exit); iterating ends."""
        self._closed = True
        for batches in list(self._running):
            _close(batches)
        self._running.clear()


def _cut(batch: Any, tail: EpochTail) -> Any:
    """``batch`` without its padding rows; ``None`` when none is left."""
    if not tail.padded:
        return batch
    if not tail.keep.any():
        return None
    torch = require_torch()
    rows = tail.keep.nonzero()[0].tolist()
    index = torch.as_tensor(rows, dtype=torch.long)

    def cut(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.index_select(0, index)
        if isinstance(value, Mapping):
            return {key: cut(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [value[row] for row in rows]
        return value

    return cut(batch)


def _close(batches: Iterator[Any]) -> None:
    close = getattr(batches, "close", None)
    if close is not None:
        close()
