"""The read policy: every threshold and choice of how shard bytes become batches, in one place.

The policy picks the pipeline's stages once per epoch (:meth:`ReadPolicy.route`, a
:class:`Route`): whether batches are handed over from a DataLoader worker, and then whether
by id; whether shuffled groups may be read from the files, and ahead in a thread; how many
batches the first decode takes; whether a table's batches are gathered across row groups.
Within those stages, its thresholds say how a shard file is
opened (read whole, mapped, read with ``pread``: :meth:`ReadPolicy.opening`, passed to the
cache as its ``FileOpening``), when the open shards are large enough for file reads, how many
batches to decode together, which columns cross packed, how many shards and bytes stay open,
when a shard is let go, how many fetch threads a reader has, and how wide the loader's result
pipe is. Every number behind a choice of reading is one of its fields (retry counts and
the system's own limits aside). Whatever the
policy chooses, the batches are the same: same values, same types, same order
(``tests/property/test_read_routes.py`` enumerates every route).

A dataset builds its policy once, from its settings (:meth:`ReadPolicy.for_settings`), and
passes it down to its reader, its shard files and the loader. Why each default is what it is
is said by its field; the figures behind them are in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from shardstream.cache.shard_files import ShardOpening

__all__ = ["ReadPolicy", "Route", "ShardOpening"]

#: How a reading entrance takes its batches: sample by sample, as ids, or as columns.
Entrance = Literal["samples", "ids", "columns"]

_KIB = 1 << 10
_MIB = 1 << 20
_GIB = 1 << 30


@dataclass(frozen=True)
class Route:
    """The stages of one epoch's pipeline, as the policy picks them (:meth:`ReadPolicy.route`).

    Attributes:
        decode: The decode stage: sample dicts one by one, ids (a subclass's
            ``__getitem__`` makes each sample), or whole batches as columns.
        hand_over: The batches leave a DataLoader worker (packed where large, see
            ``for_transfer``); ``bytes`` columns may hold views of the shards until then.
        by_id: A batch whose shards another process reads as cheaply (not read whole into
            memory) is handed over as its sample ids, for the loader's read stage.
        file_reads: Shuffled groups of mapped shards may be read from their files (not
            with ``zero_copy``, whose values are views of the mappings).
        read_ahead: Those reads run ahead, in a thread.
        first_rows: Batches the first decode takes.
        gather: A batch drawn from several shards is gathered in one pass by the sources'
            own gatherer (every stream a table: its row groups' columns are arrays), not
            decoded shard by shard and put back into batch order.
        read_whole: Shards of a small dataset read in place are read whole when opened
            (``in_place_whole_bytes``); not by a worker that hands batches over by id, whose
            loader's process reads them.
    """

    decode: Entrance
    hand_over: bool
    by_id: bool
    file_reads: bool
    read_ahead: bool
    first_rows: int
    gather: bool = False
    read_whole: bool = True


@dataclass(frozen=True)
class ReadPolicy:
    """How shards are opened, batches decoded, and batches handed from workers to the loader.

    Attributes:
        zero_copy: ``bytes`` columns of mapped MDS shards come as read-only memoryviews.
        read_whole_bytes: Files up to this size are read into memory, not mapped (a mapping
            holds a file descriptor; a reader may keep thousands of small shards open).
        pread_mean_bytes: MDS shards whose samples average this many bytes or more are read
            sample by sample with ``pread``, not mapped (unless ``zero_copy``): mapped pages
            count in the reader's resident memory until the shard is let go.
        mapped_read_bytes: Shuffled batches are read from the mappings while the reader's
            open shards total this many bytes or fewer, and from the files beyond.
        in_place_whole_bytes: A dataset read in place (never mapped) whose MDS data files
            total this many bytes or fewer has its shards of small samples (under
            ``pread_mean_bytes``) read whole into memory as each is opened, not read with
            ``pread``: decoded straight from memory, as from a mapping, a shuffled batch costs
            no read a sample or a run and no hand-off to a reading thread. The bound is
            ``mapped_read_bytes``': what shuffled reads from mappings may hold resident. A
            copy read whole is the process's own (each DataLoader worker holds one, unless
            inherited: :attr:`inherit_whole`), so a larger dataset is read from its files.
        inherit_whole: A loader whose DataLoader workers are forked anew each epoch holds,
            once an epoch is done, the shards of a small dataset read in place that each
            worker would read whole (:meth:`holds_for_workers`): the next epoch's workers
            inherit those bytes copy-on-write instead of each reading every shard again.
            Before each fork, a held shard whose file changed since it was read is let go:
            the workers read what the file holds then.
        read_ahead: Read the next group of shuffled samples from their files in a thread
            (io_uring) while this one is decoded.
        open_shards: The most shards a reader keeps open.
        open_bytes: The most bytes of shards a reader keeps open (mapped files, decoded row
            groups); the least recently used beyond are let go.
        group_sample_bytes: Batches whose samples average this many bytes or fewer are
            decoded several at once (a shard's batch decoder has a fixed cost per call).
        group_rows: The most batches decoded at once.
        group_samples: About this many samples a shard per call, when grouping.
        pack_bytes: A ``bytes`` column (or stacked array) of a batch leaving a worker crosses
            as an in-memory file from this many bytes on.
        pack_mean_bytes: ... when its values also average this many bytes or more.
        by_id: A worker may hand a batch of large values over as its sample ids, for the
            loader's process to read from the node's cache (not under a cache limit, where
            the shard could be evicted in between).
        fetch_threads: Threads that fetch and open shards ahead of the reader.
        first_batch_ranges: A cold epoch's first batch reads its samples of uncompressed
            remote MDS shards by range requests, before those shards land whole.
        range_whole_bytes: ... a shard up to this size in one range, header and samples
            together: one round trip, not two, for bytes a round trip would carry anyway.
        range_gap_bytes: ... samples of one shard this close in one range: a round trip
            costs more than the bytes between them.
        range_shard_share: ... and small shards not at all when the first batch needs this
            share of the dataset's shards or more: the epoch needs them whole at once, and a
            range would make each cross the link twice.
        range_requests: ... with up to this many requests in flight at once, waited for by
            one thread (not the fetch pool's): a batch spread over a few hundred shards then
            waits about one round trip, not one for each fetch thread's share of them.
        range_bytes_share: ... and large shards not at all when the batch's samples of them
            hold this share of their bytes or more: ranged bytes cross the link twice, since
            the whole shard follows.
        range_hold_s: A look-ahead about to start on the rest of an epoch waits up to this
            long for the node's first-batch ranges (other DataLoader workers') to be out:
            thousands of whole downloads would share the link with them while the loader
            waits for those batches; a first batch's ranges take a few round trips, and ones
            out longer are on a link too slow to be worth the rest of the epoch's wait.
        gather_min_groups: A table's batch drawn from fewer row groups is gathered group by
            group: an unshuffled batch crossing into the next group needs no copy of either.
        prefetch_factor: Batches each DataLoader worker may have ahead (when the caller sets
            none).
        first_rows: Batches the first decode of an epoch takes: one, so that the first batch
            waits for no other (time to first batch); later decodes take
            ``rows_per_decode``.
        in_order_spread: A group's samples of a shard count as read in order (read from the
            mapping, whose pages go with the shard) when they span fewer than this many
            times their number of samples; a shuffle spreads them over the whole shard.
        keep_open_tail: Shards whose last use falls in the last ``1 / keep_open_tail`` of an
            epoch's batches stay open after it: they add nothing to the epoch's peak, and the
            next epoch would open them (and fault their pages in) again.
        max_fetch_threads: Fetch threads a reader has at most, whatever its download slots
            carry (``fetch_threads_for``): as many as an S3 reader's pooled connections;
            more only contend for the interpreter's lock.
        idle_fetch_threads: Fetch threads of a reader with nothing to fetch (local-only
            streams): they only open shards ahead.
        result_pipe_bytes: What a DataLoader's result pipe is widened to: Linux's default
            ceiling for an unprivileged process (``/proc/sys/fs/pipe-max-size``), room for a
            whole batch of small values; larger values cross packed or by id, not through it.

    Example:
        from shardstream import ReadPolicy, StreamingDataset

        # Shuffled batches from the shard files as soon as 64 MiB of shards are open.
        policy = ReadPolicy(mapped_read_bytes=64 << 20)
        ds = StreamingDataset(remote="s3://bucket/my-ds", batch_size=32, read_policy=policy)
    """

    zero_copy: bool = False
    read_whole_bytes: int = 8 * _MIB
    pread_mean_bytes: int = 32 * _KIB
    mapped_read_bytes: int = 256 * _MIB
    read_ahead: bool = True
    open_shards: int = 32768
    open_bytes: int = 2 * _GIB
    group_sample_bytes: int = 4 * _KIB
    group_rows: int = 8
    group_samples: int = 64
    pack_bytes: int = 1 * _MIB
    pack_mean_bytes: int = 4 * _KIB
    by_id: bool = True
    fetch_threads: int = 4
    first_batch_ranges: bool = True
    range_whole_bytes: int = 256 * _KIB
    range_gap_bytes: int = 64 * _KIB
    range_shard_share: float = 0.25
    range_requests: int = 128
    range_bytes_share: float = 1 / 32
    range_hold_s: float = 5.0
    gather_min_groups: int = 3
    prefetch_factor: int = 4
    first_rows: int = 1
    in_order_spread: int = 2
    keep_open_tail: int = 8
    max_fetch_threads: int = 32
    idle_fetch_threads: int = 4
    result_pipe_bytes: int = 1 * _MIB
    in_place_whole_bytes: int = 256 * _MIB  # last: the fields before keep their positions
    inherit_whole: bool = True

    @classmethod
    def for_settings(
        cls,
        *,
        zero_copy: bool = False,
        cache_limit: int | None = None,
        fetch_threads: int = 4,
        io_uring: bool = True,
    ) -> ReadPolicy:
        """The policy of a dataset with these settings.

        Args:
            zero_copy: The dataset's ``zero_copy``.
            cache_limit: The dataset's ``cache_limit``: unmapping is what frees an evicted
                shard's disk space, so at most a quarter of it stays open; shards read ahead
                or handed over by id could be evicted before they are read, so neither is done.
            fetch_threads: Threads that fetch and open shards ahead of the reader.
            io_uring: io_uring may be used (``SHARDSTREAM_IO_URING``, read by config).
        """
        open_bytes = cls.open_bytes
        if cache_limit is not None:
            open_bytes = min(open_bytes, cache_limit // 4)
        return cls(
            zero_copy=zero_copy,
            open_bytes=max(1, open_bytes),
            read_ahead=io_uring and cache_limit is None,
            by_id=cache_limit is None,
            fetch_threads=fetch_threads,
        )

    def fetch_threads_for(
        self, *, remote: bool, local_disk: bool, download_concurrency: int, share: int = 1
    ) -> int:
        """Fetch threads of a reader: one a download the node allows, to hide request latency.

        Copying a shard from a disk of this machine takes microseconds, and more threads only
        contend for the interpreter's lock: one. A reader whose stores include any network
        store, network file system or FUSE mount gets a thread for each download the node's
        slots carry at once, ``download_concurrency * share`` (at most
        :attr:`max_fetch_threads`, unless the slots alone are more): over a link with tens of
        milliseconds to a first byte, a first batch spread over many small shards waits one
        round trip per ``threads`` shards.

        Args:
            remote: Some stream has a store to fetch from.
            local_disk: Every such store is a disk of this machine.
            download_concurrency: The node's download slots.
            share: Downloads of the dataset's shards one slot carries.
        """
        if remote and local_disk:
            return 1
        if not remote:
            return min(self.idle_fetch_threads, download_concurrency)
        wanted = min(download_concurrency * share, self.max_fetch_threads)
        return max(download_concurrency, wanted)

    def ranges_small_shards(self, batch_shards: int, shards: int) -> bool:
        """Whether a first batch over ``batch_shards`` of ``shards`` reads small ones by range.

        Not where it needs ``range_shard_share`` of them or more: they are fetched whole.
        """
        return self.first_batch_ranges and batch_shards < self.range_shard_share * shards

    def release_before(self, rows: int) -> int:
        """Of an epoch's ``rows`` batches, those after whose last use a shard is let go."""
        tail = max(1, self.keep_open_tail)
        return rows * (tail - 1) // tail

    def in_order(self, span: NDArray[np.int64], samples: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Whether each shard's ``samples`` samples, spanning ``span`` indices, are in order."""
        return span < self.in_order_spread * samples

    def route(
        self,
        decode: Entrance,
        *,
        hand_over: bool = False,
        mean_sample_bytes: float = 0.0,
        width: int = 1,
        gathers: bool = False,
    ) -> Route:
        """The stages of an epoch read through ``decode``, chosen once for the epoch.

        Args:
            decode: The reading entrance's decode stage.
            hand_over: The batches leave a DataLoader worker.
            mean_sample_bytes: The mean bytes a sample of the epoch's first batch's shards.
            width: The device batch size.
            gathers: Every stream's source gathers batches across its shards (tables).
        """
        columns = decode == "columns"
        by_id = columns and hand_over and self.hands_over_ids(mean_sample_bytes, width)
        return Route(
            decode=decode,
            hand_over=columns and hand_over,
            by_id=by_id,
            file_reads=columns and not self.zero_copy and not gathers,
            read_ahead=self.read_ahead,
            first_rows=max(1, self.first_rows),
            gather=columns and gathers,
            read_whole=not by_id,
        )

    def replace(self, **changes: object) -> ReadPolicy:
        """A copy with ``changes`` (field name to value)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    # --- opening a shard --------------------------------------------------------------------

    def opening(
        self,
        file_bytes: int,
        samples: int,
        *,
        can_pread: bool,
        shared: bool = False,
        shared_bytes: int | None = None,
    ) -> ShardOpening:
        """How to open an MDS shard file of ``samples`` samples (0: not an MDS data file).

        ``shared``: the file is not the reader's own copy but the dataset's, read in place,
        which another process may cut short or rewrite while it is open (``cp`` over it
        truncates it first). Such a file is never mapped: touching a mapped page past a file's
        new end kills the process with ``SIGBUS``, where a short read is reported as a
        ``ShardFormatError`` naming the file. A file of small samples of a dataset whose MDS
        data files total ``shared_bytes``, at most :attr:`in_place_whole_bytes`, is read
        whole (what it held when opened is what is read); any other MDS data file is read
        with ``pread``, any other file whole. Where there is no ``pread`` (Windows), a mapped
        file cannot be truncated, and mapping stays.
        """
        if file_bytes <= self.read_whole_bytes:
            return "whole"
        if shared and can_pread:
            if not samples:
                return "whole"
            small = file_bytes < self.pread_mean_bytes * samples
            fits = shared_bytes is not None and shared_bytes <= self.in_place_whole_bytes
            return "whole" if small and fits else "pread"
        if (
            can_pread
            and samples
            and not self.zero_copy
            and file_bytes >= self.pread_mean_bytes * samples
        ):
            return "pread"
        return "map"

    def holds_for_workers(self, file_bytes: int, samples: int, *, shared_bytes: int) -> bool:
        """Whether the loader's process holds a shard read in place for the workers it forks.

        A file of ``samples`` samples (0: not MDS data) of a dataset read in place whose MDS
        data files total ``shared_bytes``: held where every process would read it whole
        (:meth:`opening`; workers are forked only where there is ``pread``) and the dataset
        is within :attr:`in_place_whole_bytes`, the bound on what the loader's process then
        keeps resident (see :attr:`inherit_whole`).
        """
        opening = self.opening(file_bytes, samples, can_pread=True, shared=True,
                               shared_bytes=shared_bytes)  # fmt: skip
        return (
            self.inherit_whole and shared_bytes <= self.in_place_whole_bytes and opening == "whole"
        )

    def inherits(self, *, forks: bool, persistent: bool) -> bool:
        """Whether a loader holds shards for its workers (:attr:`inherit_whole`).

        Only where they are forked (``forks``) anew each epoch: persistent workers read each
        shard once in all, and spawned ones inherit nothing.
        """
        return self.inherit_whole and forks and not persistent

    def reads_runs(self, file_bytes: int, samples: int) -> bool:
        """Whether a shard opened for ``pread`` reads each batch's samples as runs.

        A run of adjacent samples takes one ``pread`` into a buffer decoded at once (as
        :meth:`reads_files` does for mapped shards). Shards of small samples are opened for
        ``pread`` only when shared, of a dataset too large to read whole (:meth:`opening`); a
        system call per sample would cost them more than decoding does.
        """
        return not self.zero_copy and file_bytes < self.pread_mean_bytes * samples

    # --- reading and decoding batches -------------------------------------------------------

    def reads_files(self, open_bytes: int) -> bool:
        """Whether shuffled batches of mapped shards are read from their files, not mappings."""
        return not self.zero_copy and open_bytes > self.mapped_read_bytes

    def rows_per_decode(self, mean_sample_bytes: float, shards: int, width: int) -> int:
        """How many batches of ``width`` samples from ``shards`` shards to decode together."""
        if shards < 2 or mean_sample_bytes > self.group_sample_bytes:
            return 1
        wanted = -(-self.group_samples * shards // max(width, 1))
        return max(1, min(self.group_rows, wanted))

    # --- handing batches from a worker to the loader ----------------------------------------

    def hands_over_ids(self, mean_sample_bytes: float, width: int) -> bool:
        """Whether a worker hands a batch over as its sample ids (its shards stay on disk)."""
        return (
            self.by_id
            and mean_sample_bytes >= self.pack_mean_bytes
            and mean_sample_bytes * width >= self.pack_bytes
        )

    def packs(self, total_bytes: int, values: int) -> bool:
        """Whether a ``bytes`` column of ``values`` values crosses as an in-memory file."""
        return total_bytes >= self.pack_bytes and total_bytes >= self.pack_mean_bytes * values

    def packs_array(self, nbytes: int) -> bool:
        """Whether a stacked numeric column crosses as an in-memory file."""
        return nbytes >= self.pack_bytes
