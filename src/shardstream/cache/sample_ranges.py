"""A cold first batch read by byte ranges: just the samples it needs, before their shards land.

A uniformly shuffled first batch draws its samples from hundreds of shards; fetched whole, each
shard passes through the cache (its lock, a download slot, a temporary file renamed into place)
before the batch can be read. :class:`SampleRanges` reads the batch's samples straight from the
remote objects instead, many requests in flight at once: a shard's offset table, then the
samples' bytes, nearby samples coalesced into one range (a small shard in one range, header
and all). The whole shards follow behind, through the cache as always, for the rest of the
epoch.

Bytes read by range are untrusted and never written to the cache: they live in the view this
module returns, and a shard's file in the cache only ever comes from a whole download. The
offset table is checked against the index (sample count, the file's size as the last offset,
offsets in order), each range's length against what was asked for, and a view hands out only
the samples that were read. A compressed shard (zstd, gzip, ...) cannot be read by range: its
samples wait for the whole shard.

Every range of a shard is tied to the version its first range read: that range's answer names
the object's size and tag (an ETag, a GCS generation, a local file's identity), and each later
range asks for that tag by a conditional request (``If-Match``, ``ifGenerationMatch``). A shard
rewritten in place between its header's range and its samples' is refused, never read as a mix
of two versions, and its samples come from its whole download instead; one whose answer names
no tag, or another size than the index, is read whole too. So no range waits for the start's
listing (``cache/listing_check.py``), nor does a forked worker list before its ranges.

The whole download that follows is not tied to that tag (it may be fetched by another process,
after the listing), so when this process opens the whole shard it compares the bytes it handed
out by range (the offset table and the samples) with the file's (:meth:`SampleRanges.confirm`):
a shard rewritten between its ranges and its whole download fails the epoch with
``ObjectChangedError``, rather than hand out samples of two versions. Identical bytes read the
same as the whole file would have: nothing was mixed. Bytes read by range never reach the
cache, nor its record of which versions it holds.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from shardstream.cache.layout import node_state_folder
from shardstream.cache.range_gate import RangeGate
from shardstream.cache.safe_paths import open_file
from shardstream.cache.shard_cache import ShardCache
from shardstream.errors import ObjectChangedError, ShardFormatError
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.index import ShardEntry
from shardstream.format.mds import MDSSchema, MDSShardView, parse_offsets
from shardstream.format.shard_view import ShardView
from shardstream.sampling.distinct import distinct
from shardstream.storage import ObjectInfo, ObjectStore
from shardstream.storage.download import Request, run_requests
from shardstream.storage.download_options import DownloadOptions
from shardstream.storage.filesystems import is_local_disk

__all__ = ["RangedShardView", "SampleRanges"]

logger = logging.getLogger(__name__)


class SampleRanges:
    """Reads given samples of shards not yet in the cache, by range requests to their remotes.

    Args:
        cache: The node's shard cache (its streams' stores, index entries and files).
        whole_bytes: A shard up to this size is read in one range, header and samples.
        gap_bytes: Samples of one shard this close are read in one range.
        in_flight: Requests sent at once (``0``: as many as the pool handed to :meth:`views`
            has threads).
    """

    def __init__(
        self, cache: ShardCache, *, whole_bytes: int, gap_bytes: int, in_flight: int = 0
    ) -> None:
        self.cache = cache
        self.whole_bytes = whole_bytes
        self.gap_bytes = gap_bytes
        self.in_flight = in_flight
        self._said_compressed = False
        # Shard -> what was handed out by range, to compare with its whole file once open.
        self._handed: dict[int, _Handed] = {}
        remote = (stream.local for stream in cache.streams if stream.store is not None)
        self._gate = RangeGate(node_state_folder(remote))

    def readable(self, shard: int, *, small: bool = True) -> bool:
        """Whether ``shard``'s samples can be read by range: an uncompressed remote MDS shard.

        ``False`` too when its file is in the cache already (read it there), its remote is a
        folder on this machine's disk (a whole copy is as quick), or it has no samples; and,
        unless ``small``, when it is read in one range (its range would cost what its whole
        download does).
        """
        number, entry = self.cache.locate(shard)
        stream = self.cache.streams[number]
        if stream.store is None or stream.fetcher is not None or entry.format != "mds":
            return False
        if entry.zip_data is not None:
            if not self._said_compressed:
                self._said_compressed = True
                logger.info(
                    "shard %s is compressed (%s): a first batch waits for compressed shards "
                    "whole, since a compressed file cannot be read by range",
                    entry.zip_data.basename, entry.compression,
                )  # fmt: skip
            return False
        if entry.samples < 1 or is_local_disk(stream.store):
            return False
        if not small and entry.raw_data.bytes <= self.whole_bytes:
            return False
        if not getattr(stream.store, "ties_ranges", False):
            return False  # ranges read one by one could mix two versions of a rewritten shard
        return not self.cache.is_present(shard)

    def confirm(self, shard: int) -> None:
        """Check that the bytes handed out by range are the shard's whole file's (now present).

        Once per shard read by range (the first time this process opens its whole file); a
        no-op for any other shard.

        Raises:
            ObjectChangedError: The shard was rewritten between its ranges and its whole
                download: the epoch would hand out samples of two versions.
        """
        handed = self._handed.pop(shard, None)
        if handed is None:
            return
        number, entry = self.cache.locate(shard)
        path = os.path.join(self.cache.streams[number].local, entry.raw_data.basename)
        fd = open_file(path, os.O_RDONLY)  # through no link planted in the cache folder
        try:
            for begin, data in handed.spans:
                if os.pread(fd, len(data), begin) != data:
                    raise ObjectChangedError(
                        f"{handed.url} was rewritten while this epoch read it: its first "
                        f"batch's samples were read by range from version {handed.tag!r}, and "
                        "the whole shard fetched since holds other bytes; a writer is "
                        "rewriting the dataset: start again once it has finished"
                    )
        finally:
            os.close(fd)

    def wait_for_others(self, timeout: float) -> bool:
        """Let go of this process's first batch; wait for the node's (at most ``timeout`` s).

        Whether their ranges were out (``cache/range_gate.py``).
        """
        return self._gate.wait(timeout)

    def let_go(self) -> None:
        """This process's first batch is handed on (or its walk ended): hold nobody back."""
        self._gate.let_go()

    def forget(self) -> None:
        """Drop what was handed out by range (a new epoch reads every shard whole)."""
        self._handed.clear()
        self._gate.let_go()

    def views(
        self,
        wanted: Mapping[int, Sequence[int]],
        schema: Callable[[int], MDSSchema],
        pool: Executor,
    ) -> dict[int, ShardView]:
        """A view of the samples ``wanted[shard]`` of each shard, read by ranges.

        Up to ``in_flight`` requests at once (or as many as ``pool`` has threads), all waited
        for by this thread with their deadlines and retries
        (:func:`~shardstream.storage.download.run_requests`): no thread is started per request
        or per batch. A shard's offset table comes first (unless the shard is read in one
        range), then its samples, tied to the version the first read. A shard rewritten in
        between has no view (its ranges are refused), nor one whose first answer names no tag
        or another size than the index: their samples are to be read from their whole
        downloads. Each view's bytes are kept for :meth:`confirm`.

        Args:
            wanted: Shard -> the indices (within it) of the samples to read.
            schema: The columns of a shard (its index entry's, as the reader holds them).
            pool: Its thread count bounds the requests at once when ``in_flight`` is ``0``.

        Raises:
            ShardFormatError: A shard's bytes disagree with its index entry (the message names
                the shard's URL).
            StorageError: A request failed after its retries, or a range came back short.
        """
        cache = self.cache
        reads: dict[int, _ShardRead] = {}
        for shard in wanted:
            number, entry = cache.locate(shard)
            reads[shard] = _ShardRead(shard, number, entry, cache, self.whole_bytes, self.gap_bytes)
        changed: set[int] = set()
        # The node's look-aheads hold back until this batch is handed on (let_go).
        self._gate.hold()
        if reads:
            # A round trip for every ``in_flight`` requests: a batch spread over hundreds of
            # shards would otherwise wait one per fetch thread's share of them.
            in_flight = self.in_flight or max(1, getattr(pool, "_max_workers", 1))
            _read(reads, wanted, in_flight, changed)
        views: dict[int, ShardView] = {}
        for shard, read in reads.items():
            if shard not in changed:
                views[shard] = read.view(schema(shard), wanted[shard])
                self._handed[shard] = _Handed(read.url, read.tag, read.handed(wanted[shard]))
        return views


