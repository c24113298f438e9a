"""Decoding many samples of one MDS shard into columns at once.

A batch needs columns, not sample dicts. Positions of every column of every requested sample
come from numpy arithmetic over the offset table and the size headers; numeric columns are
gathered and converted in one numpy call, and fixed-size arrays are gathered into one array
whose rows are the values; only ``bytes``-like columns and columns with their own decoder
cost a Python step per value. Should anything not add up (a corrupt sample), the
batch is decoded again one sample at a time, which raises the precise error.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ShardFormatError
from shardstream.format.encodings import Encoding
from shardstream.format.sample_codec import DECODE_ERRORS

__all__ = ["ColumnValues", "ColumnsDecoder"]

#: One decoded column: a list of values, or (fixed-shape numeric arrays, and numbers) one
#: array whose rows (elements) are the values.
ColumnValues = list[Any] | NDArray[Any]

_RAW, _PYTHON_SCALAR, _NUMPY_SCALAR, _NUMBERS, _ARRAY, _DECODER = range(6)

#: Numbers that come as one array: their tensor is the one torch's ``default_collate`` makes
#: of the values one by one (it refuses numpy's uint64 scalars; Python ints become int64).
_AS_ARRAY = frozenset(
    np.dtype(name) for name in ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "f2", "f4", "f8")
)

#: Up to this many samples, the per-sample getter is cheaper than the dozen numpy calls of the
#: bulk path (a shuffled batch over many shards asks each for a few samples).
SMALL_BATCH = 16


class ColumnsDecoder:
    """The batch decoder of one schema's columns.

    Args:
        plan: ``(name, encoding, fixed size or None)`` of each column, in stored order.
        zero_copy: ``bytes`` columns as read-only memoryviews of the shard, not copies.
    """

    def __init__(
        self, plan: Sequence[tuple[str, Encoding, int | None]], *, zero_copy: bool = False
    ) -> None:
        self.zero_copy = zero_copy
        self._variable = sum(fixed is None for _, _, fixed in plan)
        self._names = [name for name, _, _ in plan]
        self._columns: list[tuple[int, int | None, Any]] = []
        for _name, encoding, fixed in plan:
            self._columns.append(_kind(encoding, fixed))

    def bind(
        self,
        buffer: Any,
        view: memoryview,
        offsets: NDArray[np.int64],
        fallback: Callable[[int], dict[str, Any]],
        small: Callable[[int], dict[str, Any]] | None = None,
    ) -> Callable[[Sequence[int]], list[ColumnValues]]:
        """``get_many(ks)`` over one shard's buffer: each column's values for samples ``ks``.

        A column of fixed-shape numeric arrays comes as one array, its rows the values (as
        ``np.stack`` of them would make it), and one of numbers (but uint64) as one 1-D array;
        any other column as a list.

        Args:
            buffer: The shard (bytes or an mmap).
            view: ``memoryview(buffer)``.
            offsets: The shard's sample offsets (``samples + 1`` of them).
            fallback: The shard's per-sample getter, used to report a corrupt sample.
            small: A per-sample getter returning what this decoder returns (``bytes`` columns
                copied or not alike), used for at most :data:`SMALL_BATCH` samples.
        """
        raw_source = view if self.zero_copy else buffer
        # Windows of ``w`` bytes starting at every offset (no copy): rows picked by position
        # gather each sample's size header and fixed-size values with one index per sample.
        # Made on first use: a shard read in small batches never needs them.
        windows: dict[int, NDArray[np.uint8]] = {}
        columns = self._columns
        variable = self._variable
        names = self._names

        def window(width: int) -> NDArray[np.uint8]:
            rows = windows.get(width)
            if rows is None:
                rows = windows[width] = _windows(np.frombuffer(view, np.uint8), width)
            return rows

        def get_many(indices: Sequence[int]) -> list[ColumnValues]:
            if small is not None and len(indices) <= SMALL_BATCH:
                rows = [small(index) for index in indices]
                return [[row[name] for row in rows] for name in names]
            picked = np.asarray(indices, dtype=np.int64)
            begins = offsets[picked]
            ends = offsets[picked + 1]
            try:
                sizes: NDArray[Any] | None = None
                if variable:
                    sizes = window(4 * variable)[begins].view("<u4").astype(np.int64)
                position = begins + 4 * variable
                decoded: list[ColumnValues] = []
                seen = 0
                for kind, fixed, extra in columns:
                    if fixed is None:
                        assert sizes is not None
                        stop = position + sizes[:, seen]
                        seen += 1
                    else:
                        stop = position + fixed
                    if kind == _RAW:
                        decoded.append(
                            [
                                raw_source[a:b]
                                for a, b in zip(position.tolist(), stop.tolist(), strict=True)
                            ]
                        )
                    elif kind == _DECODER:
                        decoded.append(
                            [
                                extra(view[a:b])
                                for a, b in zip(position.tolist(), stop.tolist(), strict=True)
                            ]
                        )
                    elif kind == _ARRAY:
                        assert fixed is not None
                        dtype, shape = extra  # one gather: the values are its rows
                        decoded.append(window(fixed)[position].view(dtype).reshape(-1, *shape))
                    else:
                        assert fixed is not None
                        flat = window(fixed)[position].view(extra).reshape(-1)
                        if kind == _NUMBERS:
                            decoded.append(flat)
                        else:
                            decoded.append(flat.tolist() if kind == _PYTHON_SCALAR else list(flat))
                    position = stop
                if (position != ends).any():
                    raise ShardFormatError("a sample's columns do not add up to its length")
            except (*DECODE_ERRORS, IndexError):
                return _one_by_one(fallback, indices, len(columns))
            return decoded

        return get_many


def _windows(octets: NDArray[np.uint8], width: int) -> NDArray[np.uint8]:
    """Row ``k`` is ``octets[k : k + width]``: a read-only view, nothing copied.

    Raises:
        IndexError: ``width`` is wider than the shard (a corrupt column size): no sample can
            hold such a value, and the caller falls back to the per-sample path, which says so.
    """
    if width > len(octets):
        raise IndexError(f"a {width}-byte value cannot fit a {len(octets)}-byte shard")
    rows = len(octets) - width + 1
    return np.lib.stride_tricks.as_strided(
        octets, shape=(rows, width), strides=(1, 1), writeable=False
    )


def _kind(encoding: Encoding, fixed: int | None) -> tuple[int, int | None, Any]:
    """How a column is decoded in bulk: its kind, fixed size, and dtype or decoder."""
    if encoding.raw_bytes:
        return _RAW, fixed, None
    if fixed is not None and encoding.numpy_scalar is not None:
        dtype = np.dtype(encoding.numpy_scalar)
        if dtype.itemsize == fixed:
            return (_NUMBERS if dtype in _AS_ARRAY else _NUMPY_SCALAR), fixed, dtype
    if fixed is not None and encoding.numpy_array is not None:
        dtype, shape = encoding.numpy_array
        if np.dtype(dtype).itemsize * math.prod(shape) == fixed:
            return _ARRAY, fixed, (np.dtype(dtype), tuple(shape))
    if fixed is not None and encoding.struct_format is not None:
        dtype = np.dtype(encoding.struct_format)
        if dtype.itemsize == fixed == struct.calcsize(encoding.struct_format):
            return (_NUMBERS if dtype in _AS_ARRAY else _PYTHON_SCALAR), fixed, dtype
    return _DECODER, fixed, encoding.decoder


def _one_by_one(
    get: Callable[[int], dict[str, Any]], indices: Sequence[int], count: int
) -> list[ColumnValues]:
    """Columns built from the per-sample getter (which raises the precise error, if any)."""
    samples = [get(int(index)) for index in indices]
    columns: list[list[Any]] = [[] for _ in range(count)]
    for sample in samples:
        for column, value in zip(columns, sample.values(), strict=True):
            column.append(value)
    decoded: list[ColumnValues] = list(columns)
    return decoded
