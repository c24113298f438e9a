"""How many samples a batch of a ``StreamingDataLoader`` holds: what the dataset handed over.

The rule: a loader's place in the epoch counts the samples the dataset handed over for each
batch it yielded (the plan's sample ids), never the shape of what ``collate_fn`` made of
them. A collated batch cannot be measured: a dict whose first column is a JSON list, a list
of per-sample dicts, a scalar (a loss), any object; ``len()`` of it would resume in the wrong
place. So the count is taken where the samples are still countable and travels with the
batch:

* a device batch the dataset hands over whole (:class:`ColumnBatch`, a list of sample dicts,
  :class:`BatchRefs`) holds one row per sample id, counted before the loader collates it;
* otherwise torch collates in the worker: :class:`CountingCollate` wraps ``collate_fn`` and
  returns the batch with the number of samples it was given, as a :class:`Counted` that
  crosses from the worker with the batch and is unwrapped by the loader. The user gets
  exactly what ``collate_fn`` returned.
* Without batching (``batch_size=None``) each item is one sample. Torch would take one item
  from each worker in turn, so that the samples received would not be the epoch's first ones
  (no place in the epoch could name them); instead a worker hands over a whole device batch
  of items, each made by ``collate_fn`` from its sample, and the loader yields them one by
  one: the samples come in the epoch's order, and every item is a place to resume at.

A batch the loader drops (``drop_last``) is not counted: its samples were not received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardstream._torch import pin_memory
from shardstream.pipeline.column_batch import BatchRefs, ColumnBatch

__all__ = ["Counted", "CountingCollate", "samples_in"]


class Counted:
    """A batch as ``collate_fn`` made it, and the number of samples it was made from.

    Attributes:
        samples: Samples the dataset handed over for the batch.
        batch: What ``collate_fn`` returned, untouched; with ``items``, the list of what it
            returned for each sample.
        items: ``batch`` is a list of items of one sample each, to be yielded one by one.
    """

    __slots__ = ("batch", "items", "samples")

    def __init__(self, samples: int, batch: Any, items: bool = False) -> None:
        self.samples = samples
        self.batch = batch
        self.items = items

    def pin_memory(self) -> Counted:
        """The batch pinned as torch's DataLoader pins any batch (its pin-memory thread)."""
        return Counted(self.samples, pin_memory(self.batch), self.items)

    def __reduce__(self) -> tuple[Any, ...]:
        return Counted, (self.samples, self.batch, self.items)


class CountingCollate:
    """``collate_fn`` made to return a :class:`Counted` of its batch.

    Args:
        collate_fn: The loader's collate function (torch's default, or the user's).
        batched: Torch's fetcher gives it the list of samples it took for one batch; else
            one sample at a time (a dataset torch does not batch).
        per_sample: Of a list of samples, ``collate_fn`` makes one item each (the user asked
            for no batching): the batch is the list of the items.
    """

    def __init__(
        self, collate_fn: Callable[[Any], Any], *, batched: bool, per_sample: bool = False
    ) -> None:
        self.collate_fn = collate_fn
        self.batched = batched
        self.per_sample = per_sample

    def __call__(self, data: Any) -> Counted:
        """``collate_fn``'s batch of ``data`` and the samples it was made from."""
        if not self.batched:
            return Counted(1, self.collate_fn(data))
        if self.per_sample:
            return Counted(len(data), [self.collate_fn(one) for one in data], items=True)
        return Counted(len(data), self.collate_fn(data))


def samples_in(batch: ColumnBatch | BatchRefs | list[Any]) -> int:
    """Samples in a device batch the dataset handed over: one per row, or per sample id."""
    if isinstance(batch, BatchRefs):
        return int(batch.ids.size)
    return len(batch)
