"""``StreamingDataLoader``: torch's DataLoader that can save and resume its place mid-epoch."""

from __future__ import annotations

import inspect
import multiprocessing
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from shardstream._torch import as_tensor, default_collate, default_convert, require_torch
from shardstream.cache.listing_check import hold_cold_listings
from shardstream.dataset.streaming import StreamingDataset, reads_through_getitem
from shardstream.errors import ConfigurationError
from shardstream.loader.batch_count import Counted, CountingCollate, samples_in
from shardstream.loader.direct_batches import direct_batches
from shardstream.loader.frozen_heap import FrozenHeap
from shardstream.loader.result_pipe import widen_result_pipe
from shardstream.loader.worker_watchdog import EndWithMain, MainProcess
from shardstream.pipeline.column_batch import BatchRefs, ColumnBatch
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage.obstore_client import leave_to_forked_children

__all__ = ["StreamingDataLoader"]

if TYPE_CHECKING:  # the real base class for the type checker; torch is loaded lazily at run time
    from torch.utils.data import DataLoader
else:
    DataLoader = require_torch().utils.data.DataLoader


class StreamingDataLoader(DataLoader[Any]):
    """A ``torch.utils.data.DataLoader`` with ``state_dict()`` and ``load_state_dict()``.

    Takes the DataLoader's arguments. Only an epoch's last batch may be short, on every rank
    alike; ``drop_last=True`` drops it, as torch's DataLoader would. With workers and torch's
    default collation, each worker may have ``prefetch_factor`` batches ahead (the read
    policy's, 4, unless given; torch's default is 2), which costs little here: large values
    wait as in-memory files or sample ids. The dataset is used through its public batch
    protocol only (:attr:`StreamingDataset.batch_mode`, :meth:`StreamingDataset.iter_batches`,
    :meth:`StreamingDataset.read_batch`), and its workers are told the rank process they
    read for (:attr:`StreamingDataset.rank_process`). It counts the samples it has yielded
    this epoch as the dataset handed them over, whatever ``collate_fn`` makes of them
    (:mod:`shardstream.loader.batch_count`); its state dict turns that into samples over every
    rank (each rank yields the same number), so the job resumes exactly where it stopped, on any
    number of nodes, ranks or workers, at the cost of computing one epoch plan: nothing is
    replayed. The methods follow torchdata's ``StatefulDataLoader`` protocol, so Lightning and
    other trainers that look for them save and restore the loader's place in their
    checkpoints. Its workers end within a second of the main process's death (``kill -9``
    included), whatever the start method, releasing the cache locks they held.

    Example:
        dataset = StreamingDataset(remote="s3://bucket/my-ds", batch_size=32, shuffle=True)
        loader = StreamingDataLoader(dataset, batch_size=32, num_workers=4)
        state = loader.state_dict()  # save it in the checkpoint
        loader.load_state_dict(state)  # after a restart; takes effect at the next iter()
    """

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        kwargs, args = _by_name(args, kwargs), ()  # ``(ds, 32)`` reads as ``batch_size=32``
        self._device_batches = _collates_device_batches(dataset, args, kwargs)
        self._one_by_one = _yields_samples_one_by_one(dataset, args, kwargs)
        if self._device_batches:
            # The dataset yields whole device batches as columns (decoded shard by shard, no
            # dict per sample), which cross from workers as plain lists; this loader collates
            # each column as default_collate would. Same batches, values and types as
            # collating samples one by one, without tensors through shared memory per batch.
            batch_size = kwargs.pop("batch_size", 1)
            if dataset.batch_size != batch_size:
                raise ConfigurationError(
                    f"the DataLoader's batch_size ({batch_size}) differs from the dataset's "
                    f"({dataset.batch_size}): pass the same per-device batch size to both"
                )
            drop_last = bool(kwargs.pop("drop_last", False))  # only an epoch's last batch is short
            if kwargs.get("num_workers") and kwargs.get("prefetch_factor") is None:
                policy = dataset.read_policy or ReadPolicy()
                kwargs["prefetch_factor"] = policy.prefetch_factor
            super().__init__(dataset, batch_size=None, collate_fn=_pass_through, **kwargs)
            # As the user set them, for len(); this loader drops the short batch itself.
            object.__setattr__(self, "batch_size", batch_size)
            object.__setattr__(self, "drop_last", drop_last)
            self._drop_short, self._device_batch_size = drop_last, int(batch_size)
        elif self._one_by_one:
            # Batched by device batch in the workers, yielded item by item (batch_count).
            del kwargs["batch_size"]
            collate_fn = kwargs.pop("collate_fn", None) or default_convert()
            super().__init__(
                dataset, batch_size=dataset.batch_size, collate_fn=collate_fn, **kwargs
            )
            object.__setattr__(self, "batch_size", None)  # as the user set it, for len()
            self._drop_short, self._device_batch_size = False, 0
        else:
            super().__init__(dataset, *args, **kwargs)
            self._drop_short, self._device_batch_size = False, 0  # torch drops short batches
        policy = getattr(dataset, "read_policy", None)
        self._pipe_bytes = (
            policy if isinstance(policy, ReadPolicy) else ReadPolicy()
        ).result_pipe_bytes
        self.num_samples_yielded = 0
        self._heap = FrozenHeap()  # frozen while workers fork (one for the loader's life)
        self._leave_obstore_to_workers()  # before anything reads (len() may load the index)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        dataset = self.dataset
        forks = self._forks_workers()
        # Forked workers read the first batch: a cold start's listing here waits for it.
        given = getattr(dataset, "read_policy", None)
        policy = given if isinstance(given, ReadPolicy) else ReadPolicy()
        release_listings = hold_cold_listings(policy.range_whole_bytes) if forks else _nothing
        # Workers forked anew each epoch inherit the shards this process holds for them.
        holds = policy.inherits(forks=forks, persistent=self.persistent_workers)
        frozen = self._heap
        try:
            if isinstance(dataset, StreamingDataset):
                self._leave_obstore_to_workers()
                dataset.prepare()  # indexes load once, here, and the workers inherit them
                if forks:  # they inherit what the files hold now
                    dataset.before_fork()
                if forks and not _ranges_small_shards(dataset, policy):
                    release_listings()  # its shards land whole first: listed before, as ever
                dataset.batch_mode = self._device_batches
                dataset.rank_process = os.getpid()  # whose run state the workers share
            self.num_samples_yielded = 0
            collate = default_collate() if self._device_batches else None
            to_tensor = as_tensor() if self._device_batches else None
            if forks:  # no full collection of this heap in the workers (frozen_heap)
                frozen.freeze()
            iterator = self._workers_ending_with_this_process()
            widen_result_pipe(
                iterator, self._pipe_bytes
            )  # a whole batch crosses from a worker in one write
            direct = direct_batches(iterator, _pass_through) if self._device_batches else None
            for batch in iterator if direct is None else direct:
                # The first batch is in: this process collects and lists as before.
                frozen.thaw()
                release_listings()
                # Counted as batch_count says: the samples handed over, not the collated shape.
                if isinstance(batch, Counted) and batch.items:  # no batching: sample by sample
                    for item in batch.batch:
                        self.num_samples_yielded += 1
                        yield item
                    continue
                if isinstance(batch, Counted):  # collated by torch, in the worker
                    samples, batch = batch.samples, batch.batch
                else:  # a device batch, collated here
                    samples = samples_in(batch)
                    if self._drop_short and samples < self._device_batch_size:
                        continue  # torch's drop_last: the epoch's short last batch
                    if isinstance(batch, BatchRefs):  # a worker's batch of large samples
                        assert isinstance(dataset, StreamingDataset)
                        batch = dataset.read_batch(batch)
                    if collate is not None:  # collated here, not in the worker: plain lists
                        batch = (
                            batch.collate(collate, to_tensor)
                            if isinstance(batch, ColumnBatch)
                            else collate(batch)
                        )
                self.num_samples_yielded += samples
                yield batch
            if holds and isinstance(dataset, StreamingDataset):
                dataset.hold_for_workers()  # after the epoch: its first batch waits for none
        finally:
            frozen.thaw()
            release_listings()
            if isinstance(dataset, StreamingDataset):
                dataset.batch_mode = False

    def _leave_obstore_to_workers(self) -> None:
        """Where workers are forked, this process sends no request through obstore.

        Workers forked after obstore's requests here could not use it (its runtime does not
        survive ``fork()``) and would read through the other client, at several times its
        CPU a request. This process makes its few requests (the index, the listing) through
        the other client instead, and the workers, who make the rest, through obstore.
        """
        if self._forks_workers() and isinstance(self.dataset, StreamingDataset):
            leave_to_forked_children()

    def _forks_workers(self) -> bool:
        """Whether this loader's workers are forked from this process."""
        return bool(self.num_workers) and _start_method(self.multiprocessing_context) == "fork"

    def _workers_ending_with_this_process(self) -> Iterator[Any]:
        """Torch's iterator, its workers started with a watchdog that ends them with us.

        Where torch collates, its batches come as :class:`Counted` (the user's collate_fn
        wrapped for the time it takes torch to pass it to the iterator and its workers).
        """
        init_fn, collate_fn = self.worker_init_fn, self.collate_fn
        self.worker_init_fn = EndWithMain(MainProcess.current(), init_fn)
        if not self._device_batches:  # torch collates: the count travels with each batch
            self.collate_fn = CountingCollate(
                collate_fn, batched=self._auto_collation, per_sample=self._one_by_one
            )
        try:
            return super().__iter__()
        finally:
            self.worker_init_fn, self.collate_fn = init_fn, collate_fn

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state after the samples this loader yielded, over every rank.

        Raises:
            ConfigurationError: The dataset is not a :class:`StreamingDataset`.
        """
        dataset = self._streaming_dataset()
        ranks = dataset.topology.world_size  # data-parallel ranks, replication applied
        return dataset.state_dict(self.num_samples_yielded * ranks, from_beginning=False)

    def load_state_dict(self, obj: Mapping[str, Any], *, strict: bool = True) -> None:
        """Resume from ``obj`` at the next ``iter(loader)``.

        ``strict=False`` loads a state saved on other data (see
        :meth:`StreamingDataset.load_state_dict`). Persistent workers are ended: they hold
        copies of the dataset made before the state's settings replaced its own, and the next
        ``iter()`` starts them again.
        """
        self._streaming_dataset().load_state_dict(obj, strict=strict)
        iterator = self._iterator
        if iterator is not None:  # only persistent workers outlive an iteration
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self._iterator = None

    def _streaming_dataset(self) -> StreamingDataset:
        if not isinstance(self.dataset, StreamingDataset):
            raise ConfigurationError(
                f"state_dict needs a StreamingDataset; this loader reads a "
                f"{type(self.dataset).__name__}"
            )
        return self.dataset


def _start_method(context: Any) -> str:
    """How a DataLoader with ``multiprocessing_context`` starts its workers."""
    if isinstance(context, str):
        return context
    if context is not None:
        return str(context.get_start_method())
    # Not fixed yet: the platform's default, without fixing it (as get_start_method() would).
    method = multiprocessing.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


def _by_name(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader's arguments after ``dataset``, all by name, as torch would bind them."""
    if not args:
        return kwargs
    bound = inspect.signature(DataLoader.__init__).bind_partial(None, None, *args, **kwargs)
    named = dict(bound.arguments)
    del named["self"], named["dataset"]
    return named


