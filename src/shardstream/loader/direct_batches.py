"""A loader's device batches without workers: the dataset's own iterator, read directly.

With no workers, torch's single-process iterator calls, for each batch, its sampler (a
constant ``None`` without batching), the dataset's iterator, the collate function (here
:func:`~shardstream.loader.dataloader.StreamingDataLoader`'s pass-through) and a profiler
range: a fixed cost per batch the size of a table's batch's own reading. Torch's iterator is
still made, as ever (its seed drawn, its warnings given, the dataset's iterator made), and
its dataset's iterator is then read here, doing what its ``__next__`` would that shows: the
profiler's range while a profiler runs, and the warning when more batches come than
``len(loader)`` said. Where torch's iterator is not that one (other torch versions, pinned
memory, a collate function set since), its own ``__next__`` is used.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from shardstream._torch import require_torch

__all__ = ["direct_batches"]

_END = object()


def direct_batches(iterator: Any, pass_through: Callable[[Any], Any]) -> Iterator[Any] | None:
    """The batches of torch's single-process ``iterator``, read from its dataset's iterator.

    ``None`` where that would not do what the iterator's ``__next__`` does: it is not torch's
    single-process iterator over an iterable dataset, it pins memory, or its collate function
    is not ``pass_through``.
    """
    fetcher = getattr(iterator, "_dataset_fetcher", None)
    inner = getattr(fetcher, "dataset_iter", None)
    profiling = getattr(require_torch().autograd, "_profiler_enabled", None)
    if (
        profiling is None
        or type(iterator).__name__ != "_SingleProcessDataLoaderIter"
        or type(fetcher).__name__ != "_IterableDatasetFetcher"
        or inner is None
        or getattr(fetcher, "auto_collation", True)
        or getattr(iterator, "_pin_memory", True)
        or getattr(iterator, "_collate_fn", None) is not pass_through
        or not hasattr(iterator, "_IterableDataset_len_called")
    ):
        return None
    return _batches(iterator, inner, profiling)


def _batches(iterator: Any, inner: Iterator[Any], profiling: Callable[[], bool]) -> Iterator[Any]:
    record = require_torch().autograd.profiler.record_function
    name = getattr(iterator, "_profile_name", "enumerate(DataLoader)")
    told = iterator._IterableDataset_len_called  # len(loader), if it was asked for
    yielded = 0
    while True:
        if profiling():
            with record(name):
                batch = next(inner, _END)
        else:
            batch = next(inner, _END)
        if batch is _END:
            return
        yielded += 1
        if told is not None and yielded > told:
            warnings.warn(
                f"Length of IterableDataset {iterator._dataset} was reported to be {told}"
                f"(when accessing len(dataloader)), but {yielded} samples have been fetched. ",
                stacklevel=2,
            )
        yield batch
