"""Reading the next group of shuffled samples from their files while this one is decoded.

A shuffled batch of small samples is read from the shard files (:class:`SampleRuns`), not
from their mappings, so that the reading process's resident memory does not grow to the size
of every shard it reads. Read with ``pread``, each sample costs the loader's thread a system
call. :class:`ReadAhead` hands a group's reads to a thread of its own, which makes them all
with one io_uring system call (:mod:`shardstream.cache.uring`) without the interpreter's
lock, into a buffer of its own; the loader's thread decodes the group before while it runs.

Where io_uring cannot be used, :meth:`ReadAhead.submit` says so by returning ``None``, and the
caller reads with ``pread`` itself: a thread making one ``pread`` a sample would wait for the
interpreter's lock after each.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import numpy as np

from shardstream.cache.uring import Ring, open_ring
from shardstream.format.mds_file import SampleRuns
from shardstream.pipeline.column_batch import ColumnBatch

__all__ = ["GroupReads", "ReadAhead"]

logger = logging.getLogger(__name__)

# Pages of a new buffer are mapped when it is made (MAP_POPULATE), in the reading thread: a
# read into pages not yet mapped takes io_uring's slow path.
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)


class ReadAhead:
    """A thread that reads groups of samples from their files, one system call a group.

    Made per iteration; :meth:`close` it at the end (the thread and its ring go). Nothing is
    started before the first :meth:`submit`.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._ring: Ring | None = None  # made and used by the pool's thread only
        #: False once io_uring turned out not to be usable here.
        self.usable = True
        self._kept: mmap.mmap | None = None

    def submit(self, runs: SampleRuns) -> Future[mmap.mmap | None] | None:
        """Start reading ``runs``; ``None`` if this reader cannot (read them yourself).

        The future's result is the buffer, for :meth:`SampleRuns.decode`, or ``None`` if
        io_uring cannot be used here (read them yourself, then; later calls return ``None``).
        It raises what :meth:`SampleRuns.read` would (a file cut short, say).
        """
        if not self.usable:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="shardstream-read")
        return self._pool.submit(self._read, runs)

    def result(self, future: Future[mmap.mmap | None], runs: SampleRuns) -> mmap.mmap | bytes:
        """The buffer ``future`` reads, or ``runs`` read with ``pread`` if io_uring failed."""
        stage = future.result()
        if stage is None:
            self.usable = False
            return runs.read()
        return stage

    def _read(self, runs: SampleRuns) -> mmap.mmap | None:
        if self._ring is None:
            if not self.usable:
                return None
            try:
                self._ring = open_ring()
            except OSError as exc:
                logger.debug("reading shuffled samples with pread: %s", exc)
                self.usable = False
                return None
        stage = mmap.mmap(-1, max(1, runs.size), _FLAGS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(stage))
        fds = np.array([file.fd for file in runs.files], np.int32)[runs.run_files]
        addresses = (base + runs.run_dest).astype(np.uint64)
        try:
            results = self._ring.read(fds, runs.run_begins, runs.run_sizes, addresses)
        except OSError as exc:  # the ring broke: this group, and the rest, with pread
            logger.warning("io_uring failed (%s); reading shuffled samples with pread", exc)
            self.usable = False
            self._ring = None
            self._kept = stage  # reads may have been in flight into it: never unmapped
            return None
        short = np.flatnonzero(results != runs.run_sizes)
        if short.size:  # read again with pread: that fills them, or says what is wrong
            runs.read_again(short.tolist(), memoryview(stage))
        return stage

    def close(self) -> None:
        """Stop the thread (after the read in flight, if any) and close its ring."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None


class GroupReads:
    """Groups of batches read from their files, each group read while the one before is used.

    Args:
        ahead: Read a group ahead, in :class:`ReadAhead`'s thread; if false, or where that
            cannot be, each group is read with ``pread`` when it is started.
    """

    def __init__(self, *, ahead: bool = True) -> None:
        self._ahead = ReadAhead() if ahead else None
        self._pending: tuple[Future[mmap.mmap | None], SampleRuns, Sequence[int]] | None = None

    def start(
        self, runs: SampleRuns, widths: Sequence[int], *, wait: bool = False
    ) -> Iterator[ColumnBatch]:
        """Start reading ``runs`` (batches of ``widths`` samples); yield the batches ready.

        Those are the group started before, if any, and this group's too if ``wait`` or if
        it cannot be read ahead; otherwise this group's come out with the next group, or
        from :meth:`finish`.
        """
        future = None if wait or self._ahead is None else self._ahead.submit(runs)
        yield from self.finish()
        if future is None:
            yield from _batches(runs, runs.read(), widths)
        else:
            self._pending = (future, runs, widths)

    def finish(self) -> Iterator[ColumnBatch]:
        """Yield the batches of the group read ahead, if any (waiting for its reads)."""
        if self._pending is None:
            return
        future, runs, widths = self._pending
        self._pending = None
        assert self._ahead is not None
        yield from _batches(runs, self._ahead.result(future, runs), widths)

    def close(self) -> None:
        """Let go of a group read ahead and not used, and stop the reading thread."""
        self._pending = None
        if self._ahead is not None:
            self._ahead.close()


def _batches(
    runs: SampleRuns, stage: mmap.mmap | bytes, widths: Sequence[int]
) -> Iterator[ColumnBatch]:
    """The batches of ``widths`` samples that ``runs`` read into ``stage`` hold, in order."""
    columns = runs.decode(stage)
    names = runs.names
    start = 0
    for width in widths:
        stop = start + width
        yield ColumnBatch(list(names), [cast(Any, column)[start:stop] for column in columns])
        start = stop