class _Handed(NamedTuple):
    """What a shard's view handed out: its URL, the version read, and ``(begin, bytes)`` read."""

    url: str
    tag: str
    spans: list[tuple[int, bytes]]


#: A range's answer: its bytes (a first range's with the version it read), or the refusal of
#: a range tied to a version the object no longer is.
_Answer = bytes | tuple[bytes, ObjectInfo | None] | ObjectChangedError


def _read(
    reads: Mapping[int, _ShardRead],
    wanted: Mapping[int, Sequence[int]],
    in_flight: int,
    changed: set[int],
) -> None:
    """Each shard's first range, then its samples' as the first lands: ``in_flight`` at once.

    A shard refused (rewritten, or not identified) is added to ``changed``; the rest of its
    ranges are ignored. Any other failure ends the reading, abandoning what is in flight.
    """
    ranges: list[tuple[_ShardRead, int, int]] = []  # request -> (shard, begin, end); first: -1

    def first(read: _ShardRead) -> Request[_Answer]:
        ranges.append((read, -1, read.first_range()))
        return read.first_request()

    def deliver(index: int, answer: _Answer) -> list[Request[_Answer]]:
        read, begin, end = ranges[index]
        if read.shard in changed:
            return []
        try:
            if isinstance(answer, ObjectChangedError):
                raise answer
            if begin < 0:
                assert isinstance(answer, tuple)
                read.take_head(read.took_first(*answer))
            else:
                assert isinstance(answer, bytes)
                read.take(begin, read.checked(begin, end, answer))
        except ObjectChangedError as exc:
            changed.add(read.shard)
            logger.warning("%s (its samples come from the whole shard instead)", exc)
            return []
        if begin >= 0:
            return []
        more = []
        for start, stop in read.sample_ranges(wanted[read.shard]):
            ranges.append((read, start, stop))
            more.append(read.request(start, stop))
        return more

    run_requests([first(read) for read in reads.values()], deliver, in_flight)


