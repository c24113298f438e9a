"""The shards a reader keeps open: fetched through the node's cache, let go least recently used.

A reader keeps shards open up to a count and a size (the read policy's ``open_shards`` and
``open_bytes``); beyond either, the least recently used are let go, so that an evicted shard's
disk space is freed, and many tiny shards are not opened again for every sample. Each shard is
marked as used once an epoch (its files' times), for the cache's least-recently-used eviction.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from typing import Protocol

import numpy as np

from shardstream.cache import ShardCache
from shardstream.cache.sample_ranges import SampleRanges
from shardstream.errors import (
    ChecksumError,
    ShardFormatError,
    ShardNotFoundError,
    ShardstreamError,
)
from shardstream.format.mds import MDSSchema
from shardstream.format.shard_view import ShardView
from shardstream.pipeline.batch_assembly import Gather
from shardstream.pipeline.policy import ReadPolicy

__all__ = ["OpenShards", "ShardSource"]

logger = logging.getLogger(__name__)

_REOPEN_ATTEMPTS = 3  # a shard evicted between being fetched and being opened is fetched again


class ShardSource(Protocol):
    """A stream's shards on local disk, opened by their number in the stream.

    ``LocalDataset`` (MDS) and ``ParquetDataset`` (row groups) are the sources a dataset has.
    """

    def shard_view(self, shard: int) -> ShardView:
        """Random access to shard ``shard``'s samples (opens it)."""
        ...

    def release(self, shard: int) -> None:
        """Let go of shard ``shard`` (values handed out stay valid)."""
        ...


