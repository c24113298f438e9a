"""An MDS shard read from its open file with ``pread``, and runs of samples read into a buffer.

A mapped shard costs a process resident memory for every page it has touched, and a shuffled
epoch touches every page; read with ``pread``, a sample comes out of the page cache and
nothing is mapped. A system call per sample costs more the smaller the samples, so only
shards of large samples are read this way (the read policy decides: ``ReadPolicy.opening``).

:class:`SampleRuns` reads the samples of mapped shards the same way, a run of adjacent ones a
read, into one buffer, for batches whose pages must not be mapped.
"""

from __future__ import annotations

import array
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ShardFormatError
from shardstream.format.batch_decode import ColumnValues
from shardstream.format.mds import MDSSchema, ShardSamples, parse_offsets
from shardstream.format.shard_file import CAN_PREAD, SampleFile, ShardFile, cut_short

__all__ = ["CAN_PREAD", "MDSFileView", "SampleFile", "SampleRuns", "ShardFile", "read_samples"]


class MDSFileView(ShardSamples):
    """Random access to the samples of one MDS shard, read from its file with ``pread``.

    Implements :class:`~shardstream.format.shard_view.ShardView`; decoded values never refer
    to the file.

    Args:
        file: The open shard file.
        schema: The shard's columns, from its index entry.
        samples: The sample count the index records.
        source: The file's path or URL, named in errors.
        zero_copy: Return ``bytes`` columns as memoryviews (of values read into memory).
        runs: Read a batch's samples as runs, one ``pread`` a run, decoded at once
            (``ReadPolicy.reads_runs``: small samples), not one by one.

    Raises:
        ShardFormatError: The header or offset table is truncated or inconsistent.
    """

    #: Values read from the file are this process's own; another process reads them as fast.
    in_memory = False
    grouped_decode = True

    def __init__(
        self,
        file: ShardFile,
        schema: MDSSchema,
        samples: int,
        *,
        source: str,
        zero_copy: bool = False,
        runs: bool = False,
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
        self._runs = SampleFile(file, offsets, schema, source) if runs else None

    @property
    def names(self) -> list[str]:
        """The columns, in :meth:`read_columns` order (the schema's list: not to be changed)."""
        return self.schema.names

    @property
    def held_bytes(self) -> int:
        """The open file's size."""
        return self._file.size

    def get_many(self, indices: Sequence[int]) -> list[list[Any]]:
        """Decode samples ``indices`` into one list per column (``schema.names``)."""
        row = self._row
        rows = [row(index) for index in indices]
        if not rows:
            return [[] for _ in range(self._columns)]
        return [list(column) for column in zip(*rows, strict=True)]

    #: Values read from the file are already the caller's own: views have nothing to add.
    get_many_views = get_many

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Samples ``indices`` as columns (``views`` changes nothing here).

        Read as runs (:func:`read_samples`) when the view was opened for ``runs``, else one
        by one.
        """
        if self._runs is not None and len(indices) > 1:
            picked = np.asarray(indices, np.int64)
            return read_samples([self._runs], np.zeros(len(picked), np.int64), picked)
        return list(self.get_many(indices))

    @property
    def reads_runs(self) -> bool:
        """Whether the view was opened for ``runs`` (small samples)."""
        return self._runs is not None

    def sample_file(self) -> SampleFile | None:
        """The file, for reading runs of samples, when opened for ``runs``.

        Else ``None``: large samples are read one by one, straight into their values.
        """
        return self._runs

    def let_go(self, first: int, stop: int) -> None:
        """Nothing is mapped: nothing to let go."""

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


def read_samples(
    sources: Sequence[SampleFile],
    which: NDArray[np.int64],
    indices: NDArray[np.int64],
) -> list[ColumnValues]:
    """Decode samples of mapped shards of one schema, read from their files: nothing is mapped.

    Sample ``k`` is sample ``indices[k]`` of the shard ``sources[which[k]]``. Each run of
    samples adjacent in one file, in the order given, takes one ``pread``; the runs go into one
    buffer, which the batch decoder reads as it would a shard. The values come out in the order
    given (a column of fixed-shape arrays or numbers as one array), and no page of any mapping
    is touched.

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
        sources: Sequence[SampleFile],
        which: NDArray[np.int64],
        indices: NDArray[np.int64],
    ) -> None:
        self.sources = list(sources)
        self.files = [source.file for source in sources]
        self.which = which
        self.indices = indices
        count = len(indices)
        begins = np.empty(count, np.int64)
        ends = np.empty(count, np.int64)
        for number, source in enumerate(self.sources):
            mine = which == number
            picked = indices[mine]
            begins[mine] = source.offsets[picked]
            ends[mine] = source.offsets[picked + 1]
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
    def names(self) -> list[str]:
        """The columns the decoded samples come in."""
        return list(self.sources[0].schema.names)

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
                    raise cut_short(self.sources[number].source, len(part), size, begin)
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
                size, begin, self.sources[number].source
            )

    def decode(self, stage: bytes | mmap.mmap) -> list[ColumnValues]:
        """Decode the samples from the buffer ``stage`` (bytes, or an mmap) into columns.

        Raises:
            ShardFormatError: A sample is corrupt (decoded again from its file, which names
                it); the views need not be open any more.
        """
        if len(self.indices) == 0:
            return [[] for _ in self.sources[0].schema.names]
        shard_of, ids = self.which.tolist(), self.indices.tolist()
        getters: dict[int, Callable[[int], dict[str, Any]]] = {}

        def again(k: int) -> dict[str, Any]:
            # A corrupt sample, read again from its file: the error names the file and sample.
            number = shard_of[k]
            get = getters.get(number)
            if get is None:
                source = self.sources[number]
                get = getters[number] = source.schema.file_getters(
                    source.file, source.offsets.tolist(), source.source
                )[0]
            return get(ids[k])

        decoder = self.sources[0].schema.columns_decoder()
        decode = decoder.bind(stage, memoryview(stage), self.staged, again)
        return decode(range(len(ids)))

    def samples(self, stage: bytes | mmap.mmap) -> Iterator[dict[str, Any]]:
        """The samples as dicts, in the order given, decoded from the buffer ``stage``.

        Each is what its view's ``get`` returns.

        Raises:
            ShardFormatError: A sample is corrupt (decoded again from its file, which names
                it).
        """
        first = self.sources[0]
        positions = array.array("q", self.staged.tobytes())
        get = first.schema.sample_getter(stage, memoryview(stage), positions, "the read samples")
        pairs = zip(self.which.tolist(), self.indices.tolist(), strict=True)
        for k, (number, index) in enumerate(pairs):
            try:
                sample = get(k)
            except ShardFormatError:  # decoded again from its file: the error names it
                source = self.sources[number]
                file_get = source.schema.file_getters(
                    source.file, source.offsets.tolist(), source.source
                )[0]
                sample = file_get(index)
            yield sample
