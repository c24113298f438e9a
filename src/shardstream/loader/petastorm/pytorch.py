"""Petastorm's ``petastorm.pytorch.DataLoader``: a reader's rows in batches of torch tensors.

It iterates a reader, takes its rows (a batch reader's batches are split into rows), promotes
the types torch lacks as Petastorm does (``uint16`` to ``int32``, ``uint32`` to ``int64``,
booleans to ``uint8``) and collates ``batch_size`` rows at a time into a dict, the last batch
short. ``shuffling_queue_capacity > 0`` draws rows at random from a buffer of that many, as
Petastorm's shuffling queue does. A second pass resets the reader once the first ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np

from shardstream._torch import default_collate
from shardstream.errors import ConfigurationError

__all__ = ["DataLoader", "PassLoader", "decimal_friendly_collate", "promoted"]

logger = logging.getLogger(__name__)

_WIDENED = {np.dtype("uint16"): np.int32, np.dtype("uint32"): np.int64, np.dtype("bool"): np.uint8}


def decimal_friendly_collate(batch: Sequence[Any]) -> Any:
    """Torch's ``default_collate``, leaving decimals, text and bytes as the sequence given.

    As Petastorm's: a batch of dicts collates per key (each key's values a list), a batch of
    tuples per position (each position's values the tuple ``zip`` makes), so a tuple row's
    text comes back as a tuple and a dict row's as a list.

    Example:
        import numpy as np

        batch = decimal_friendly_collate([{"x": np.float32(1), "id": "a"},
                                          {"x": np.float32(2), "id": "b"}])
        assert batch["id"] == ["a", "b"] and batch["x"].tolist() == [1.0, 2.0]
        assert decimal_friendly_collate([("a", 1), ("b", 2)])[0] == ("a", "b")
    """
    first = batch[0]
    if isinstance(first, (Decimal, str, bytes)):
        return batch
    if isinstance(first, Mapping):
        return {key: decimal_friendly_collate([row[key] for row in batch]) for key in first}
    if isinstance(first, Sequence) and not isinstance(first, np.ndarray):
        return [decimal_friendly_collate(column) for column in zip(*batch, strict=True)]
    return default_collate()(batch)


class PassLoader:
    """What Petastorm's torch loaders share: passes over a reader, and a context manager.

    A pass runs the reader's epochs once; a second pass resets the reader (once the first
    ended), one while another runs is refused with Petastorm's words, and after a failed pass
    the loader refuses more. Subclasses yield a pass's batches from :meth:`_batches`.

    Args:
        reader: A reader from ``make_reader`` or ``make_batch_reader``.
    """

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self._passes = 0
        self._in_iter = False
        self._error: BaseException | None = None

    def __iter__(self) -> Iterator[Any]:
        if self._error is not None:
            raise RuntimeError(
                f"the last pass over this DataLoader failed ({self._error!r}); make a new reader"
            )
        if self._in_iter:
            raise RuntimeError(  # Petastorm's words, which its users match
                "You must finish a full pass of Petastorm DataLoader before making another pass "
                "from the beginning: a pass over this DataLoader is running"
            )
        if self._passes:
            self.reader.reset()
            logger.warning("a new pass over the Petastorm DataLoader resets its reader")
        self._passes += 1
        self._in_iter = True
        try:
            yield from self._batches()
        except Exception as exc:
            self._error = exc
            raise
        finally:
            self._in_iter = False

    def _batches(self) -> Iterator[Any]:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.stop()
        self.reader.join()


class DataLoader(PassLoader):
    """Batches of a Petastorm reader's rows, collated for torch (Petastorm's ``DataLoader``).

    Args:
        reader: A reader from ``make_reader`` or ``make_batch_reader``; it sets the epochs.
        batch_size: Rows per batch.
        collate_fn: Makes a batch of a list of row dicts (default:
            :func:`decimal_friendly_collate`).
        shuffling_queue_capacity: Above 0, rows are drawn at random from a buffer of this many.
        seed: The buffer's seed (``None``: a fresh one each run); shardstream's addition.

    Example:
        with DataLoader(make_reader("/data/hello_world", num_epochs=1), batch_size=32) as loader:
            for batch in loader:
                model(batch["image"])
    """

    def __init__(
        self,
        reader: Any,
        batch_size: int = 1,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        shuffling_queue_capacity: int = 0,
        *,
        seed: int | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not isinstance(shuffling_queue_capacity, int) or shuffling_queue_capacity < 0:
            raise ConfigurationError(
                f"shuffling_queue_capacity must be an integer >= 0, got "
                f"{shuffling_queue_capacity!r}"
            )
        super().__init__(reader)
        self.batch_size = batch_size
        self.collate_fn = decimal_friendly_collate if collate_fn is None else collate_fn
        self.shuffling_queue_capacity = shuffling_queue_capacity
        self.seed = seed

    def _batches(self) -> Iterator[Any]:
        batch: list[dict[str, Any]] = []
        for row in self._shuffled(self._all_rows()):
            batch.append(row)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch:
            yield self.collate_fn(batch)

    def _all_rows(self) -> Iterator[dict[str, Any]]:
        for item in self.reader:
            yield from self._rows(item)

    def _shuffled(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``rows``, or with a shuffling queue, drawn at random from a buffer of them."""
        capacity = self.shuffling_queue_capacity
        if not capacity:
            yield from rows
            return
        rng = np.random.default_rng(np.random.SeedSequence(self.seed))
        buffer: list[dict[str, Any]] = []
        for row in rows:
            buffer.append(row)
            if len(buffer) >= capacity:
                yield _draw(buffer, rng)
        while buffer:
            yield _draw(buffer, rng)

    def _rows(self, item: Any) -> list[dict[str, Any]]:
        values = {name: promoted(name, value) for name, value in item._asdict().items()}
        if not self.reader.batched_output:
            return [values]
        count = len(next(iter(values.values()), []))
        return [{name: column[k] for name, column in values.items()} for k in range(count)]

    def __enter__(self) -> DataLoader:
        return self


def _draw(buffer: list[dict[str, Any]], rng: np.random.Generator) -> dict[str, Any]:
    """A row taken at random from ``buffer`` (the last one fills its place)."""
    position = int(rng.integers(len(buffer)))
    buffer[position], buffer[-1] = buffer[-1], buffer[position]
    return buffer.pop()


def promoted(name: str, value: Any) -> Any:
    """``value`` in a type torch holds, as Petastorm promotes it.

    Raises:
        ConfigurationError: A null.
    """
    if value is None or (
        isinstance(value, np.ndarray) and value.dtype == object and any(v is None for v in value)
    ):
        raise ConfigurationError(
            f"field {name!r} holds a null: torch has none; leave such rows out with a predicate "
            f"or filters"
        )
    if isinstance(value, np.ndarray) and value.dtype in _WIDENED:
        return value.astype(_WIDENED[value.dtype])
    if isinstance(value, np.bool_):
        return np.uint8(value)
    return value