class OpenShards:
    """Open views of dataset-wide shards, fetched into the node's cache on demand.

    Args:
        datasets: One reader per stream, over the stream's local folder.
        stream_first_shard: The first dataset-wide shard of every stream, plus the total.
        cache: The node's shard cache.
        policy: The read policy (how many shards and bytes stay open).
    """

    def __init__(
        self,
        datasets: Sequence[ShardSource],
        stream_first_shard: Sequence[int],
        cache: ShardCache,
        policy: ReadPolicy,
    ) -> None:
        self.datasets = list(datasets)
        # A source may make gatherers of a batch across its shards (a table's ``gatherer``).
        makers = {getattr(source, "gatherer", None) for source in self.datasets}
        #: Makes a gatherer of batches across shards (one per epoch's decode stage), when
        #: every source has the same one; else ``None``.
        self.gatherer: Callable[[int], Gather] | None = makers.pop() if len(makers) == 1 else None
        self.cache = cache
        self.policy = policy
        self._stream_of_shard = np.repeat(
            np.arange(len(datasets)), np.diff(np.asarray(stream_first_shard))
        ).tolist()
        self._first_shard = list(stream_first_shard)
        self._open: OrderedDict[int, ShardView] = OrderedDict()
        self._sizes: dict[int, int] = {}
        #: Bytes the open views hold.
        self.held = 0
        # Shards marked as used this epoch: touched, or fetched by this reader (their files'
        # times are fresh then).
        self._marked: set[int] = set()
        self._ranges = SampleRanges(
            cache,
            whole_bytes=policy.range_whole_bytes,
            gap_bytes=policy.range_gap_bytes,
            in_flight=policy.range_requests,
        )

    def __contains__(self, shard: int) -> bool:
        return shard in self._open

    def shards(self) -> list[int]:
        """The open shards, least recently used first."""
        return list(self._open)

    def read_whole_in_place(self, whole: bool) -> None:
        """Whether sources read in place open a small dataset's shards whole (the route's choice).

        Shards open already stay as they are.
        """
        for source in self.datasets:
            setting = getattr(source, "read_whole_in_place", None)  # only ``LocalDataset``'s
            if setting is not None:
                setting(whole)

    def hold_for_workers(self) -> None:
        """Open and keep the shards each DataLoader worker forked from here would read whole.

        Those of each source read in place that the policy holds
        (``LocalDataset.held_for_workers``, ``ReadPolicy.holds_for_workers``), within
        ``open_bytes``: workers forked next inherit the views and read nothing. A shard that
        fails to open is left to the workers, whose read of it says why.
        """
        for stream, source in enumerate(self.datasets):
            held = getattr(source, "held_for_workers", None)  # only ``LocalDataset``'s
            if held is None:
                continue
            first = self._first_shard[stream]
            for shard in (first + local for local in held()):
                if shard in self._open:
                    continue
                if self.held + self._bytes(shard) > self.policy.open_bytes:
                    return
                with contextlib.suppress(ShardstreamError, OSError):
                    self.view(shard)

    def drop_changed(self) -> None:
        """Let go of each open shard read whole in place whose file changed since it was read.

        Before DataLoader workers fork, so that what they inherit is what the files hold
        (``LocalDataset.changed``): they read a shard let go again.
        """
        for shard in list(self._open):
            stream = self._stream_of_shard[shard]
            changed = getattr(self.datasets[stream], "changed", None)  # only ``LocalDataset``'s
            if changed is not None and changed(shard - self._first_shard[stream]):
                self.release(shard)

    def new_epoch(self) -> None:
        """Forget which shards were marked as used: mark each again on its first use."""
        self._marked.clear()
        self._ranges.forget()

    def mean_sample_bytes(self, shards: Sequence[int]) -> float:
        """The mean bytes a sample of ``shards``, from their index entries."""
        entries = [self.cache.locate(shard)[1] for shard in shards]
        return sum(entry.raw_data.bytes for entry in entries) / max(
            1, sum(entry.samples for entry in entries)
        )

    def view(self, shard: int) -> ShardView:
        """The open view of ``shard``, fetching and opening it when needed.

        Raises:
            ShardNotFoundError: The shard vanished again and again, or a local-only stream
                lacks it.
            ChecksumError, ShardFormatError: The shard is corrupt (fetched twice from the
                remote, or a local-only stream's only copy).
        """
        view = self._open.get(shard)
        if view is not None:
            self._open.move_to_end(shard)
            return view
        refetched = False
        for attempt in range(_REOPEN_ATTEMPTS):
            try:
                view = self.cache.open(shard, lambda: self._opener(shard))
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
        return self.keep(shard, view)

    def views(self, shards: Iterable[int]) -> dict[int, ShardView]:
        """Each of ``shards``' view, as :meth:`view` and :meth:`mark` give it, in that order.

        A shuffled batch of a table names every open row group: one call, not two a shard.
        """
        out: dict[int, ShardView] = {}
        opened, marked = self._open, self._marked
        for shard in shards:
            view = opened.get(shard)
            if view is None:
                view = self.view(shard)
            else:
                opened.move_to_end(shard)
            if shard not in marked:
                self.mark(shard)
            out[shard] = view
        return out

    def open_in_pool(self, shard: int) -> ShardView | None:
        """Fetch and open ``shard`` (in a fetch thread); ``None`` leaves it to :meth:`view`.

        A shard that vanished or failed its checks is left to the reader's thread, which
        fetches it again and says why.
        """
        try:
            view, fetched = self.cache.open_fetched(shard, lambda: self._opener(shard))
        except (ShardNotFoundError, ChecksumError, ShardFormatError):
            return None
        if fetched:
            self._marked.add(shard)
        elif shard not in self._marked:
            self.mark(shard)
        return view

    def fetch_in_pool(self, shard: int) -> None:
        """Make ``shard`` present in the cache (a look-ahead task of a fetch thread)."""
        if self.cache.ensure(shard):
            self._marked.add(shard)

    def read_by_ranges(
        self, shards: Sequence[int], local: Sequence[int], pool: Executor
    ) -> dict[int, ShardView]:
        """Views of the samples ``local`` of ``shards`` whose shards are not here yet, by ranges.

        Only shards that :class:`~shardstream.cache.sample_ranges.SampleRanges` can read that
        way, and that are not open; the views are not kept open (their shards are fetched
        whole for the rest of the epoch). Small shards (one range each) are not, when the
        batch needs the policy's ``range_shard_share`` of the dataset's shards or more; larger
        shards are not, when the batch's samples of them hold more than
        the policy's ``range_bytes_share`` of their bytes.
        """
        wanted: dict[int, list[int]] = {}
        for shard, index in zip(shards, local, strict=True):
            wanted.setdefault(shard, []).append(index)
        # Shards of a small dataset read in place, read whole when opened: read with pread.
        firsts = {shard: self._first_view(shard) for shard in wanted if shard not in self._open}
        first = {shard: view for shard, view in firsts.items() if view is not None}
        small = self.policy.ranges_small_shards(len(wanted), self.cache.num_shards)
        readable = {
            shard: indices
            for shard, indices in wanted.items()
            if shard not in self._open and shard not in first
            and self._schema(shard) is not None and self._ranges.readable(shard, small=small)
        }  # fmt: skip
        large = [shard for shard in readable if self._bytes(shard) > self.policy.range_whole_bytes]
        if large:
            ranged = self.mean_sample_bytes(large) * sum(len(readable[s]) for s in large)
            if ranged > self.policy.range_bytes_share * sum(self._bytes(shard) for shard in large):
                for shard in large:  # fetched whole: a range would carry much of it again
                    del readable[shard]
        if not readable:
            return first
        return {**first, **self._ranges.views(readable, self._checked_schema, pool)}

    def wait_for_ranges(self) -> None:
        """Wait for the node's first-batch ranges, up to the policy's ``range_hold_s``.

        This reader's first batch is handed on by then: it holds the others back no more.
        """
        self._ranges.wait_for_others(self.policy.range_hold_s)

    def ranges_done(self) -> None:
        """The walk ended: this reader's first batch holds the node's look-aheads back no more."""
        self._ranges.let_go()

    def _bytes(self, shard: int) -> int:
        return self.cache.locate(shard)[1].raw_data.bytes

    def keep(self, shard: int, view: ShardView) -> ShardView:
        """Keep ``view`` open, letting go of the least recently used beyond the limits."""
        if shard not in self._marked:
            self.mark(shard)
        self._open[shard] = view
        self._sizes[shard] = view.held_bytes
        self.held += view.held_bytes
        while len(self._open) > 1 and (
            len(self._open) > self.policy.open_shards or self.held > self.policy.open_bytes
        ):
            self.release(next(iter(self._open)))
        return view

    def mark(self, shard: int) -> None:
        """Mark ``shard`` as just used (its files' times), once an epoch."""
        self._marked.add(shard)
        self.cache.touch(shard)

    def marked(self, shard: int) -> bool:
        """Whether ``shard`` was marked as used this epoch."""
        return shard in self._marked

    def release(self, shard: int) -> None:
        """Let go of ``shard`` (values handed out stay valid)."""
        self._open.pop(shard, None)
        self.held -= self._sizes.pop(shard, 0)
        stream = self._stream_of_shard[shard]
        self.datasets[stream].release(shard - self._first_shard[stream])

    def _first_view(self, shard: int) -> ShardView | None:
        stream = self._stream_of_shard[shard]
        # Only an MDS source read in place (``LocalDataset``) has views for a first batch.
        first_view = getattr(self.datasets[stream], "first_view", None)
        if first_view is None:
            return None
        view: ShardView | None = first_view(shard - self._first_shard[stream])
        return view

    def _schema(self, shard: int) -> MDSSchema | None:
        stream = self._stream_of_shard[shard]
        # Only an MDS source (``LocalDataset``) has a schema: row groups are not read by range.
        schema = getattr(self.datasets[stream], "schema", None)
        if schema is None:
            return None
        found: MDSSchema | None = schema(shard - self._first_shard[stream])
        return found

    def _checked_schema(self, shard: int) -> MDSSchema:
        schema = self._schema(shard)
        assert schema is not None
        return schema

    def _opener(self, shard: int) -> ShardView:
        stream = self._stream_of_shard[shard]
        view: ShardView = self.datasets[stream].shard_view(shard - self._first_shard[stream])
        # Its first batch's samples, if read by range, must be the file's: never two versions.
        self._ranges.confirm(shard)
        return view