def _collates_device_batches(dataset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the dataset can hand over whole batches: default collation, nothing custom."""
    return (
        isinstance(dataset, StreamingDataset)
        and reads_through_getitem(dataset) is None  # a subclass's samples are collated as usual
        and not args
        and kwargs.get("batch_size", 1) is not None
        and kwargs.get("collate_fn") is None
        and kwargs.get("sampler") is None
        and kwargs.get("batch_sampler") is None
        and not kwargs.get("shuffle")
        and not kwargs.get("pin_memory")  # pinning happens before the loader would collate
    )


def _yields_samples_one_by_one(dataset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the user turned batching off (``batch_size=None``) on a dataset that plans it."""
    return (
        isinstance(dataset, StreamingDataset)
        and dataset.batch_size is not None
        and not args
        and "batch_size" in kwargs
        and kwargs["batch_size"] is None
        and not kwargs.get("drop_last")  # torch refuses it without batching: let it say so
        and kwargs.get("sampler") is None
        and kwargs.get("batch_sampler") is None
    )


def _ranges_small_shards(dataset: StreamingDataset, policy: ReadPolicy) -> bool:
    """Whether the workers' first batches read small shards by range (none lands whole)."""
    return policy.ranges_small_shards(dataset.batch_size or 1, dataset.num_shards)


def _nothing() -> None:
    """Nothing to release."""


def _pass_through(batch: Any) -> Any:
    """The collate function of a loader whose dataset collates its own batches."""
    return batch
