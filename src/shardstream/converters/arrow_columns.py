"""Whole Arrow columns encoded at once: the converters' fast path to MDS bytes.

:class:`~shardstream.converters.arrow_samples.BatchConverter` hands a batch to
:meth:`MDSWriter.write_columns <shardstream.MDSWriter.write_columns>` as lists of encoded
values when every column has an encoder here, skipping a sample dict and an ``encode`` call
per value. The common, unambiguous cases only, each producing exactly the bytes its
encoding's ``encode`` returns for the value the per-sample path would give it:

- a number column whose Arrow type is the encoding's own dtype (``int64`` for ``int``);
- ``str`` from Arrow strings (valid UTF-8) and ``bytes`` from Arrow binaries;
- ``ndarray:<dtype>`` (no shape) from a list of ``<dtype>`` numbers.

An encoder returns None for a batch it leaves to the per-sample path, which then encodes it
or raises its precise error: a float column holding a NaN, text that is not UTF-8, an empty
array. Dictionary and extension columns, and everything else, always take that path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardstream.converters.arrow_types import arrow_module, leaf_type, numpy_dtype_name
from shardstream.format.encodings import get_encoding
from shardstream.format.encodings.ndarray import NDArrayEncoding

__all__ = ["ColumnEncoder", "column_encoder"]

#: A column (a plain ``pyarrow.Array``) to each row's encoded bytes, or None: per-sample path.
ColumnEncoder = Callable[[Any], list[bytes] | None]


def column_encoder(
    arrow_type: Any, encoding: str, number_dtype: str | None
) -> ColumnEncoder | None:
    """The whole-column encoder of ``arrow_type`` written as ``encoding``, or None.

    Args:
        arrow_type: The column's Arrow type, as the schema gives it.
        encoding: Its MDS encoding.
        number_dtype: The numpy dtype of ``encoding`` when it is a number encoding, else None.
    """
    pa = arrow_module()
    types = pa.types
    if number_dtype is not None:
        if not (types.is_integer(arrow_type) or types.is_floating(arrow_type)):
            return None
        if numpy_dtype_name(arrow_type) != number_dtype:
            return None
        return _Numbers(np.dtype(number_dtype).newbyteorder("<"))
    if encoding == "str" and (types.is_string(arrow_type) or types.is_large_string(arrow_type)):
        binary = pa.large_binary() if types.is_large_string(arrow_type) else pa.binary()
        return _Text(binary)
    if encoding == "bytes" and (
        types.is_binary(arrow_type)
        or types.is_large_binary(arrow_type)
        or types.is_fixed_size_binary(arrow_type)
    ):
        return _binary
    if encoding.startswith("ndarray:") and (
        types.is_list(arrow_type) or types.is_large_list(arrow_type)
    ):
        spec = get_encoding(encoding)
        leaf, depth = leaf_type(arrow_type)
        if (
            isinstance(spec, NDArrayEncoding)
            and spec.dtype is not None
            and spec.shape is None
            and depth == 1
            and (types.is_integer(leaf) or types.is_floating(leaf))
            and numpy_dtype_name(leaf) == spec.dtype_name
        ):
            return _Arrays(spec)
    return None


class _Numbers:
    def __init__(self, dtype: np.dtype[Any]) -> None:
        self.dtype = dtype

    def __call__(self, array: Any) -> list[bytes] | None:
        values = array.to_numpy(zero_copy_only=False)
        # A NaN's payload bits could differ from the per-sample path's; leave such batches to it.
        if values.dtype.kind == "f" and np.isnan(values).any():
            return None
        data = values.astype(self.dtype, copy=False).tobytes()
        width = self.dtype.itemsize
        return [data[start : start + width] for start in range(0, len(data), width)]


class _Text:
    def __init__(self, binary: Any) -> None:
        self.binary = binary

    def __call__(self, array: Any) -> list[bytes] | None:
        pa = arrow_module()
        try:
            array.validate(full=True)  # UTF-8 included: the per-sample path would fail to decode
        except pa.ArrowInvalid:
            return None
        values: list[bytes] = array.view(self.binary).to_pylist()
        return values


def _binary(array: Any) -> list[bytes] | None:
    values: list[bytes] = array.to_pylist()
    return values


class _Arrays:
    """One-level lists of numbers as ``ndarray:<dtype>``: a shape prefix, then the values."""

    def __init__(self, spec: NDArrayEncoding) -> None:
        assert spec.dtype is not None
        self.spec = spec
        self.dtype: np.dtype[Any] = spec.dtype
        self.prefixes: dict[int, bytes] = {}

    def prefix(self, length: int) -> bytes:
        """The bytes ``encode`` puts before ``length`` values (taken from ``encode`` itself)."""
        prefix = self.prefixes.get(length)
        if prefix is None:
            encoded = self.spec.encode(np.zeros(length, self.dtype))
            prefix = self.prefixes[length] = encoded[: len(encoded) - length * self.dtype.itemsize]
        return prefix

    def __call__(self, array: Any) -> list[bytes] | None:
        child = array.values
        if child.null_count:
            return None
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        lengths = np.diff(offsets)
        if len(lengths) and not lengths.all():
            return None  # an empty array: the per-sample path names the row
        data = child.to_numpy(zero_copy_only=False).astype(self.dtype, copy=False).tobytes()
        width = self.dtype.itemsize
        for length in np.unique(lengths).tolist():
            self.prefix(length)
        prefixes = list(map(self.prefixes.__getitem__, lengths.tolist()))
        bounds = (offsets * width).tolist()
        return [
            prefix + data[start:end]
            for prefix, start, end in zip(prefixes, bounds[:-1], bounds[1:], strict=True)
        ]
