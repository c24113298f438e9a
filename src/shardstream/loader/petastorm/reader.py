"""Petastorm's ``Reader``: rows or batches over epochs, a context manager, resumable.

A reader takes the batches of decoded rows its loader yields over the epochs
(:class:`~shardstream.loader.epoch_loader.ConverterDataLoader`) and hands out what
:class:`~shardstream.loader.petastorm.blocks.Outputs` makes of each. Its state dict is the
loader's before the current batch and the outputs of it already handed out: a new reader that
loads it reads that batch again and skips those, so it resumes exactly, mid-batch included.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from shardstream.dataset.streaming import StreamingDataset
from shardstream.errors import ConfigurationError
from shardstream.loader.epoch_loader import ConverterDataLoader
from shardstream.loader.petastorm.blocks import Outputs

__all__ = ["Reader"]


class Reader:
    """Petastorm's ``Reader``: an iterator over rows or batches, and a context manager.

    Made by :func:`make_reader` and :func:`make_batch_reader`. Any number of threads may call
    ``next()`` on one reader, as on Petastorm's: each item goes to one of them. Iterating runs
    the reader's epochs once; :meth:`reset` runs them again once all was read. Leaving the
    ``with`` block (or :meth:`stop`) stops it, and its worker processes exit.

    Args:
        epochs: The batches of decoded rows, over the epochs (``None``: no data).
        outputs: What each batch of rows becomes.
        dataset: The streaming dataset read.

    Attributes:
        schema: The Unischema of what it yields (after ``schema_fields`` and the transform).
        batched_output: Whether it yields batches (``make_batch_reader``).
        is_batched_reader: The same.
        ngram: ``None``: NGrams are not supported.
        last_row_consumed: Every epoch was read.
        stopped: :meth:`stop` was called.
        dataset: The :class:`~shardstream.StreamingDataset` of the Parquet folder (``None``
            when no file passes the filters).

    Example:
        with make_batch_reader("/data/events", num_epochs=None) as reader:
            state = reader.state_dict()  # save it; load_state_dict(state) resumes there
            batch = next(reader)
    """

    def __init__(
        self,
        epochs: ConverterDataLoader | None,
        outputs: Outputs,
        dataset: StreamingDataset | None,
    ) -> None:
        self._epochs = epochs
        self._outputs = outputs
        self.dataset = dataset
        self.schema = outputs.schema
        self.batched_output = outputs.batched
        self.is_batched_reader = outputs.batched
        self.ngram = None
        self.last_row_consumed = False
        self.stopped = False
        self._iterator: Iterator[Any] | None = None
        self._state: dict[str, Any] | None = None  # the loader's, before the current batch
        self._taken = 0  # outputs of the current batch handed out
        self._skip = 0  # outputs of the first batch to skip (resumed mid-batch)
        self._lock = threading.Lock()  # one thread at a time takes the next item

    @property
    def diagnostics(self) -> dict[str, Any]:
        """Petastorm's pool diagnostics, always empty here (nothing to report)."""
        return {}

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Any:
        if self.stopped:
            raise RuntimeError(
                "this reader was stopped (its with block ended, or stop() was called): make a "
                "new one with make_reader or make_batch_reader to read again"
            )
        with self._lock:
            if self._iterator is None:
                self._iterator = self._outputs_of_epochs()
            try:
                return next(self._iterator)
            except StopIteration:
                self.last_row_consumed = True
                raise

    def next(self) -> Any:
        """The next row or batch (Petastorm's Python 2 spelling)."""
        return self.__next__()

    def reset(self) -> None:
        """Read the epochs again, once every row of the last pass was read.

        Raises:
            NotImplementedError: The pass is not over, as in Petastorm.
        """
        if not self.last_row_consumed:
            raise NotImplementedError(
                "reset() restarts a reader whose epochs were all read; this one is still "
                "reading: finish the pass, or make a new reader"
            )
        self.last_row_consumed = False
        self._iterator = None

    def stop(self) -> None:
        """Stop reading; worker processes exit."""
        if self._epochs is not None:
            self._epochs.close()
        self.stopped = True

    def join(self) -> None:
        """Nothing to wait for: :meth:`stop` ends the workers."""

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.join()

    def state_dict(self) -> dict[str, Any]:
        """Where the reader stands, for :meth:`load_state_dict` (in a new reader, any shards).

        Raises:
            ConfigurationError: The reader has no data.
        """
        if self._epochs is None:
            raise ConfigurationError("this reader has no data to resume")
        state = self._state if self._state is not None else self._epochs.state_dict()
        return {"dataset": dict(state), "outputs_in_batch": self._taken}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where ``state`` (from :meth:`state_dict`) was taken, before reading.

        Raises:
            ConfigurationError: Reading began already, or the state is not a reader's.
        """
        if self._iterator is not None or self._epochs is None:
            raise ConfigurationError(
                "load_state_dict resumes a new reader before its first row: call it right "
                "after make_reader / make_batch_reader"
            )
        if not isinstance(state, Mapping) or "dataset" not in state:
            raise ConfigurationError(
                f"load_state_dict takes what Reader.state_dict() returned, got {state!r}"
            )
        self._epochs.load_state_dict(state["dataset"])
        self._skip = int(state.get("outputs_in_batch", 0))

    def _outputs_of_epochs(self) -> Iterator[Any]:
        if self._epochs is None:
            return
        batches = iter(self._epochs)
        while True:
            self._state, self._taken = self._epochs.state_dict(), 0
            try:
                block = next(batches)
            except StopIteration:
                return
            outputs = self._outputs.of(block)
            skip, self._skip = min(self._skip, len(outputs)), 0
            self._taken = skip
            for output in outputs[skip:]:
                self._taken += 1
                yield output
