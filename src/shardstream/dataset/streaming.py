"""``StreamingDataset``: MDS shards from local disk or object stores, deterministically shuffled.

A drop-in for mosaicml-streaming's ``StreamingDataset``: the same arguments with the same
meaning, the same state dict. Under the hood:

* Each DataLoader worker computes only its own samples of the epoch
  (:class:`~shardstream.sampling.EpochPlan`); nothing is shared between processes at epoch
  boundaries, and nobody waits for anybody (no barrier, so no epoch-boundary hangs).
* Shards are fetched into a node-local cache shared by every rank and worker through files and
  ``flock`` alone (:mod:`shardstream.cache`): no named shared memory, nothing to clean after a
  crash, and two jobs may share a cache folder.
* The job's shape comes from explicit arguments first, then torch.distributed, then the
  launcher's variables; it is never guessed silently, and no process group is created.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from shardstream._torch import require_torch, worker_info
from shardstream.cache import EpochStart
from shardstream.cache.layout import node_state_folder
from shardstream.dataset.epoch_plans import epoch_plan, log_layout
from shardstream.dataset.indexing import checked_id, select
from shardstream.dataset.introspection import Introspection
from shardstream.dataset.prepared import PreparedDataset
from shardstream.dataset.resume_point import Position, ResumePoint
from shardstream.dataset.resume_state import restore, write_state
from shardstream.dataset.run_progress import RunProgress, runs_folder
from shardstream.dataset.settings import DatasetSettings, Setting
from shardstream.dataset.stream import Stream
from shardstream.errors import ConfigurationError
from shardstream.pipeline.column_batch import BatchRefs, ColumnBatch
from shardstream.pipeline.policy import ReadPolicy
from shardstream.pipeline.reader import Batch, SampleReader
from shardstream.pipeline.stage import StageState
from shardstream.sampling import EpochPlan, ShuffleConfig, Topology

__all__ = ["StreamingDataset", "reads_through_getitem"]

logger = logging.getLogger(__name__)

if TYPE_CHECKING:  # the real base class for the type checker; torch is loaded lazily at run time
    from torch.utils.data import IterableDataset
else:
    IterableDataset = require_torch().utils.data.IterableDataset


class StreamingDataset(Introspection, IterableDataset[dict[str, Any]]):
    """An iterable dataset over one or more MDS streams, for torch's DataLoader.

    Arguments are those of mosaicml-streaming's ``StreamingDataset`` (see the docs for where
    the meaning differs on purpose), plus an explicit topology.

    Args:
        streams: Several :class:`Stream` s to mix; excludes ``remote``/``local``.
        remote: The dataset's URL or path, for a single stream.
        local: Its node-local cache folder, new or one shardstream made (else refused; default:
            one per remote, per user). Without ``remote`` (or given ``remote``'s path), the
            dataset itself, read in place and never written to: its decompressed shards and
            their locks go to a folder of its own under ``SHARDSTREAM_CACHE_DIR``.
        split: A sub-folder holding the split's ``index.json``.
        download_retry: Retries after a failed download (``2``: up to three attempts).
        download_timeout: Seconds allowed for each request to the remote (the index check at
            start-up, a listing as a whole, each download request), first byte to last: a
            server that stops answering, or sends slowly, fails it within ``download_timeout *
            (download_retry + 1)`` seconds plus the backoff between attempts (at most ``0.5 *
            (2**download_retry - 1)`` seconds).
        validate_hash: Check shard files against this digest from the index.
        keep_zip: Keep compressed shards after decompressing them (a dataset read in place
            always keeps them).
        epoch_size: Samples per epoch (int or ``'100k'``); default: the streams' weights.
        predownload: Samples to fetch ahead of the reader, per worker (default
            ``8 * batch_size``, or 64).
        cache_limit: Most bytes (int or ``'10gb'``) the node's cache may hold; least recently
            used shards that came from a remote are evicted. Local-only data never is (the
            copies decompressed from its compressed shards count, and are evicted).
            Below a node's share of the dataset, evicted shards are downloaded again: pair
            such a limit with ``py1s``, or a ``shuffle_block_size`` whose shards fit in it
            (``py1e`` over a large block draws each batch from all of the node's shards).
        sampling_method: ``'balanced'`` (fractional weights drawn anew each epoch) or
            ``'fixed'``.
        sampling_granularity: Samples taken from a shard at a time for fractional weights.
        partition_algo: ``'orig'`` or ``'relaxed'``; both name one partition that resumes on
            any node count.
        num_canonical_nodes: The canonical nodes of the epoch order (default: the number of
            physical nodes, 64 times that for ``py1s``/``py2s``; kept in the state dict).
        batch_size: Samples per device batch; the DataLoader's ``batch_size``. Required to
            iterate.
        shuffle: Shuffle the samples.
        shuffle_algo: ``naive``, ``py1b``, ``py1br``, ``py1e`` (default), ``py1s``, ``py2s``.
        shuffle_seed: The run's seed.
        shuffle_block_size: The shuffle's block size (default: from the canonical nodes).
        batching_method: ``random``, ``stratified``, ``per_stream`` or ``device_per_stream``.
        allow_unsafe_types: Allow ``pkl`` columns, which can run code when read.
        replication: Groups of this many consecutive ranks read the same samples.
        rank: This process's global rank (default: torch.distributed, then ``RANK``).
        world_size: Ranks in the job (default: torch.distributed, then ``WORLD_SIZE``).
        ranks_per_node: Ranks on each node (default: ``LOCAL_WORLD_SIZE``).
        topology: The job's shape and this rank's place, used as given: torch.distributed
            and the launcher's variables are not read (excludes ``rank``, ``world_size``
            and ``ranks_per_node``).
        download_concurrency: Download slots of a node, over all its processes: a shard
            fetched as byte ranges fills one, up to this many shards that fit one request
            share one (``DownloadOptions.slot_share``); copies from a local disk take none.
        zero_copy: Return ``bytes`` columns as read-only memoryviews of the mapped shard.
        columns: The columns to read from Parquet streams (``None``: all; see ``Stream``).
        format: The one stream's ``format`` (``None``: detected); see ``Stream``.
        version: The one stream's Delta ``version`` (``None``: the latest); state dicts
            record the version read, and resuming reads it again.
        read_policy: How shards are read and batches handed over
            (:class:`~shardstream.pipeline.policy.ReadPolicy`; default: built from these
            settings). Every policy yields the same samples in the same order; its
            ``zero_copy`` is this dataset's.
        stream_name: Without ``streams``, the registered ``Stream`` class that builds the one
            stream (see :class:`~shardstream.dataset.stream_registry.StreamRegistry`).
        stream_config: Further arguments of that class's constructor.

    Attributes:
        settings: The arguments, checked and frozen (a ``DatasetSettings``). Each argument is
            also an attribute of the same name (``epoch_size``'s count is
            ``requested_epoch_size``), read from the settings; setting one replaces them,
            checked again.
        batch_mode: Iterating yields whole device batches (:meth:`iter_batches`) instead of
            samples. :class:`~shardstream.StreamingDataLoader` sets it for its iterations.

    Raises:
        ConfigurationError: An argument is invalid; the message says which and why.

    Example:
        ds = StreamingDataset(remote="s3://bucket/my-ds", split="train", batch_size=32,
                              shuffle=True)
        loader = StreamingDataLoader(ds, batch_size=32, num_workers=4)
        for batch in loader:
            ...
    """

    def __init__(
        self,
        *,
        streams: Sequence[Stream] | None = None,
        remote: str | os.PathLike[str] | None = None,
        local: str | os.PathLike[str] | None = None,
        split: str | None = None,
        download_retry: int = 2,
        download_timeout: float = 60,
        validate_hash: str | None = None,
        keep_zip: bool = False,
        epoch_size: int | str | None = None,
        predownload: int | None = None,
        cache_limit: int | str | None = None,
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        partition_algo: str = "relaxed",
        num_canonical_nodes: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        shuffle_algo: str = "py1e",
        shuffle_seed: int = 9176,
        shuffle_block_size: int | None = None,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        ranks_per_node: int | None = None,
        topology: Topology | None = None,
        download_concurrency: int = 8,
        zero_copy: bool = False,
        columns: Sequence[str] | None = None,
        read_policy: ReadPolicy | None = None,
        stream_name: str = "stream",
        stream_config: Mapping[str, Any] | None = None,
        format: str | None = None,
        version: int | datetime | str | None = None,
    ) -> None:
        self.settings = DatasetSettings.of(
            streams=streams, remote=remote, local=local, split=split,
            download_retry=download_retry, download_timeout=download_timeout,
            validate_hash=validate_hash, keep_zip=keep_zip, epoch_size=epoch_size,
            predownload=predownload, cache_limit=cache_limit, sampling_method=sampling_method,
            sampling_granularity=sampling_granularity, partition_algo=partition_algo,
            num_canonical_nodes=num_canonical_nodes, batch_size=batch_size, shuffle=shuffle,
            shuffle_algo=shuffle_algo, shuffle_seed=shuffle_seed,
            shuffle_block_size=shuffle_block_size, batching_method=batching_method,
            allow_unsafe_types=allow_unsafe_types, replication=replication, rank=rank,
            world_size=world_size, ranks_per_node=ranks_per_node, topology=topology,
            download_concurrency=download_concurrency, zero_copy=zero_copy, columns=columns,
            read_policy=read_policy, stream_name=stream_name, stream_config=stream_config,
            format=format, version=version,
        )  # fmt: skip
        self._loaded: tuple[DatasetSettings, PreparedDataset] | None = None
        self._progress = RunProgress()
        self._initial_nodes: int | None = None  # the physical nodes of a loaded state's run
        self.batch_mode = False

    streams = Setting[list[Stream]](list)
    split = Setting[str | None]()
    download_retry = Setting[int]()
    download_timeout = Setting[float]()
    validate_hash = Setting[str | None]()
    keep_zip = Setting[bool]()
    requested_epoch_size = Setting[int | None]()
    predownload = Setting[int | None]()
    cache_limit = Setting[int | None]()
    sampling_method = Setting[str]()
    sampling_granularity = Setting[int]()
    partition_algo = Setting[str]()
    num_canonical_nodes = Setting[int | None]()
    batch_size = Setting[int | None]()
    shuffle = Setting[bool]()
    shuffle_algo = Setting[str]()
    shuffle_seed = Setting[int]()
    shuffle_block_size = Setting[int | None]()
    batching_method = Setting[str]()
    allow_unsafe_types = Setting[bool]()
    replication = Setting[int | None]()
    download_concurrency = Setting[int]()
    zero_copy = Setting[bool]()
    columns = Setting[list[str] | None](lambda columns: None if columns is None else list(columns))
    read_policy = Setting[ReadPolicy | None]()
    table_pins = Setting[dict[int, int]](dict)

    @property
    def shuffle_config(self) -> ShuffleConfig:
        """The shuffle of the settings."""
        return self.settings.shuffle_config

    @property
    def rank_process(self) -> int | None:
        """The process id of the rank process whose DataLoader workers iterate this dataset.

        Its run state is kept under that id. Set by :class:`~shardstream.StreamingDataLoader`
        before its workers start; otherwise (``None``) the process that sent the dataset to a
        worker, or a forked worker's parent.
        """
        return self._progress.rank_process

    @rank_process.setter
    def rank_process(self, pid: int | None) -> None:
        self._progress.rank_process = pid

    # --- sizes (more in Introspection) ----------------------------------------------------------

    def __len__(self) -> int:
        """Samples each rank yields in a whole epoch: the epoch split over the ranks, rounded up.

        The reference's meaning. With ``random`` batching it is exact: a rank whose share is
        short by one sample gets a repeat (see :class:`~shardstream.sampling.EpochPartition`).
        """
        return math.ceil(self.epoch_size / self.topology.world_size)

    # --- random access --------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        """The sample with dataset-wide id ``key`` (unshuffled), fetching its shard.

        NumPy-style keys give lists: ``ds[0:3]``, ``ds[[1, 2]]``, ``ds[np.arange(3)]``
        (nested keys, nested lists). Each sample is read through :meth:`get_item`.

        Raises:
            IndexError: An id is out of range.
            SampleKeyError: ``key`` is not an id, a slice or a sequence of ids.
        """
        if type(key) is int:  # one id, the usual key: no parsing
            return self.get_item(key)
        return select(key, self.num_samples, self.get_item)

    def get_item(self, sample_id: int) -> dict[str, Any]:
        """The sample with dataset-wide id ``sample_id`` (negative counts from the end)."""
        prepared = self._prepare()
        return prepared.sample_reader().get(checked_id(sample_id, prepared.num_samples))

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield this worker's samples of the next epoch (or of the loaded resume point).

        In :attr:`batch_mode`, its device batches instead (:meth:`iter_batches`).
        """
        if self.batch_mode:
            yield from cast(Iterator[dict[str, Any]], self.iter_batches())
            return
        reader, plan, state, predownload = self._begin_epoch()
        custom = reads_through_getitem(self)
        if custom is not None:  # a subclass's __getitem__/get_item makes each sample
            ids = reader.ids(plan.ids, plan.batch_size, predownload=predownload, state=state)
            for sample_id in ids:
                yield custom(sample_id)
        else:
            yield from reader.samples(
                plan.ids, plan.batch_size, predownload=predownload, state=state
            )

    def iter_batches(self) -> Iterator[Batch]:
        """Yield this worker's device batches of the next epoch, for a loader to collate.

        Each is a :class:`~shardstream.pipeline.column_batch.ColumnBatch` (columns, in batch
        order), a list of sample dicts (its shards disagree on the columns), or, in a
        DataLoader worker, possibly a :class:`~shardstream.pipeline.column_batch.BatchRefs`
        whose values the loader's process reads itself (:meth:`read_batch`). Batches that
        leave a worker are ready to be pickled (no views of shards). A subclass that
        overrides ``__getitem__`` or ``get_item`` has no batch mode: iterate its samples.
        """
        if reads_through_getitem(self) is not None:
            raise ConfigurationError(
                f"{type(self).__name__} overrides __getitem__/get_item, so its samples are made "
                "one by one: iterate the dataset (batch_mode=False), not iter_batches()"
            )
        reader, plan, state, predownload = self._begin_epoch()
        in_worker = worker_info() is not None
        yield from reader.batches(
            plan.ids, plan.batch_size, predownload=predownload, for_worker=in_worker, state=state
        )

    def read_batch(self, batch: BatchRefs) -> ColumnBatch | list[dict[str, Any]]:
        """The values of a batch a worker handed over as its sample ids, read in this process."""
        return self._reader().read_batch(batch.ids)

    def _begin_epoch(self) -> tuple[SampleReader, EpochPlan, StageState, int]:
        """This process's reader, its plan of the epoch it starts now, and its look-ahead.

        The plan is the epoch's as a fresh epoch lays it out; the stage state says where in
        it this process's pipeline starts (``reset(state)``): a resumed epoch's first batch
        not read (:class:`~shardstream.dataset.resume_point.ResumePoint`).
        """
        prepared, settings = self._prepare(), self.settings
        if settings.batch_size is None:
            raise ConfigurationError(
                "StreamingDataset needs batch_size (the per-device batch size, the same as the "
                "DataLoader's) to lay the epoch out over ranks and workers"
            )
        ranks = settings.ranks()
        info = worker_info()
        topology = ranks if info is None else ranks.with_worker(info[1], info[0])
        prepared.cache.check_limit(ranks.ranks_per_node * (1 if info is None else info[1]))
        start = self._progress.claim(info, self._runs_folder)
        if start.drop_first >= prepared.epoch_size > 0:  # resumed at the very end
            start = EpochStart(start.epoch + 1, 0)
        point = ResumePoint.of(
            start, settings.batch_size * ranks.world_size, settings.batching_method
        )
        worker, state = point.for_worker(topology.worker, topology.workers_per_rank)
        plan = self.plan(point.layout, topology.with_worker(topology.workers_per_rank, worker))
        log_layout(
            plan, start.epoch, topology, settings.batching_method,
            lambda note, level: self._progress.once(info, note, level, self._runs_folder),
        )  # fmt: skip
        return prepared.sample_reader(), plan, state, settings.look_ahead()

    def plan(self, start: EpochStart, topology: Topology) -> EpochPlan:
        """The samples ``topology``'s worker reads in the epoch ``start`` names."""
        return epoch_plan(
            self.settings, self._prepare(), start, topology,
            initial_nodes=self._initial_nodes, state_folder=self._state_folder(),
        )  # fmt: skip

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` (as samplers' ``set_epoch`` does)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ConfigurationError(f"epoch must be an integer >= 0, got {epoch!r}")
        self._progress.set_epoch(epoch, self._runs_folder)

    # --- resumption -----------------------------------------------------------------------------

    def state_dict(self, num_samples: int, from_beginning: bool) -> dict[str, Any]:
        """Where the job stands, for ``load_state_dict`` on any topology.

        The reference's keys, plus the data's fingerprint and the order's settings (ignored by it).

        Args:
            num_samples: Samples consumed in this epoch over all ranks, since this run started
                (or since the epoch began, with ``from_beginning``).
            from_beginning: ``num_samples`` counts from the epoch's start, not from the
                resume point this run started at.
        """
        current = self._progress.current_start(self._runs_folder)
        sample_in_epoch = num_samples if from_beginning else current.drop_first + num_samples
        return write_state(
            Position(current.epoch, sample_in_epoch), self.settings, self._prepare(),
            topology=self.topology, initial_nodes=self._initial_nodes,
        )  # fmt: skip

    def load_state_dict(self, obj: Mapping[str, Any], *, strict: bool = True) -> None:
        """Resume where a state dict says, at the next iteration (on any topology).

        Each value is checked against this dataset first. The state's settings of the order
        (seed, shuffle, sampling: :mod:`~shardstream.dataset.resume_state`) replace the
        dataset's; one warning names each value replaced.

        Args:
            obj: What :meth:`state_dict` returned (or the reference's state dict). The
                reference's state from before its first epoch (``epoch`` -1) resumes nothing,
                as there.
            strict: Refuse a state saved on other data (its fingerprint differs); ``False``
                loads it anyway, with a warning.

        Raises:
            ConfigurationError: The state lacks a key, holds a bad value, or was saved on other
                data or other stream weights; the message names the key, or both datasets.
        """
        if obj.get("epoch") == -1 and "sample_in_epoch" in obj:
            # The reference saves epoch -1 before its first epoch and loads it as nothing to
            # resume; a job checkpointed before training must start afresh here too.
            logger.info("the state dict was saved before any epoch began: nothing to resume")
            return
        restored = restore(obj, self.settings, self._load, strict=strict)
        self.settings = restored.settings
        self._prepare()  # the epoch's draw over the streams: seeded, of its size
        self._initial_nodes = restored.initial_physical_nodes
        position = restored.position
        self._progress.resume_at(
            EpochStart(position.epoch, position.sample_in_epoch), self._runs_folder
        )

    # --- internals ------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Fetch and load every stream's index now (else the first use does it)."""
        self._prepare()

    def hold_for_workers(self) -> None:
        """Read now, and keep in this process, what forked DataLoader workers each read whole.

        The read policy's choice (``ReadPolicy.inherit_whole``): the shards of a small dataset
        read in place. Workers forked from this process afterwards inherit those bytes
        instead of each reading them. :class:`~shardstream.StreamingDataLoader` calls it as
        an epoch ends, where its workers are forked anew each epoch.
        """
        self._reader().hold_for_workers()

    def before_fork(self) -> None:
        """Let go of the shards held here whose files changed since they were read.

        :class:`~shardstream.StreamingDataLoader` calls it before its workers fork: they read
        such a shard themselves, as the file is then, rather than inherit what it was.
        """
        reader = self._prepare().reader
        if reader is not None:
            reader.before_fork()

    def _prepare(self) -> PreparedDataset:
        loaded, settings = self._loaded, self.settings
        if loaded is not None and loaded[0] is settings:  # the usual case: once per sample read
            return loaded[1]
        return self._load(settings)

    def _load(self, settings: DatasetSettings) -> PreparedDataset:
        """The data ``settings`` load: kept, and loaded again once what it depends on changes."""
        loaded = self._loaded
        if loaded is not None and loaded[0] is settings:
            return loaded[1]
        if loaded is None or loaded[0].loading() != settings.loading():
            loaded = (settings, PreparedDataset.load(settings))
        else:
            loaded = (settings, loaded[1])
        self._loaded = loaded
        return loaded[1]

    def _reader(self) -> SampleReader:
        return self._prepare().sample_reader()

    @property
    def topology(self) -> Topology:
        """The data-parallel topology of this rank (replica groups count as one rank)."""
        return self.settings.ranks()

    def _runs_folder(self) -> str:
        """The node's folder of run files, where workers share the run's progress."""
        return runs_folder(self._state_folder())

    def _state_folder(self) -> str | None:
        """The node-wide state folder (``None``: local-only streams), as the cache's ledger."""
        return node_state_folder(s.local for s in self._prepare().resolved if s.remote is not None)


def reads_through_getitem(dataset: StreamingDataset) -> Callable[[int], Any] | None:
    """The subclass's ``__getitem__`` or ``get_item`` when it overrides one, else ``None``.

    As with the reference, a subclass that transforms samples there (decoding, augmenting)
    has iteration go through it, sample by sample (shards are still read ahead).
    """
    kind = type(dataset)
    if kind.__getitem__ is not StreamingDataset.__getitem__:
        return dataset.__getitem__
    if kind.get_item is not StreamingDataset.get_item:
        return dataset.get_item
    return None