def _or_refused(
    call: Callable[[], bytes | tuple[bytes, ObjectInfo | None]],
) -> Callable[[], _Answer]:
    """``call``, whose refusal as a changed object is its answer (the shard's, not the batch's)."""

    def run() -> _Answer:
        try:
            return call()
        except ObjectChangedError as exc:
            return exc

    return run


class _ShardRead:
    """One shard's ranges: the first (header, or the whole small shard), then its samples."""

    def __init__(
        self, shard: int, number: int, entry: ShardEntry, cache: ShardCache,
        whole_bytes: int, gap_bytes: int,
    ) -> None:  # fmt: skip
        stream = cache.streams[number]
        assert stream.store is not None
        self.shard = shard
        self.entry = entry
        self.store: ObjectStore = stream.store
        self.options: DownloadOptions = stream.options
        self.key = entry.raw_data.basename
        self.url = self.store.url(self.key)
        self.tag = ""  # the version the first range read
        self.spans: list[tuple[int, bytes]] = []
        self.size = entry.raw_data.bytes
        self.whole = self.size <= whole_bytes
        self.gap_bytes = gap_bytes
        self.buffer: bytes | mmap.mmap = b""
        self.offsets: NDArray[np.int64] = np.empty(0, np.int64)

    def first_range(self) -> int:
        """Where the first range ends: the whole shard if small, else its offset table."""
        return self.size if self.whole else min(self.size, 4 * (self.entry.samples + 2))

    def first_request(self) -> Request[_Answer]:
        """The request for the first range and the version it reads (see :meth:`took_first`)."""
        end = self.first_range()
        return Request(
            _or_refused(
                lambda: self.store.get_range_info(self.key, 0, end)  # type: ignore[attr-defined]
            ),
            self.options,
            f"reading bytes 0-{end - 1} of {self.url}",
        )

    def took_first(self, data: bytes, info: ObjectInfo | None) -> bytes:
        """The first range's bytes, once its answer named the version read and the index's size.

        Raises:
            ObjectChangedError: The answer named no version, or another size than the index
                (the shard is read whole, where a size that disagrees is reported).
        """
        if info is None or not info.etag or info.size != self.size:
            raise ObjectChangedError(
                f"{self.url}: its first range's answer named "
                f"{'no version' if info is None or not info.etag else f'{info.size} bytes'}, "
                f"not the {self.size} bytes of index.json"
            )
        self.tag = info.etag
        return self.checked(0, self.first_range(), data)

    def request(self, begin: int, end: int) -> Request[_Answer]:
        """The request for bytes ``begin .. end - 1`` of the first range's version.

        Its answer is :class:`~shardstream.errors.ObjectChangedError` once the shard was
        rewritten since its first range.
        """
        return Request(
            _or_refused(lambda: self.store.get_range(self.key, begin, end, if_match=self.tag)),
            self.options,
            f"reading bytes {begin}-{end - 1} of {self.url}",
        )

    def checked(self, begin: int, end: int, data: bytes) -> bytes:
        """``data``, the bytes ``begin .. end - 1`` asked for, unless of another length.

        Raises:
            ShardFormatError: A range of another length.
        """
        if len(data) != end - begin:  # a store's answer is checked again: it is untrusted
            raise ShardFormatError(
                f"{self.url}: asked for bytes {begin}-{end - 1} ({end - begin}), got "
                f"{len(data)}; the remote shard is shorter than index.json says"
            )
        return data

    def take_head(self, head: bytes) -> None:
        """Check the offset table against the index entry; keep the bytes."""
        try:
            self.offsets = parse_offsets(head, self.size, self.entry.samples, self.url)
        except ShardFormatError as exc:
            raise ShardFormatError(
                f"{exc} (read by range: the remote shard and its entry in index.json disagree; "
                f"rewrite the dataset, or fix its index.json)"
            ) from None
        self.spans.append((0, head))
        if self.whole:
            self.buffer = head
            return
        # Unread pages of an anonymous mapping cost nothing: the samples are written at their
        # offsets, so the shard decodes exactly as a whole file would.
        self.buffer = mmap.mmap(-1, self.size)
        self.buffer[: len(head)] = head

    def sample_ranges(self, indices: Sequence[int]) -> list[tuple[int, int]]:
        """The ranges to read for samples ``indices``, nearby ones coalesced (none if whole)."""
        if self.whole:
            return []
        picked = distinct(np.asarray(indices, np.int64))
        begins, ends = self.offsets[picked], self.offsets[picked + 1]
        ranges: list[tuple[int, int]] = []
        for begin, end in zip(begins.tolist(), ends.tolist(), strict=True):
            if ranges and begin - ranges[-1][1] <= self.gap_bytes:
                ranges[-1] = (ranges[-1][0], max(end, ranges[-1][1]))
            elif end > begin:
                ranges.append((begin, end))
        return ranges

    def take(self, begin: int, data: bytes) -> None:
        """Place a range's bytes at their offset."""
        assert isinstance(self.buffer, mmap.mmap)
        self.buffer[begin : begin + len(data)] = data
        self.spans.append((begin, data))

    def handed(self, indices: Sequence[int]) -> list[tuple[int, bytes]]:
        """``(begin, bytes)`` of what a view of samples ``indices`` hands out.

        The offset table and the samples' bytes (of a shard read whole, only those).
        """
        if not self.whole:
            return self.spans
        table = min(self.size, 4 * (self.entry.samples + 2))
        picked = distinct(np.asarray(indices, np.int64))
        spans = [(0, bytes(self.buffer[:table]))]
        for begin, end in zip(self.offsets[picked].tolist(), self.offsets[picked + 1].tolist(),
                              strict=True):  # fmt: skip
            spans.append((begin, bytes(self.buffer[begin:end])))
        return spans

    def view(self, schema: MDSSchema, indices: Sequence[int]) -> RangedShardView:
        """The view of the samples read."""
        inner = MDSShardView(self.buffer, schema, self.entry.samples, source=self.url)
        read = None if self.whole else frozenset(int(index) for index in indices)
        return RangedShardView(inner, read, len(self.buffer))


