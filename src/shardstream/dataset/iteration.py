"""Reading a worker's planned device batches in order, fetching shards ahead of the reader.

The plan is a ``[device batches, batch size]`` array of dataset-wide sample ids. Before a
batch is read, every shard of the batches within ``predownload`` samples is handed to a small
thread pool that makes it present in the node's cache (the cache itself bounds the node's
concurrent downloads); the reader waits only for the shards of the batch at hand. Then the
batch is decoded shard by shard: one generated call per sample for :meth:`SampleReader.samples`,
or one call per shard for whole columns with :meth:`SampleReader.columns`, which builds no
dict per sample.
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from shardstream.cache import ShardCache
from shardstream.dataset.batch_assembly import (
    ShardView,
    decode_columns,
    decode_rows,
    names_of,
)
from shardstream.dataset.column_batch import (
    PACK_MEAN,
    PACK_THRESHOLD,
    BatchRefs,
    ColumnBatch,
)
from shardstream.dataset.local import LocalDataset
from shardstream.dataset.parquet import ParquetDataset
from shardstream.dataset.read_ahead import GroupReads
from shardstream.errors import (
    ChecksumError,
    ShardFormatError,
    ShardNotFoundError,
)
from shardstream.format.mds import MDSShardView
from shardstream.format.mds_file import MDSFileView, SampleRuns, ShardFile
from shardstream.format.parquet_view import RowGroupView
from shardstream.sampling.distinct import first_occurrences
from shardstream.storage import ObjectStore
from shardstream.storage.filesystems import is_local_disk

__all__ = ["SampleReader", "fetch_threads"]

logger = logging.getLogger(__name__)

# A reader keeps shards open up to a count and a size; the least recently used beyond either
# are let go (so that an evicted shard's disk space is freed, and many tiny shards are not
# opened again for every sample). Shards over 8 MiB are memory-mapped, each holding a file
# descriptor: 2 GiB of them is at most 256 descriptors.
_OPEN_SHARDS = 32768
_OPEN_BYTES = 2 << 30

#: Shuffled batches are read from the mappings while the reader's open shards total this many
#: bytes or fewer, and from the files beyond (:meth:`SampleReader._file_runs`): the pages a
#: process reads through a mapping count in its resident memory until the shard is let go,
#: and a shuffle reads every page of its shards. Mapped reads are much faster from a few
#: shards: 102,400 samples of 1 KiB (2 shards) read 186k samples/s from the files with 0
#: workers, 1.29x litdata in the same run, where the mappings had read 2.4x litdata. From 1M
#: samples of 1 KiB (16 shards) both read 160-230k samples/s, but mapped the process peaked
#: at 1,447 MiB against 449 MiB (benchmarks/README.md).
MAPPED_READ_BYTES = 256 << 20
#: Small samples (mean bytes a sample of a batch's shards, at most) are decoded several
#: batches at once, up to this many batches, for about this many samples per shard a call.
_GROUPED_SAMPLE_BYTES = 4096
_MAX_ROWS_PER_DECODE = 8
_SAMPLES_PER_DECODE = 64
_REOPEN_ATTEMPTS = 3  # a shard evicted between being fetched and being opened is fetched again


def fetch_threads(stores: Sequence[ObjectStore | None], download_concurrency: int) -> int:
    """Fetch threads of a reader: up to four to hide request latency, one for local disks.

    Copying a shard from a disk of this machine takes microseconds, and more threads only
    contend for the interpreter's lock: the first batch from 10,000 tiny shards came in
    0.13-0.14 s with one thread, 0.14-0.16 s with two and 0.20-0.24 s with four (benchmarks/
    README.md). A reader whose stores include any network store, network file system or FUSE
    mount keeps up to four.

    Args:
        stores: The store of each stream (``None`` for a local-only stream).
        download_concurrency: The node's download concurrency, which also caps the threads.
    """
    remote = [store for store in stores if store is not None]
    if remote and all(is_local_disk(store) for store in remote):
        return 1
    return min(4, download_concurrency)


class SampleReader:
    """Decodes samples by dataset-wide id, making their shards present first.

    Args:
        datasets: One reader per stream, over the stream's local folder.
        shard_starts: The first dataset-wide sample id of every shard, plus the total.
        stream_first_shard: The first dataset-wide shard of every stream, plus the total.
        cache: The node's shard cache.
        threads: Download threads of this reader.
        open_bytes: The most bytes of shard files the reader keeps mapped.
    """

    def __init__(
        self,
        datasets: Sequence[LocalDataset | ParquetDataset],
        shard_starts: NDArray[np.int64],
        stream_first_shard: Sequence[int],
        cache: ShardCache,
        *,
        threads: int = 4,
        open_bytes: int = _OPEN_BYTES,
    ) -> None:
        self.datasets = list(datasets)
        self.open_bytes = open_bytes
        self._open_sizes: dict[int, int] = {}
        self._mapped = 0
        self.shard_starts = shard_starts
        self._starts = shard_starts.tolist()
        self._stream_of_shard = np.repeat(
            np.arange(len(datasets)), np.diff(np.asarray(stream_first_shard))
        ).tolist()
        self._first_shard = list(stream_first_shard)
        self.cache = cache
        self.threads = threads
        self._open: OrderedDict[int, ShardView] = OrderedDict()
        self._open_files: dict[int, ShardFile] = {}  # mapped shards' files, read_batch
        # Shards marked as used this epoch, for least-recently-used eviction: touched, or
        # fetched by this reader (their files' times are fresh; a touch costs ~60 µs on ext4).
        self._marked: set[int] = set()

    def get(self, sample_id: int) -> dict[str, Any]:
        """Decode one sample by dataset-wide id, fetching its shard if needed."""
        shard = int(np.searchsorted(self.shard_starts, sample_id, side="right")) - 1
        return self._view(shard).get(sample_id - self._starts[shard])

    def samples(self, batches: NDArray[np.int64], *, predownload: int) -> Iterator[dict[str, Any]]:
        """Yield the samples of ``batches`` (device batches, in order) one by one."""
        for shards, local, views in self._walk(batches, predownload):
            getters = {shard: view.get for shard, view in views.items()}
            for shard, index in zip(shards, local, strict=True):
                yield getters[shard](index)

    def ids(self, batches: NDArray[np.int64], *, predownload: int) -> Iterator[int]:
        """Yield the ids of ``batches`` one by one, each one's shard fetched (and read ahead)."""
        for shards, local, _ in self._walk(batches, predownload):
            for shard, index in zip(shards, local, strict=True):
                yield self._starts[shard] + index

    def columns(
        self,
        batches: NDArray[np.int64],
        *,
        predownload: int,
        for_worker: bool = False,
    ) -> Iterator[ColumnBatch | list[dict[str, Any]] | BatchRefs]:
        """Yield each device batch of ``batches`` as columns.

        A batch whose shards disagree on the columns (streams of other schemas) comes as a
        list of sample dicts instead, for the caller to collate as it would any samples.
        ``for_worker``: the batches leave a DataLoader worker. ``bytes`` columns of MDS shards
        hold memoryviews of the shards, which the caller must copy or drop before asking for
        the next batch; a batch of large values (see :meth:`_by_id`) comes as its ids
        (:class:`BatchRefs`), its shards present in the cache, for :meth:`read_batch`. Not
        under a cache limit: a shard could be evicted before the other process reads it, and
        be downloaded twice.
        """
        raw_views = for_worker
        as_ids = for_worker and self.cache.limit is None
        pending: list[tuple[list[int], list[int], dict[int, ShardView]]] = []
        pending_names: set[tuple[str, ...]] = set()  # the one schema of the pending batches
        rows = 1  # batches decoded together; the first one always alone (time to first batch)
        # Shuffled groups of mapped shards are read from the files, the next group in a
        # thread while this one is decoded. Not under a cache limit: a group read ahead
        # keeps its shards' files open, and a shard evicted meanwhile is not fetched again.
        reads = GroupReads(ahead=self.cache.limit is None)
        first = True
        try:
            for shards, local, views in self._walk(batches, predownload):
                if as_ids and self._by_id(views, len(shards)):
                    yield from self._group(pending, reads, raw_views)
                    yield from reads.finish()
                    pending = []
                    yield BatchRefs(self.shard_starts[shards] + np.asarray(local, dtype=np.int64))
                    continue
                names = {tuple(names_of(view)) for view in views.values()}
                if len(names) != 1:
                    yield from self._group(pending, reads, raw_views)
                    yield from reads.finish()
                    pending = []
                    yield [
                        views[shard].get(index) for shard, index in zip(shards, local, strict=True)
                    ]
                    continue
                if pending and pending_names != names:
                    yield from self._group(pending, reads, raw_views)
                    pending = []
                pending.append((shards, local, views))
                pending_names = names
                if len(pending) >= rows:
                    yield from self._group(pending, reads, raw_views, wait=first)
                    pending, first = [], False
                    rows = self._rows_per_decode(views, len(shards))
            yield from self._group(pending, reads, raw_views)
            yield from reads.finish()
        finally:
            reads.close()

    def _group(
        self,
        rows: list[tuple[list[int], list[int], dict[int, ShardView]]],
        reads: GroupReads,
        raw_views: bool,
        *,
        wait: bool = False,
    ) -> Iterator[ColumnBatch]:
        """Decode batches of one schema; yield them, and any read ahead before, in order.

        Shuffled batches of mapped shards are read from their files (:meth:`_file_runs`): by
        ``reads``, ahead (their batches come out with the next group) unless ``wait``.
        """
        runs = self._file_runs(rows, mapped_budget=True) if rows else None
        if runs is None:
            yield from reads.finish()
            yield from decode_rows(rows, raw_views)
        else:
            yield from reads.start(runs, [len(row[0]) for row in rows], wait=wait)

    def _file_runs(
        self,
        rows: list[tuple[list[int], list[int], dict[int, ShardView]]],
        *,
        mapped_budget: bool = False,
    ) -> SampleRuns | None:
        """Shuffled batches of mapped MDS shards as reads from their files; else ``None``.

        A mapped page counts in the process's resident memory until it is unmapped, and a
        shuffled batch reads scattered samples of every shard of the shuffle's window: an
        epoch read from the mappings leaves every page of the dataset mapped (1M samples of
        1 KiB: 1.4 GiB of peak RSS against 0.5 GiB). Samples read in order (not shuffled) are
        read from the mappings: each shard's pages go with it once it is done. With
        ``mapped_budget``, so are shuffled ones while the open shards total no more than
        :data:`MAPPED_READ_BYTES`.
        """
        if mapped_budget and self._mapped <= MAPPED_READ_BYTES:
            return None  # few shards: read from their mappings
        views: dict[int, ShardView] = {}
        for _, _, row_views in rows:
            views.update(row_views)
        if any(self._zero_copy(shard) for shard in views):
            return None  # the caller asked for views of the mappings
        files = self._files(views)
        if files is None:
            return None
        shards = np.fromiter(itertools.chain.from_iterable(row[0] for row in rows), np.int64)
        local = np.fromiter(itertools.chain.from_iterable(row[1] for row in rows), np.int64)
        unique, which = np.unique(shards, return_inverse=True)
        lowest = np.full(len(unique), np.iinfo(np.int64).max)
        highest = np.full(len(unique), -1)
        np.minimum.at(lowest, which, local)
        np.maximum.at(highest, which, local)
        if bool((highest - lowest < 2 * np.bincount(which, minlength=len(unique))).all()):
            return None  # in order: read from the mappings
        sources = [(cast(MDSShardView, views[s]), files[s]) for s in unique.tolist()]
        return SampleRuns(sources, which, local)

    def _zero_copy(self, shard: int) -> bool:
        dataset = self.datasets[self._stream_of_shard[shard]]
        return isinstance(dataset, LocalDataset) and dataset.zero_copy

    def read_batch(self, ids: NDArray[np.int64]) -> ColumnBatch | list[dict[str, Any]]:
        """The device batch of ``ids`` (a :class:`BatchRefs`), decoded as :meth:`columns` would.

        Its shards are opened (fetched again if evicted meanwhile) by this process's reader.
        """
        shards, local, _, _ = self._locate(ids.reshape(1, -1))
        row_shards, row_local = shards[0].tolist(), local[0].tolist()
        views = {shard: self._view(shard) for shard in dict.fromkeys(row_shards)}
        if len({tuple(names_of(view)) for view in views.values()}) != 1:
            pairs = zip(row_shards, row_local, strict=True)
            return [views[shard].get(index) for shard, index in pairs]
        # This process reads every worker's batches: the pages it maps would add up to every
        # shard the workers read. Samples read in order (not shuffled) are gathered from the
        # mappings, and their pages let go at once (they stay in the page cache, and no later
        # batch of the epoch reads them). A shuffled batch comes back to every page of its
        # shards, and a page let go costs a fault to map again (~5 us here, more than reading
        # the sample): its samples are read from the files instead, one ``pread`` a run of
        # adjacent ones, mapping nothing (read_samples; figures in benchmarks/README.md).
        runs = self._file_runs([(row_shards, row_local, views)])
        if runs is not None:
            return ColumnBatch(names_of(runs.views[0]), list(runs.decode(runs.read())))
        batch = decode_columns(row_shards, row_local, views, raw_views=False)
        for shard in dict.fromkeys(row_shards):
            view = views[shard]
            if type(view) is MDSShardView:  # read in order: no later batch reads these pages
                picked = local[0][shards[0] == shard]
                view.drop_pages(int(picked.min()), int(picked.max()) + 1)
        return batch

    def _files(self, views: dict[int, ShardView]) -> dict[int, ShardFile] | None:
        """The open file of each mapped shard of ``views``; ``None`` unless every one has one.

        The shards must share a schema. A file is opened once and kept until its shard is let
        go; one that cannot be opened, or is not its mapping's size (replaced since), leaves
        the batch to the mappings.
        """
        schemas = set()
        files = {}
        for shard, view in views.items():
            if type(view) is not MDSShardView or view.mapped is None or view.path is None:
                return None
            schemas.add(tuple(view.schema.columns.items()))
            file = self._open_files.get(shard)
            if file is None:
                try:
                    file = ShardFile.open(view.path)
                except OSError as exc:
                    logger.debug("reading shard %d from its mapping: %s", shard, exc)
                    return None
                if file.size != len(view.mapped):
                    return None
                self._open_files[shard] = file
            files[shard] = file
        return files if len(schemas) == 1 else None

    def _by_id(self, views: dict[int, ShardView], width: int) -> bool:
        """Whether a worker hands a batch over as its ids, for the loader's process to read.

        Batches whose values would cross packed into shared memory (:data:`PACK_MEAN` bytes a
        sample and :data:`PACK_THRESHOLD` a batch, or more) cost the loader's process less
        to read from the node's cache itself: a gather from the mapped shard, or a ``pread``
        a value, against a copy out of shared memory and a round trip to the worker for its
        descriptor. Smaller values cross through the pipe, cheaply. Only MDS shards mapped
        or read with ``pread``: a shard read into memory whole would stay in its memory.
        """
        if not all(
            type(view) is MDSFileView or (type(view) is MDSShardView and view.mapped is not None)
            for view in views.values()
        ):
            return False
        mean = self._mean_sample_bytes(views)
        return mean >= PACK_MEAN and mean * width >= PACK_THRESHOLD

    def _mean_sample_bytes(self, views: dict[int, ShardView]) -> float:
        """The mean bytes a sample of the shards of ``views``, from their index entries."""
        entries = [self.cache.locate(shard)[1] for shard in views]
        return sum(entry.raw_data.bytes for entry in entries) / max(
            1, sum(entry.samples for entry in entries)
        )

    def _rows_per_decode(self, views: dict[int, ShardView], width: int) -> int:
        """How many batches to decode together, judged from one batch's shards.

        A shard's batch decoder costs a dozen numpy calls whatever the number of samples, so
        a shuffled batch drawn from many shards, a few samples from each, costs about twice as
        much a sample as one drawn from a few (1M samples in 16 shards: ~16 samples a shard
        in a batch of 256). Decoding several batches at once gives each shard more samples a
        call; only for small samples, whose decoded batches cost little memory to hold.
        """
        if len(views) < 2 or any(type(view) is RowGroupView for view in views.values()):
            return 1  # a Parquet row group is decoded whole already
        if self._mean_sample_bytes(views) > _GROUPED_SAMPLE_BYTES:
            return 1
        wanted = -(-_SAMPLES_PER_DECODE * len(views) // max(width, 1))
        return max(1, min(_MAX_ROWS_PER_DECODE, wanted))

    def _walk(
        self, batches: NDArray[np.int64], predownload: int
    ) -> Iterator[tuple[list[int], list[int], dict[int, ShardView]]]:
        """Each batch's shards and in-shard indices, with the views of its shards open."""
        if batches.size == 0:
            return
        width = batches.shape[1]
        pending: dict[int, Future[ShardView | None]] = {}
        self._marked.clear()
        with ThreadPoolExecutor(self.threads, thread_name_prefix="shardstream-fetch") as pool:
            try:
                # The first batch is located alone: it need not wait for the search and sort
                # over every sample of the plan (time to first batch).
                for begin, end in ((0, 1), (1, batches.shape[0])):
                    if begin >= end:
                        break
                    shards, local, needed, needed_at = self._locate(batches[begin:end])
                    done_after: dict[int, list[int]] = {}
                    if begin:  # the rest of the plan: let go of each shard after its last use
                        done_after = _last_uses(shards, before=len(shards) * 7 // 8)
                        wanted = set(needed)
                        for shard in [shard for shard in self._open if shard not in wanted]:
                            self._release(shard)  # the first batch's, or an earlier epoch's
                    ahead = 0
                    for row in range(end - begin):
                        # The first batch waits for its own shards only; its look-ahead
                        # starts once it is out.
                        current = (row + 1) * width
                        horizon = current + (predownload if begin + row else 0)
                        while ahead < len(needed) and needed_at[ahead] < horizon:
                            shard = needed[ahead]
                            if shard not in self._open and shard not in pending:
                                if needed_at[ahead] < current:  # wanted now: fetch, open it
                                    pending[shard] = pool.submit(self._open_in_pool, shard)
                                elif not self.cache.is_present(shard):  # a stat, not a task
                                    pending[shard] = pool.submit(self._fetch_in_pool, shard)
                            ahead += 1
                        row_shards = shards[row].tolist()
                        views = {}
                        for shard in dict.fromkeys(row_shards):
                            future = pending.pop(shard, None)
                            opened = None if future is None else future.result()
                            views[shard] = (
                                self._view(shard)
                                if opened is None
                                else self._remember(shard, opened)
                            )
                            if shard not in self._marked:  # open since an earlier epoch
                                self._mark(shard)
                        yield row_shards, local[row].tolist(), views
                        for shard in done_after.get(row, ()):
                            self._release(shard)
            finally:
                for future in pending.values():
                    future.cancel()

    def _locate(
        self, batches: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], list[int], list[int]]:
        """The shard and in-shard index of every sample, and the shards in order of first need.

        Returns:
            ``(shards, local, needed, needed_at)``: arrays shaped as ``batches``, then each
            distinct shard once with the flat position where it is first needed, by position.
        """
        shards = np.searchsorted(self.shard_starts, batches, side="right") - 1
        local = batches - self.shard_starts[shards]
        unique, first = first_occurrences(shards.reshape(-1))
        order = np.argsort(first, kind="stable")
        return shards, local, unique[order].tolist(), first[order].tolist()

    def _fetch_in_pool(self, shard: int) -> None:
        """Make ``shard`` present in the cache (a look-ahead task of the pool)."""
        if self.cache.ensure(shard):
            self._marked.add(shard)

    def _open_in_pool(self, shard: int) -> ShardView | None:
        """Fetch and open ``shard`` in a pool thread; ``None`` leaves it to :meth:`_view`.

        The shards of the batch at hand are opened by the thread that fetched them, so that
        the reader thread does not open hundreds of tiny shards one after another (time to
        first batch; figures in benchmarks/README.md), and marked as used there too. A shard
        that vanished or failed its checks is left to the reader thread, which fetches it
        again and says why.
        """
        stream = self._stream_of_shard[shard]
        dataset = self.datasets[stream]
        within = shard - self._first_shard[stream]
        try:
            view: ShardView
            view, fetched = self.cache.open_fetched(shard, lambda: dataset.shard_view(within))
        except (ShardNotFoundError, ChecksumError, ShardFormatError):
            return None
        if fetched:
            self._marked.add(shard)
        elif shard not in self._marked:
            self._mark(shard)
        return view

    def _view(self, shard: int) -> ShardView:
        """The open view of ``shard``, fetching and mapping it when needed."""
        view = self._open.get(shard)
        if view is not None:
            self._open.move_to_end(shard)
            return view
        stream = self._stream_of_shard[shard]
        within = shard - self._first_shard[stream]
        refetched = False
        for attempt in range(_REOPEN_ATTEMPTS):
            try:
                view = self.cache.open(shard, lambda: self.datasets[stream].shard_view(within))
                break
            except ShardNotFoundError:  # evicted by another process in between
                if attempt == _REOPEN_ATTEMPTS - 1:
                    raise
                logger.debug("shard %d vanished before it was opened; fetching it again", shard)
            except (ChecksumError, ShardFormatError) as exc:
                url = self.cache.source_url(shard)
                if url is None:  # a local dataset's only copy: nothing to fetch again
                    raise
                if refetched:
                    raise type(exc)(
                        f"{exc} (downloaded twice from {url}: the remote file itself does not "
                        f"match its index; rewrite the dataset or fix its index.json)"
                    ) from exc
                logger.warning("%s; downloading it once more from %s", exc, url)
                self.cache.evict(shard)
                refetched = True
        assert view is not None
        view = self._remember(shard, view)
        return view

    def _remember(self, shard: int, view: ShardView) -> ShardView:
        """Keep ``view`` open, unmapping the least recently used beyond the limit."""
        if shard not in self._marked:
            self._mark(shard)
        self._open[shard] = view
        # A decoded row group's memory; a mapped shard's file.
        size = (
            view.nbytes
            if type(view) is RowGroupView
            else self.cache.locate(shard)[1].raw_data.bytes
        )
        self._open_sizes[shard] = size
        self._mapped += size
        while len(self._open) > 1 and (
            len(self._open) > _OPEN_SHARDS or self._mapped > self.open_bytes
        ):
            self._release(next(iter(self._open)))
        return view

    def _mark(self, shard: int) -> None:
        """Mark ``shard`` as just used (its files' times), once an epoch."""
        self._marked.add(shard)
        self.cache.touch(shard)

    def _release(self, shard: int) -> None:
        self._open.pop(shard, None)
        self._open_files.pop(shard, None)
        self._mapped -= self._open_sizes.pop(shard, 0)
        stream = self._stream_of_shard[shard]
        self.datasets[stream].release(shard - self._first_shard[stream])


def _last_uses(shards: NDArray[np.int64], before: int | None = None) -> dict[int, list[int]]:
    """Row -> the shards used for the last time in that row of ``shards`` (one row a batch).

    A reader lets go of a shard (unmaps it) once the plan needs it no more: mapped pages count
    in the process's resident memory until then, and a shuffle reads its shards a window at a
    time, so an epoch would otherwise end with every shard it read mapped. Only rows before
    ``before`` are listed: a shard last used near the end of an epoch adds nothing to the
    epoch's peak, and the next epoch would have to map it (and fault its pages in) again.
    """
    flat = shards.reshape(-1)
    unique, first_from_end = first_occurrences(flat[::-1])  # last uses, counted from the end
    rows = (flat.size - 1 - first_from_end) // max(shards.shape[-1], 1)
    done: dict[int, list[int]] = {}
    for row, shard in zip(rows.tolist(), unique.tolist(), strict=True):
        if before is None or row < before:
            done.setdefault(row, []).append(shard)
    return done
