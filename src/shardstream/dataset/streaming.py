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
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from shardstream import config
from shardstream._torch import require_torch, worker_info
from shardstream.cache import EpochStart, NodeOrders, RunState, ensure_private_folder
from shardstream.cache.layout import node_state_folder
from shardstream.dataset import resume_state as saved_state
from shardstream.dataset.arguments import check_arguments
from shardstream.dataset.indexing import checked_id, select
from shardstream.dataset.introspection import Introspection
from shardstream.dataset.prepared import PreparedDataset
from shardstream.dataset.resume_state import STATE_VERSION, check_state, warn_overrides
from shardstream.dataset.stream import Stream
from shardstream.dataset.stream_registry import dataset_streams
from shardstream.dataset.world import detect_topology, explicit_topology
from shardstream.errors import ConfigurationError
from shardstream.format.index import safe_basename
from shardstream.pipeline.column_batch import BatchRefs, ColumnBatch
from shardstream.pipeline.policy import ReadPolicy
from shardstream.pipeline.reader import Batch, SampleReader
from shardstream.sampling import (
    EpochPlan,
    ShuffleConfig,
    Topology,
    parse_epoch_size,
    resample,
)
from shardstream.units import parse_bytes

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
        batch_mode: Iterating yields whole device batches (:meth:`iter_batches`) instead of
            samples. :class:`~shardstream.StreamingDataLoader` sets it for its iterations.
        rank_process: The process id of the rank process whose DataLoader workers iterate
            this dataset (its run state is kept under that id). Set by
            :class:`~shardstream.StreamingDataLoader` before its workers start; otherwise the
            process that sent the dataset to a worker, or a forked worker's parent.

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
        built = streams is None  # the one stream built here holds the Parquet columns
        streams = dataset_streams(
            streams, stream_name=stream_name, stream_config=stream_config, columns=columns,
            format=format, version=version,
            remote=remote, local=local, split=split, download_retry=download_retry,
            download_timeout=download_timeout, validate_hash=validate_hash, keep_zip=keep_zip,
        )  # fmt: skip
        columns = None if built else columns
        check_arguments(
            validate_hash=validate_hash, sampling_method=sampling_method,
            partition_algo=partition_algo, batching_method=batching_method,
            batch_size=batch_size, num_canonical_nodes=num_canonical_nodes,
            predownload=predownload, replication=replication,
            shuffle_block_size=shuffle_block_size, sampling_granularity=sampling_granularity,
            shuffle_seed=shuffle_seed, download_concurrency=download_concurrency,
        )  # fmt: skip
        self.shuffle_config = ShuffleConfig(
            shuffle=bool(shuffle), algo=shuffle_algo, seed=shuffle_seed,
            block_size=shuffle_block_size,
        )  # fmt: skip
        self.streams = list(streams)  # the caller's own: loading settles their weights
        self.split = None if split is None else safe_basename(split, where="split")
        self.download_retry = download_retry
        self.download_timeout = download_timeout
        self.validate_hash = validate_hash
        self.keep_zip = keep_zip
        self.requested_epoch_size = parse_epoch_size(epoch_size)
        self.predownload = predownload
        self.cache_limit = (
            None if cache_limit is None else parse_bytes(cache_limit, what="cache_limit")
        )
        self.sampling_method = sampling_method
        self.sampling_granularity = sampling_granularity
        self.partition_algo = partition_algo
        self.num_canonical_nodes = num_canonical_nodes
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.shuffle_algo = shuffle_algo
        self.shuffle_seed = shuffle_seed
        self.shuffle_block_size = shuffle_block_size
        self.batching_method = batching_method
        self.allow_unsafe_types = allow_unsafe_types
        self.replication = replication
        self.download_concurrency = download_concurrency
        self.zero_copy = zero_copy
        self.columns = columns
        self.read_policy = read_policy
        self._rank = rank
        self._world_size = world_size
        self._ranks_per_node = ranks_per_node
        self._topology = explicit_topology(topology, rank, world_size, ranks_per_node)
        self._id = uuid.uuid4().hex[:12]  # tells this dataset's run file from others'
        self._next_epoch = 0
        self._resume: EpochStart | None = None
        self._said: set[str] = set()  # notes logged once (iterating in this process)
        self._current: EpochStart | None = None
        self._initial_nodes: int | None = None
        self._prepared: PreparedDataset | None = None
        self.batch_mode = False
        self.rank_process: int | None = None
        self._sent_by: int | None = None  # the process that pickled this copy
        self._received_by: int | None = None  # ... and the one that unpickled it
        self.table_pins: dict[int, int] = {}  # Delta versions a loaded state resumes on

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
        return self._reader().get(checked_id(sample_id, self.num_samples))

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield this worker's samples of the next epoch (or of the loaded resume point).

        In :attr:`batch_mode`, its device batches instead (:meth:`iter_batches`).
        """
        if self.batch_mode:
            yield from cast(Iterator[dict[str, Any]], self.iter_batches())
            return
        reader, plan, predownload = self._begin_epoch()
        custom = reads_through_getitem(self)
        if custom is not None:  # a subclass's __getitem__/get_item makes each sample
            for sample_id in reader.ids(plan.ids, plan.batch_size, predownload=predownload):
                yield custom(sample_id)
        else:
            yield from reader.samples(plan.ids, plan.batch_size, predownload=predownload)

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
        reader, plan, predownload = self._begin_epoch()
        in_worker = worker_info() is not None
        yield from reader.batches(
            plan.ids, plan.batch_size, predownload=predownload, for_worker=in_worker
        )

    def read_batch(self, batch: BatchRefs) -> ColumnBatch | list[dict[str, Any]]:
        """The values of a batch a worker handed over as its sample ids, read in this process."""
        return self._reader().read_batch(batch.ids)

    def _begin_epoch(self) -> tuple[SampleReader, EpochPlan, int]:
        """This process's reader, its plan of the epoch it starts now, and its look-ahead."""
        prepared = self._prepare()
        if self.batch_size is None:
            raise ConfigurationError(
                "StreamingDataset needs batch_size (the per-device batch size, the same as the "
                "DataLoader's) to lay the epoch out over ranks and workers"
            )
        ranks = self.topology
        info = worker_info()
        topology = ranks if info is None else ranks.with_worker(info[1], info[0])
        prepared.cache.check_limit(ranks.ranks_per_node * (1 if info is None else info[1]))
        start = self._claim_epoch(info)
        if start.drop_first >= int(prepared.choices.sum()) > 0:  # resumed at the very end
            start = EpochStart(start.epoch + 1, 0)
        plan = self.plan(start, topology)
        if topology.global_worker == 0:  # said once per job, not by every worker
            if plan.dropped:
                level = self._once(info, f"dropped {plan.dropped}", logging.WARNING)
                logger.log(
                    level, "epoch %d: %d samples fit no whole %s batch and are left out",
                    start.epoch, plan.dropped, self.batching_method,
                )  # fmt: skip
            if plan.padding:
                level = self._once(info, f"padding {plan.padding}", logging.INFO)
                logger.log(
                    level,
                    "epoch %d: %d samples are repeated so that each of the %d ranks gets as many",
                    start.epoch, plan.padding, topology.world_size,
                )  # fmt: skip
        predownload = self.predownload
        if predownload is None:
            predownload = 8 * self.batch_size
        return self._reader(), plan, predownload

    def plan(self, start: EpochStart, topology: Topology) -> EpochPlan:
        """The samples ``topology``'s worker reads in the epoch ``start`` names."""
        prepared = self._prepare()
        assert self.batch_size is not None
        units = resample(
            prepared.stream_shard_sizes, prepared.choices, seed=self.shuffle_seed,
            epoch=start.epoch, sampling_method=self.sampling_method,
            sampling_granularity=self.sampling_granularity,
        )  # fmt: skip
        nodes, state = self._canonical_nodes(topology), self._state_folder()
        memo = None  # node orders kept for runs that resume; a cache limit counts shards only
        if state is not None and prepared.cache.limit is None:
            folder = os.path.join(state, "plans")
            memo = NodeOrders(folder, units.sizes, nodes, start.epoch, self.shuffle_config)
        return EpochPlan.for_worker(
            units,
            topology=topology,
            num_canonical_nodes=nodes,
            global_batch_size=self.batch_size * topology.world_size,
            epoch=start.epoch,
            shuffle=self.shuffle_config,
            drop_first=start.drop_first,
            batching_method=self.batching_method,
            memo=memo,
            stream_names=[stream.remote or stream.local for stream in prepared.resolved],
        )

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` (as samplers' ``set_epoch`` does)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ConfigurationError(f"epoch must be an integer >= 0, got {epoch!r}")
        self._next_epoch = epoch
        self._resume = None
        self._run_state(os.getpid()).update(next_epoch=epoch, resume=None)

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
        current = self._current_start()
        sample_in_epoch = num_samples if from_beginning else current.drop_first + num_samples
        return {
            "epoch": current.epoch,
            "sample_in_epoch": int(sample_in_epoch),
            "num_canonical_nodes": self._canonical_nodes(self.topology),
            "shuffle_seed": self.shuffle_seed,
            "initial_physical_nodes": self._initial_nodes or self.topology.nodes,
            "version": STATE_VERSION,
            "num_samples": self.num_samples,
            "fingerprint": self._fingerprint(),
            "table_versions": saved_state.table_versions(self._prepare().datasets),
            **saved_state.order_settings(self, self._prepare().choices.tolist()),
        }

    def load_state_dict(self, obj: Mapping[str, Any], *, strict: bool = True) -> None:
        """Resume where a state dict says, at the next iteration (on any topology).

        Each value is checked against this dataset first. The state's settings of the order
        (seed, shuffle, sampling: :mod:`~shardstream.dataset.resume_state`) replace the
        dataset's; one warning names each value replaced.

        Args:
            obj: What :meth:`state_dict` returned (or the reference's state dict).
            strict: Refuse a state saved on other data (its fingerprint differs); ``False``
                loads it anyway, with a warning.

        Raises:
            ConfigurationError: The state lacks a key, holds a bad value, or was saved on other
                data or other stream weights; the message names the key, or both datasets.
        """
        if (pins := saved_state.table_pins(obj, self.streams)) != self.table_pins:
            self.table_pins, self._prepared = pins, None  # read the state's Delta versions
        saved = saved_state.saved_order(obj)
        prepared = self._prepare()
        saved_state.warn_moved_on(prepared.datasets, pins)
        global_batch = (self.batch_size or 0) * self.topology.world_size
        resume = check_state(
            obj, fingerprint=self._fingerprint(), num_samples=self.num_samples,
            epoch_size=int(prepared.choices.sum()), global_batch=global_batch, strict=strict,
        )  # fmt: skip
        order = {**saved_state.dataset_order(self), "shuffle_seed": resume.shuffle_seed}
        order |= {"num_canonical_nodes": resume.num_canonical_nodes, **saved}
        saved_state.check_layout(obj, prepared, order, global_batch=global_batch, strict=strict)
        told = saved_state.adopt_settings(self, order)  # all checked: nothing fails past here
        if told.keys() & {"epoch_size", "shuffle_seed"}:
            self._prepared = None  # the epoch's draw over the streams: seeded, of its size
            self._prepare()
        warn_overrides(told.values())
        self._initial_nodes = resume.initial_physical_nodes
        self._resume = EpochStart(resume.epoch, resume.sample_in_epoch)
        self._next_epoch = resume.epoch
        self._run_state(os.getpid()).update(next_epoch=self._next_epoch, resume=self._resume)

    # --- internals ------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Fetch and load every stream's index now (else the first use does it)."""
        self._prepare()

    def _prepare(self) -> PreparedDataset:
        if self._prepared is None:
            self._prepared = PreparedDataset.load(self)
        return self._prepared

    def _fingerprint(self) -> str:
        """The fingerprint of this dataset's data, as state dicts record it."""
        prepared = self._prepare()
        if prepared.fingerprint is None:
            prepared.fingerprint = saved_state.dataset_fingerprint(prepared.datasets)
        return prepared.fingerprint

    def _reader(self) -> SampleReader:
        prepared = self._prepare()
        if prepared.reader is not None:
            return prepared.reader
        prepared.reader = SampleReader(
            prepared.datasets,
            prepared.shard_starts,
            prepared.stream_first_shard.tolist(),
            prepared.cache,
            prepared.policy,
        )
        return prepared.reader

    @property
    def topology(self) -> Topology:
        """The data-parallel topology of this rank (replica groups count as one rank)."""
        topology = self._topology or detect_topology(
            rank=self._rank, world_size=self._world_size, ranks_per_node=self._ranks_per_node
        )
        return topology.replicated(self.replication) if self.replication else topology

    def _canonical_nodes(self, topology: Topology) -> int:
        if self.num_canonical_nodes is not None:
            return self.num_canonical_nodes
        nodes = self._initial_nodes or topology.nodes
        return nodes * 64 if self.shuffle_algo in ("py1s", "py2s") else nodes

    def _claim_epoch(self, info: tuple[int, int] | None) -> EpochStart:
        """The epoch and resume point of this iteration, and note it for the next."""
        if info is None:  # iterating in the rank process itself
            start = self._resume or EpochStart(self._next_epoch)
            self._resume = None
            self._next_epoch = start.epoch + 1
            self._current = start
            return start
        worker, workers = info
        state = self._run_state(self._rank_process_of_worker())
        return state.begin(worker, workers, next_epoch=self._next_epoch, resume=self._resume)

    def _once(self, info: tuple[int, int] | None, note: str, level: int) -> int:
        """``level`` the first time this dataset says ``note`` in this run, DEBUG after."""
        if info is None:
            first = note not in self._said
            self._said.add(note)
        else:  # DataLoader workers are new copies each epoch: the run state remembers
            first = self._run_state(self._rank_process_of_worker()).first_time(note)
        return level if first else logging.DEBUG

    def _rank_process_of_worker(self) -> int:
        """The rank process this DataLoader worker reads for, whose run state it shares.

        Named explicitly (:attr:`rank_process`), else found from how the worker got this
        copy: unpickled here from the process that sent it (spawn, forkserver), or inherited
        from the parent (fork). Never the parent alone: a forkserver worker's parent is the
        fork server.
        """
        if self.rank_process is not None:
            return self.rank_process
        if self._received_by == os.getpid() and self._sent_by is not None:
            return self._sent_by
        return os.getppid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sent_by"] = os.getpid()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._received_by = os.getpid()

    def _current_start(self) -> EpochStart:
        """The epoch being read now and its starting point, as the rank process knows it."""
        from_workers = self._run_state(os.getpid()).current()
        if from_workers is not None:
            return from_workers
        if self._current is not None:
            return self._current
        return self._resume or EpochStart(self._next_epoch)

    def _run_state(self, owner: int) -> RunState:
        return RunState(self._run_folder(), owner, self._id)

    def _run_folder(self) -> str:
        """``runs/`` in the node-wide state folder, else in the user's cache root.

        A local-only dataset's folder is the user's data, never written to; the cache root is
        made (or checked to be) this user's alone before run files go there.
        """
        state = self._state_folder()
        if state is None:
            state = config.cache_root()
            ensure_private_folder(state)
        return os.path.join(state, "runs")

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
