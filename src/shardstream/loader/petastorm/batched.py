"""Petastorm's ``BatchedDataLoader`` and ``InMemBatchedDataLoader``: columns of tensors.

Where :class:`~shardstream.loader.petastorm.pytorch.DataLoader` collates rows one by one, these
turn each column of a reader's output into one tensor (``transform_fn``, ``torch.as_tensor`` by
default) and cut batches of exactly ``batch_size`` rows out of the run of those tensors, across
the reader's batches (the last batch may be short). ``BatchedDataLoader`` can draw its batches
at random from a buffer of rows; ``InMemBatchedDataLoader`` reads up to ``rows_capacity`` rows
into memory once and serves ``num_epochs`` epochs from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream._torch import require_torch
from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm.pytorch import PassLoader, promoted

__all__ = ["BatchedDataLoader", "InMemBatchedDataLoader"]

_PURPOSE = "Petastorm's BatchedDataLoader"


class BatchedDataLoader(PassLoader):
    """Batches of a reader's rows as one tensor per column (Petastorm's ``BatchedDataLoader``).

    Each column of what the reader yields becomes a tensor (``transform_fn``; a row reader's
    value is passed as a one-item list, as in Petastorm), and batches of ``batch_size`` rows are
    cut from them, across the reader's batches; the last one may be short. Text, bytes,
    decimals and arrays of different shapes have no tensor: such a field is refused with an
    error naming it (select the others with ``schema_fields``).

    ``shuffling_queue_capacity > 0`` draws each batch at random from a buffer of rows: no batch
    is drawn until the buffer holds ``shuffling_queue_capacity - 1`` rows more than a batch
    (then the rest is drawn once the reader ends). Rows are drawn with a NumPy ``Generator``
    seeded by ``seed`` (``None``: a fresh seed each pass, as Petastorm's unseeded
    ``torch.randperm``); each pass makes its generator anew, so a pass with a seed repeats the
    draws of the last one.

    Args:
        reader: A reader from ``make_reader`` or ``make_batch_reader``; it sets the epochs.
        batch_size: Rows per batch.
        transform_fn: Makes a tensor of one column's values (default ``torch.as_tensor``).
        shuffling_queue_capacity: Above 0, batches are drawn at random from a buffer of rows.
        seed: The buffer's seed; shardstream's addition.

    Example:
        with BatchedDataLoader(make_batch_reader("/data/events", schema_fields=["x", "y"]),
                               batch_size=256, shuffling_queue_capacity=4096) as loader:
            for batch in loader:
                model(batch["x"], batch["y"])
    """

    def __init__(
        self,
        reader: Any,
        batch_size: int = 1,
        transform_fn: Callable[[Any], Any] | None = None,
        shuffling_queue_capacity: int = 0,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(reader)
        self.batch_size = _positive("batch_size", batch_size)
        if (
            not isinstance(shuffling_queue_capacity, int)
            or isinstance(shuffling_queue_capacity, bool)
            or shuffling_queue_capacity < 0
        ):
            raise ConfigurationError(
                f"shuffling_queue_capacity must be an integer >= 0, got "
                f"{shuffling_queue_capacity!r}"
            )
        self.transform_fn = transform_fn
        self.shuffling_queue_capacity = shuffling_queue_capacity
        self.seed = seed

    def _batches(self) -> Iterator[dict[str, Any]]:
        torch = require_torch(_PURPOSE)
        capacity = self.shuffling_queue_capacity
        rng = np.random.default_rng(np.random.SeedSequence(self.seed)) if capacity else None
        buffer = RowBuffer(torch, rng)
        # A batch leaves at least capacity - 1 rows behind to draw the next from.
        keep = capacity - 1 if capacity else 0
        for item in self.reader:
            keys, columns = columns_of(item, self.reader.batched_output, self.transform_fn)
            buffer.add(keys, [torch.as_tensor(column) for column in columns])
            while buffer.size >= keep + self.batch_size:
                yield buffer.take(self.batch_size)
        while buffer.size:
            yield buffer.take(self.batch_size)


class InMemBatchedDataLoader:
    """Up to ``rows_capacity`` rows read once, served for ``num_epochs`` epochs from memory.

    Petastorm's ``InMemBatchedDataLoader``: the reader's first ``rows_capacity`` rows become one
    tensor per column (``transform_fn``, as :class:`BatchedDataLoader`), the reader is stopped,
    and each epoch yields them in batches of ``batch_size`` (the last may be short), in order
    or, with ``shuffle``, in an order drawn anew each epoch from ``seed`` and the epoch (a NumPy
    ``Generator``; the same seed gives the same orders). The rows are read when the ``with``
    block starts, or at the first pass; a loader makes one pass only.

    Args:
        reader: A reader from ``make_reader`` or ``make_batch_reader``.
        batch_size: Rows per batch.
        transform_fn: Makes a tensor of one column's values (default ``torch.as_tensor``).
        num_epochs: Passes over the rows held.
        seed: The shuffle's seed.
        rows_capacity: The most rows read; ``None`` reads every row the reader yields (its
            ``num_epochs`` must then be finite).
        shuffle: Shuffle the rows in each epoch.

    Example:
        reader = make_reader("/data/hello_world", schema_fields=["id", "image"])
        with InMemBatchedDataLoader(reader, batch_size=32, num_epochs=10, rows_capacity=5000,
                                    shuffle=True) as loader:
            for batch in loader:
                model(batch["image"])
    """

    def __init__(
        self,
        reader: Any,
        batch_size: int = 1,
        transform_fn: Callable[[Any], Any] | None = None,
        num_epochs: int = 1,
        seed: int = 0,
        rows_capacity: int | None = 1024,
        shuffle: bool = False,
    ) -> None:
        self.reader = reader
        self.batch_size = _positive("batch_size", batch_size)
        self.num_epochs = _positive("num_epochs", num_epochs)
        if rows_capacity is not None:
            _positive("rows_capacity", rows_capacity)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ConfigurationError(f"seed must be an integer >= 0, got {seed!r}")
        self.transform_fn = transform_fn
        self.seed = seed
        self.rows_capacity = rows_capacity
        self.shuffle = shuffle
        self._held: tuple[list[str], list[Any]] | None = None
        self._in_iter = False

    def __enter__(self) -> InMemBatchedDataLoader:
        self._load()
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.stop()
        self.reader.join()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._in_iter:
            raise RuntimeError(  # Petastorm's words, which its users match
                "InMemBatchedDataLoader couldn't be used multiple times: give the epochs as "
                "num_epochs= when making it"
            )
        self._in_iter = True
        keys, columns = self._load()
        size = len(columns[0]) if columns else 0
        for epoch in range(self.num_epochs):
            order = (
                np.random.default_rng(
                    np.random.SeedSequence(self.seed, spawn_key=(epoch,))
                ).permutation(size)
                if self.shuffle
                else np.arange(size)
            )
            for start in range(0, size, self.batch_size):
                picked = require_torch(_PURPOSE).as_tensor(order[start : start + self.batch_size])
                yield dict(zip(keys, (column[picked] for column in columns), strict=True))

    def _load(self) -> tuple[list[str], list[Any]]:
        """The rows held: read (and the reader stopped) on the first call."""
        if self._held is None:
            self._held = load_rows(self.reader, self.transform_fn, self.rows_capacity)
        return self._held


def load_rows(
    reader: Any, transform_fn: Callable[[Any], Any] | None, rows_capacity: int | None
) -> tuple[list[str], list[Any]]:
    """The names and tensors of up to ``rows_capacity`` rows of ``reader``, which is stopped.

    The reader is stopped rather than drained: one of endless epochs never ends.
    """
    torch = require_torch(_PURPOSE)
    buffer = RowBuffer(torch, None)
    try:
        for item in reader:
            keys, columns = columns_of(item, reader.batched_output, transform_fn)
            buffer.add(keys, [torch.as_tensor(column) for column in columns])
            if rows_capacity is not None and buffer.size >= rows_capacity:
                break
    finally:
        reader.stop()
        reader.join()
    if not buffer.size:
        return buffer.keys, []
    held = buffer.take(buffer.size if rows_capacity is None else min(rows_capacity, buffer.size))
    return list(held), list(held.values())


def columns_of(
    item: Any, batched: bool, transform_fn: Callable[[Any], Any] | None
) -> tuple[list[str], list[Any]]:
    """The names and column values of one reader output, each as ``transform_fn`` makes it.

    Raises:
        ConfigurationError: A field has no tensor (text, bytes, decimals, nulls, ragged).
    """
    values = item._asdict()
    keys = list(values)
    columns = []
    for name, value in values.items():
        value = promoted(name, value)
        if isinstance(value, np.ndarray) and value.dtype.kind in "SUO":
            raise _no_tensor(name, value.dtype)
        column = value if batched else [value]
        if transform_fn is not None:
            columns.append(transform_fn(column))
            continue
        try:
            columns.append(require_torch(_PURPOSE).as_tensor(np.asarray(column)))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise _no_tensor(name, type(value).__name__) from exc
    return keys, columns


def _no_tensor(name: str, kind: object) -> ConfigurationError:
    return ConfigurationError(
        f"field {name!r} ({kind}) has no torch tensor: BatchedDataLoader takes numbers and "
        f"arrays of one shape; leave it out with schema_fields=, or use DataLoader, which hands "
        f"text and decimals over as lists"
    )


class RowBuffer:
    """Rows held as one tensor per column; batches taken in order, or at random.

    Args:
        torch: The torch module.
        rng: Draws the rows of each batch at random; ``None`` takes them in order.
    """

    def __init__(self, torch: Any, rng: np.random.Generator | None) -> None:
        self._torch = torch
        self._rng = rng
        self.keys: list[str] = []
        self._columns: list[Any] = []
        self._order: NDArray[np.int64] | None = None  # rows not taken yet, in taking order

    @property
    def size(self) -> int:
        """Rows held and not yet taken."""
        if self._order is not None:
            return len(self._order)
        return len(self._columns[0]) if self._columns else 0

    def add(self, keys: list[str], columns: Sequence[Any]) -> None:
        """Hold ``columns`` (one tensor per key, rows first) after the rows held."""
        counts = {len(column) for column in columns}
        if len(counts) > 1:
            raise ConfigurationError(
                f"the columns {keys} hold different numbers of rows {sorted(counts)}: "
                f"transform_fn must keep one value per row"
            )
        if self._columns and keys != self.keys:
            raise ConfigurationError(
                f"the reader's fields changed from {self.keys} to {keys} between batches"
            )
        if self._columns and self._order is not None:  # drop the rows taken
            if self._rng is None:
                start = len(self._columns[0]) - len(self._order)
                self._columns = [column[start:] for column in self._columns]
            else:
                left = self._torch.as_tensor(self._order)
                self._columns = [column[left] for column in self._columns]
        self._columns = (
            [self._torch.cat([old, new]) for old, new in zip(self._columns, columns, strict=True)]
            if self._columns
            else list(columns)
        )
        self.keys = keys
        self._order = None

    def take(self, count: int) -> dict[str, Any]:
        """Up to ``count`` rows not taken yet, as one tensor per key."""
        if self._order is None:
            rows = len(self._columns[0])
            # One permutation per fill: batches are its slices until rows are added.
            self._order = np.arange(rows) if self._rng is None else self._rng.permutation(rows)
        picked, self._order = self._order[:count], self._order[count:]
        if self._rng is None:  # in order: slices share memory with the rows held
            start = len(self._columns[0]) - len(self._order) - len(picked)
            out = [column[start : start + len(picked)] for column in self._columns]
        else:
            index = self._torch.as_tensor(picked)
            out = [column[index] for column in self._columns]
        return dict(zip(self.keys, out, strict=True))


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1, got {value!r}")
    return value
