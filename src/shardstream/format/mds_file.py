"""An MDS shard read from its open file with ``pread``, for shards of large samples.

A mapped shard costs a process resident memory for every page it has touched, and a fault
maps a whole cached folio (up to 2 MiB here): a shuffled epoch of 100 KiB images from mapped
shards leaves the whole dataset counted in the process's resident set after a few batches.
Those pages are shared with the page cache, but they count in ``VmRSS``, in the out-of-memory
killer's score and in every peak-memory report, and "memory that grows with the dataset" is
what users of data loaders report as a leak. Read with ``pread``, a sample comes out of the
page cache in a system call or three, and nothing is mapped: reading an epoch of 1 GiB of
~100 KiB samples, the process's peak RSS is 380 MiB instead of 1.4 GiB. A system call per
sample costs more the smaller the samples are, so readers map shards of small samples
(``ShardFiles``).

:func:`read_samples` reads the samples of mapped shards the same way, into one buffer, for a
process that reads other processes' shuffled batches and must not map what they read.
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ShardFormatError
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.mds import MDSSchema, MDSShardView, ShardSamples, parse_offsets

__all__ = ["CAN_PREAD", "MDSFileView", "SampleRuns", "ShardFile", "read_samples"]

#: Whether files can be read with ``os.pread`` here (POSIX).
CAN_PREAD = hasattr(os, "pread")


class ShardFile:
    """An open, read-only shard file, closed when the last object that holds it goes.

    Views and the getters they hand out hold it, so a getter that outlives its view (another
    thread's, say) never reads a closed descriptor, or one the number was given to since.

    Args:
        fd: The open descriptor; the object owns it from now on.
        size: The file's size.
    """

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path: str) -> ShardFile:
        """Open ``path`` read-only.

        Raises:
            OSError: It cannot be opened.
        """
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size)

    def __len__(self) -> int:
        return self.size

    def read(self, size: int, offset: int, source: str) -> bytes:
        """``size`` bytes at ``offset``.

        Raises:
            ShardFormatError: The file ends before them (it was cut short while open).
        """
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise _cut_short(source, len(data), size, offset)
        return data

    def chunks(self, source: str, chunk: int = 8 << 20) -> Iterator[bytes]:
        """The whole file, in pieces of ``chunk`` bytes (the last may be shorter)."""
        for offset in range(0, self.size, chunk):
            yield self.read(min(chunk, self.size - offset), offset, source)

    def close(self) -> None:
        """Close the descriptor now (only when nothing else can still read it)."""
        self._closer()


class MDSFileView(ShardSamples):
    """Random access to the samples of one MDS shard, read from its file with ``pread``.

    The same interface as :class:`~shardstream.format.mds.MDSShardView`; decoded values never
    refer to the file.

    Args:
        file: The open shard file.
        schema: The shard's columns, from its index entry.
        samples: The sample count the index records.
        source: The file's path or URL, named in errors.
        zero_copy: Return ``bytes`` columns as memoryviews (of values read into memory).

    Raises:
        ShardFormatError: The header or offset table is truncated or inconsistent.
    """

    def __init__(
        self,
        file: ShardFile,
        schema: MDSSchema,
        samples: int,
        *,
        source: str,
        zero_copy: bool = False,
    ) -> None:
        table = min(file.size, 4 * (samples + 2))
        head = file.read(table, 0, source) if file.size >= 8 else b""
        offsets = parse_offsets(head, file.size, samples, source)
        self.source = source
        self.schema = schema
        self._file = file
        self._offsets = offsets.tolist()
        get, row = schema.file_getters(file, self._offsets, source, zero_copy=zero_copy)
        self.get = get
        self._row = row
        self._columns = len(schema.names)

    def get_many(self, indices: Sequence[int]) -> list[list[Any]]:
        """Decode samples ``indices`` into one list per column (``schema.names``)."""
        row = self._row
        rows = [row(index) for index in indices]
        if not rows:
            return [[] for _ in range(self._columns)]
        return [list(column) for column in zip(*rows, strict=True)]

    #: Values read from the file are already the caller's own: views have nothing to add.
    get_many_views = get_many

    def sample_bytes(self, index: int) -> memoryview:
        """The raw bytes of sample ``index`` (read into memory)."""
        begin, end = self._offsets[index], self._offsets[index + 1]
        return memoryview(self._file.read(end - begin, begin, self.source))

    def release(self) -> None:
        """Drop this view's hold on the file; it closes once no getter holds it either."""
        self.get = self.get_many = self.get_many_views = _released  # type: ignore[method-assign,assignment]
        self._row = _released


def _released(_: Any) -> Any:
    raise ValueError("the shard view was released")


def _cut_short(source: str, got: int, size: int, offset: int) -> ShardFormatError:
    return ShardFormatError(
        f"{source}: read {got} of {size} bytes at offset {offset}: the file was cut short "
        "while open; delete it so it is fetched again"
    )


def read_samples(
    sources: Sequence[tuple[MDSShardView, ShardFile]],
    which: NDArray[np.int64],
    indices: NDArray[np.int64],
) -> list[ColumnValues]:
    """Decode samples of mapped shards of one schema, read from their files: nothing is mapped.

    Sample ``k`` is sample ``indices[k]`` of the shard ``sources[which[k]]`` names: its view
    (mapped) and its file, open. Each run of samples adjacent in one file, in the order given,
    takes one ``pread``; the runs go into one buffer, which the batch decoder reads as it would
    a shard. The values come out in the order given (a column of fixed-shape arrays as one
    array), and no page of any mapping is touched: a mapped page counts in the process's
    resident memory from its first read until it is unmapped, and a shuffled epoch reads every
    page of its shards.

    Raises:
        ShardFormatError: A file is shorter than its mapping (cut short since), or a sample is
            corrupt (decoded again from its file, which names it).
    """
    runs = SampleRuns(sources, which, indices)
    return runs.decode(runs.read())


class SampleRuns:
    """Where samples of mapped shards lie in their files, and where they go in one buffer.

    The samples are those :func:`read_samples` takes (same arguments); each run of samples
    adjacent in one file, in the order given, is read as one piece. Plain values: computing
    them reads nothing, so the reads can be made elsewhere (``pread`` with :meth:`read`, or
    many in one system call) and the buffer decoded with :meth:`decode`.
    """

    def __init__(
        self,
        sources: Sequence[tuple[MDSShardView, ShardFile]],
        which: NDArray[np.int64],
        indices: NDArray[np.int64],
    ) -> None:
        self.views = [view for view, _ in sources]
        self.files = [file for _, file in sources]
        self.which = which
        self.indices = indices
        count = len(indices)
        begins = np.empty(count, np.int64)
        ends = np.empty(count, np.int64)
        for number, view in enumerate(self.views):
            mine = which == number
            picked = indices[mine]
            begins[mine] = view.offset_table[picked]
            ends[mine] = view.offset_table[picked + 1]
        #: The samples' offsets in the buffer (one more than the samples: its size).
        self.staged = np.zeros(count + 1, np.int64)
        np.cumsum(ends - begins, out=self.staged[1:])
        # A run ends where the next sample is not the next one in the same file.
        cuts = np.flatnonzero((begins[1:] != ends[:-1]) | (which[1:] != which[:-1])) + 1
        firsts = np.concatenate(([0], cuts)).astype(np.int64)
        lasts = np.concatenate((cuts, [count])).astype(np.int64) - 1
        #: Each run's file (its position in ``sources``), offset in it, size, and offset in the
        #: buffer.
        self.run_files = which[firsts] if count else np.empty(0, np.int64)
        self.run_begins = begins[firsts] if count else np.empty(0, np.int64)
        self.run_sizes = (ends[lasts] - begins[firsts]) if count else np.empty(0, np.int64)
        self.run_dest = self.staged[firsts] if count else np.empty(0, np.int64)

    @property
    def size(self) -> int:
        """The buffer's size: every sample's bytes."""
        return int(self.staged[-1])

    def read(self) -> bytes:
        """The buffer, read with one ``pread`` a run.

        Raises:
            ShardFormatError: A file ends before a run (cut short since it was opened).
        """
        files, begins = self.run_files.tolist(), self.run_begins.tolist()
        sizes = self.run_sizes.tolist()
        fds, pread = [file.fd for file in self.files], os.pread
        parts = [
            pread(fds[number], size, begin)
            for number, begin, size in zip(files, begins, sizes, strict=True)
        ]
        stage = b"".join(parts)
        if len(stage) != self.size:
            for part, number, begin, size in zip(parts, files, begins, sizes, strict=True):
                if len(part) != size:
                    raise _cut_short(self.views[number].source, len(part), size, begin)
        return stage

    def read_again(self, runs: Sequence[int], into: memoryview) -> None:
        """Read runs ``runs`` with ``pread`` into their places in the buffer ``into``.

        For the runs a batched read did not complete: this read fails the way
        :meth:`read` would, or fills them.

        Raises:
            ShardFormatError: A file ends before a run.
            OSError: A file cannot be read.
        """
        for run in runs:
            number, begin = int(self.run_files[run]), int(self.run_begins[run])
            size, dest = int(self.run_sizes[run]), int(self.run_dest[run])
            into[dest : dest + size] = self.files[number].read(
                size, begin, self.views[number].source
            )

    def decode(self, stage: bytes | mmap.mmap) -> list[ColumnValues]:
        """Decode the samples from the buffer ``stage`` (bytes, or an mmap) into columns.

        Raises:
            ShardFormatError: A sample is corrupt (decoded again from its file, which names
                it); the views need not be open any more.
        """
        if len(self.indices) == 0:
            return [[] for _ in self.views[0].schema.names]
        shard_of, ids = self.which.tolist(), self.indices.tolist()
        getters: dict[int, Callable[[int], dict[str, Any]]] = {}

        def again(k: int) -> dict[str, Any]:
            # A corrupt sample, read again from its file: the error names the file and sample.
            number = shard_of[k]
            get = getters.get(number)
            if get is None:
                view = self.views[number]
                get = getters[number] = view.schema.file_getters(
                    self.files[number], view.offset_table.tolist(), view.source
                )[0]
            return get(ids[k])

        decode = (
            self.views[0]
            .schema.columns_decoder()
            .bind(stage, memoryview(stage), self.staged, again)
        )
        return decode(range(len(ids)))
