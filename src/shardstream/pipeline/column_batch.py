"""A device batch as columns, and how it crosses from a DataLoader worker to the loader.

A worker hands its batches to the loader's process through a pipe, pickled. For small values
that is cheap; for large ones (images, long token arrays stored as ``bytes``) the pipe is the
bottleneck of every loader: each 100 KiB value is copied into the pickle, through the kernel
twice and out of the pickle again, and the loader's process spends its time in ``read``.
So a large ``bytes`` column (the read policy's ``packs``) leaves the worker written with one
``pwritev`` into an anonymous in-memory file whose descriptor is passed to the
loader (nothing named, nothing left behind if a process dies), and the loader reads the values
back with one ``pread`` each: no pickling, no pipe, no mapping. The values, their types and
their order are what the plain lists would have given.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.reduction import DupFd
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ShardstreamError
from shardstream.pipeline.policy import ReadPolicy

__all__ = [
    "CAN_PACK",
    "BatchRefs",
    "ColumnBatch",
    "PackedArray",
    "PackedBytes",
    "for_transfer",
]


class PackedBytes:
    """The ``bytes`` values of one column, end to end in an anonymous in-memory file.

    Value ``k`` is the file's bytes ``[ends[k - 1], ends[k])`` (from 0 for the first). The
    file (``memfd_create``) lives in memory, counts against no ``/dev/shm`` size, and is gone
    once the last process that holds it closes it or dies. It pickles as a file descriptor
    passed to the receiving process (multiprocessing's ``DupFd``, as torch passes tensors).
    """

    def __init__(self, fd: int, ends: NDArray[np.int64]) -> None:
        self.fd = fd
        self.ends = ends
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def pack(cls, values: list[Any]) -> PackedBytes:
        """Write ``values`` (``bytes`` or other buffers) into a new in-memory file."""
        ends = np.cumsum([len(value) for value in values], dtype=np.int64)
        return cls(_memory_file(values), ends)

    def __len__(self) -> int:
        return len(self.ends)

    def unpack(self) -> list[bytes]:
        """The values as ``bytes`` objects, in order; the file is closed."""
        out = []
        begin = 0
        fd = self.fd
        for end in self.ends.tolist():
            value = os.pread(fd, end - begin, begin)
            if len(value) != end - begin:
                raise ShardstreamError(
                    f"a packed batch column is {begin + len(value)} bytes, expected {end}: its "
                    "temporary file was cut short (is the disk of the temporary folder full?)"
                )
            out.append(value)
            begin = end
        self._closer()
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (DupFd(self.fd), self.ends)


def _rebuild(fd: Any, ends: NDArray[np.int64]) -> PackedBytes:
    return PackedBytes(fd.detach(), ends)


class PackedArray:
    """A numeric array in an anonymous in-memory file, passed as :class:`PackedBytes` is.

    A stacked column of token arrays crosses with one write and one read of its bytes,
    instead of being pickled through the pipe.
    """

    def __init__(self, fd: int, dtype: str, shape: tuple[int, ...]) -> None:
        self.fd = fd
        self.dtype = dtype
        self.shape = shape
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def pack(cls, array: NDArray[Any]) -> PackedArray:
        """Write ``array``'s values (C order) into a new in-memory file."""
        array = np.ascontiguousarray(array)
        fd = _memory_file([array.data.cast("B")] if array.size else [])
        return cls(fd, array.dtype.str, tuple(array.shape))

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def unpack(self) -> NDArray[Any]:
        """The array (writable, its own memory); the file is closed."""
        out = np.empty(self.shape, np.dtype(self.dtype))
        view = out.data.cast("B") if out.size else memoryview(b"")
        done = 0
        while done < len(view):
            step = os.preadv(self.fd, [view[done:]], done)
            if step == 0:
                raise ShardstreamError(
                    f"a packed batch array is {done} bytes, expected {len(view)}: its "
                    "temporary file was cut short (is the disk of the temporary folder full?)"
                )
            done += step
        self._closer()
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_array, (DupFd(self.fd), self.dtype, self.shape)


def _rebuild_array(fd: Any, dtype: str, shape: tuple[int, ...]) -> PackedArray:
    return PackedArray(fd.detach(), dtype, shape)


def _memory_file(values: list[Any]) -> int:
    """A new anonymous in-memory file holding ``values`` (buffers) end to end; its descriptor."""
    fd = os.memfd_create("shardstream-batch", os.MFD_CLOEXEC)
    try:
        offset = 0
        for first in range(0, len(values), _IOV_MAX):
            chunk = values[first : first + _IOV_MAX]
            size = sum(map(len, chunk))
            done = os.pwritev(fd, chunk, offset)
            if done < size:  # a short write (rare): the rest in one piece
                rest = memoryview(b"".join(chunk))[done:]
                while rest:
                    step = os.pwrite(fd, rest, offset + done)
                    rest, done = rest[step:], done + step
            offset += size
    except BaseException:
        os.close(fd)
        raise
    return fd


_IOV_MAX = 1024  # buffers per writev call (Linux's limit)

#: Whether batches can be packed here (``memfd_create`` is Linux's).
CAN_PACK = hasattr(os, "memfd_create")


#: One column of a batch: its values, or (leaving a worker) packed or stacked into one array.
Column = list[Any] | PackedBytes | PackedArray | NDArray[Any]


@dataclass(frozen=True)
class ColumnBatch:
    """A device batch as column names and the values of each column, in batch order.

    A column is a list of values, or one numeric array whose rows (elements, for numbers)
    are the values.

    It crosses from a DataLoader worker to the loader as plain lists and arrays (cheap to
    pickle), or with its large columns packed (:func:`for_transfer`); the loader collates it.
    """

    names: list[str]
    columns: list[Column]

    def __len__(self) -> int:
        """Samples in the batch: the values of a column (every column has one per sample)."""
        return len(self.columns[0]) if self.columns else 0

    def collate(
        self,
        collate: Callable[[Any], Any],
        as_tensor: Callable[[NDArray[Any]], Any] | None = None,
    ) -> dict[str, Any]:
        """The batch as ``collate`` (torch's ``default_collate``) would make it of the samples.

        A column of ``bytes`` stays a list, as ``default_collate`` leaves it, and so does one of
        memoryviews (``zero_copy``, read in this process), which torch would take for ints.

        Args:
            collate: Collates one column's values.
            as_tensor: ``torch.as_tensor``: turns a column already stacked into one numeric
                array into its tensor in one call; ``default_collate`` would convert the
                array's rows one by one and stack them again, into the same tensor.
        """
        out = {}
        for name, column in zip(self.names, self.columns, strict=True):
            if isinstance(column, PackedBytes):
                out[name] = collate(column.unpack())
                continue
            if isinstance(column, PackedArray):
                column = column.unpack()
            if isinstance(column, list) and column and type(column[0]) in _BUFFERS:
                out[name] = column  # as default_collate leaves bytes (it takes views for ints)
                continue
            values = column if isinstance(column, np.ndarray) else _stacked(column)
            if as_tensor is not None and isinstance(values, np.ndarray) and _numeric(values):
                out[name] = as_tensor(values)
            else:
                out[name] = collate(values)
        return out


@dataclass(frozen=True)
class BatchRefs:
    """A device batch that leaves a worker as its dataset-wide sample ids alone.

    A batch of large values (the read policy's ``hands_over_ids``) comes from shards in the
    node's cache, where the loader's process can read it as fast as a worker: handing it the
    ids spares every value two copies through fresh shared memory, and the loader a round
    trip to the worker for a descriptor. The loader reads it with its own reader
    (``StreamingDataset.read_batch``), in batch order.
    """

    ids: NDArray[np.int64]


def _stacked(column: list[Any]) -> Any:
    """A column as the array ``default_collate`` turns into the same tensor fastest.

    Python ints become an int64 array and floats a float64 array: the dtypes
    ``default_collate`` gives their lists, which it builds element by element, slower than
    numpy. Numeric arrays of one shape and dtype are stacked
    into one writable array, the tensor ``default_collate`` stacks of them (and torch warns
    about each read-only array, a view of a shard, that it turns into a tensor). Anything
    else is left as it is.
    """
    first = column[0] if column else None
    dtype = _SCALARS.get(type(first))
    if dtype is not None and set(map(type, column)) == {type(first)}:
        try:
            return np.array(column, dtype=dtype)
        except OverflowError:  # beyond int64: collated as a list, which says so itself
            return column
    if _same_arrays(column):
        return np.stack(column)
    return column


def _same_arrays(column: list[Any]) -> bool:
    """Whether ``column`` holds numeric numpy arrays, all of one shape and dtype."""
    first = column[0] if column else None
    if not isinstance(first, np.ndarray) or not _numeric(first):
        return False
    shape, dtype = first.shape, first.dtype
    return all(
        type(value) is np.ndarray and value.shape == shape and value.dtype == dtype
        for value in column
    )


def _numeric(array: NDArray[Any]) -> bool:
    """Booleans and numbers: what a tensor holds (not strings or objects)."""
    return array.dtype.kind in "biufc"


def for_transfer(batch: ColumnBatch, policy: ReadPolicy) -> ColumnBatch:
    """``batch`` ready to leave a worker.

    ``bytes`` columns the policy packs (``ReadPolicy.packs``) go into in-memory files;
    memoryviews (of a shard, see ``SampleReader.columns``) in the
    other columns become ``bytes``. Numeric arrays of one shape and dtype (token arrays, say)
    leave stacked into one array: one object to pickle instead of one per sample.
    """
    columns: list[Column] = []
    for column in batch.columns:
        stacked = None
        if isinstance(column, np.ndarray) and _numeric(column):
            stacked = column  # decoded stacked already (fixed-shape arrays)
        elif isinstance(column, list) and _same_arrays(column):
            stacked = np.stack(column)
        if stacked is not None:
            packs = CAN_PACK and policy.packs_array(stacked.nbytes)
            columns.append(PackedArray.pack(stacked) if packs else stacked)
            continue
        if isinstance(column, list) and column and all(type(value) in _BUFFERS for value in column):
            total = sum(map(len, column))
            if CAN_PACK and policy.packs(total, len(column)):
                columns.append(PackedBytes.pack(column))
                continue
            if any(type(value) is memoryview for value in column):
                column = [bytes(value) for value in column]
        columns.append(column)
    return ColumnBatch(batch.names, columns)


_BUFFERS = (bytes, memoryview)
_SCALARS: dict[type, type] = {int: np.int64, float: np.float64}