class RangedShardView:
    """The samples of one shard read by ranges (implements the shard-view protocol).

    Held in this process's memory, never in the cache; only the samples read are handed out.

    Args:
        inner: The shard's view over the bytes read (the rest of its buffer is zeros).
        read: The sample indices read, or ``None`` when the whole shard was.
        size: Bytes held.
    """

    in_memory = True  # another process could not read it: never handed over by id
    grouped_decode = True
    reads_runs = False

    def __init__(self, inner: MDSShardView, read: frozenset[int] | None, size: int) -> None:
        self._inner = inner
        self._read = read
        self._size = size
        self.source = inner.source

    @property
    def names(self) -> list[str]:
        """The columns, in :meth:`read_columns` order."""
        return self._inner.names

    @property
    def held_bytes(self) -> int:
        """The bytes read (or mapped for them)."""
        return self._size

    def __len__(self) -> int:
        return len(self._inner)

    def get(self, index: int) -> dict[str, Any]:
        """Sample ``index``, if it was read."""
        self._check([index])
        return self._inner.get(index)

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Samples ``indices`` as columns; every one must have been read."""
        self._check(indices)
        return self._inner.read_columns(indices, views=views)

    def sample_file(self) -> None:
        """No file: the bytes are in memory."""

    def let_go(self, first: int, stop: int) -> None:
        """Nothing to unmap that a later read could fault in again."""

    def release(self) -> None:
        """Drop the bytes (values handed out stay valid)."""
        self._inner.release()

    def _check(self, indices: Sequence[int]) -> None:
        if self._read is None:
            return
        missing = [index for index in indices if index not in self._read]
        if missing:
            raise IndexError(
                f"{self.source}: samples {missing[:5]} were not read by range (only those of "
                "the first batch are); read them from the whole shard"
            )
