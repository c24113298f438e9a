"""``ndarray`` encodings: numpy arrays with a static or per-sample dtype and shape.

Layout of one value (``ndarray[:<dtype>[:<d0,d1,...>]]``): a dtype code byte unless the dtype is
in the name; a byte ``(ndim << 2) | width`` and the shape as uint8/16/32/64 (``width`` 0..3, the
smallest that holds every dimension) unless the shape is in the name; then the values in C order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardstream.errors import SampleEncodingError, SampleValueError
from shardstream.format.encodings.base import Buffer, Encoding, register_encoding

__all__ = ["DTYPE_CODES", "NDArrayEncoding"]

DTYPE_CODES: dict[str, int] = {
    "uint8": 8,
    "int8": 9,
    "uint16": 16,
    "int16": 17,
    "float16": 18,
    "uint32": 32,
    "int32": 33,
    "float32": 34,
    "uint64": 64,
    "int64": 65,
    "float64": 66,
}
_CODE_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in DTYPE_CODES.items()}
_SHAPE_WIDTHS = (np.dtype("<u1"), np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8"))
_MAX_NDIM = 63


class NDArrayEncoding(Encoding):
    """A numpy array; dtype and shape either fixed by the name or stored with each value.

    Decoding is zero-copy: the array is a read-only view of the shard's bytes.
    """

    def __init__(self, name: str, dtype: str | None, shape: tuple[int, ...] | None) -> None:
        super().__init__(name)
        if dtype is not None and dtype not in DTYPE_CODES:
            raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPE_CODES)}")
        if shape is not None and (not shape or any(dim < 1 for dim in shape)):
            raise ValueError(f"every dimension of the shape must be >= 1, got {shape}")
        self.dtype = None if dtype is None else np.dtype(dtype).newbyteorder("<")
        self.dtype_name = dtype
        self.shape = shape
        if self.dtype is not None and shape is not None:
            self.size = math.prod(shape) * self.dtype.itemsize  # np.prod would wrap at 2**64
            self.numpy_array = (self.dtype, shape)

    @classmethod
    def from_name(cls, name: str, argument: str | None) -> NDArrayEncoding:
        """Parse ``ndarray``, ``ndarray:<dtype>`` or ``ndarray:<dtype>:<d0,d1,...>``."""
        if argument is None or argument == "":
            return cls(name, None, None)
        parts = argument.split(":")
        if len(parts) > 2 or not parts[0]:
            raise ValueError("write ndarray, ndarray:<dtype> or ndarray:<dtype>:<d0,d1,...>")
        shape = None
        if len(parts) == 2:
            try:
                shape = tuple(int(dim) for dim in parts[1].split(","))
            except ValueError as exc:
                raise ValueError(
                    f"shape {parts[1]!r} is not a list of integers: write e.g. "
                    "ndarray:uint8:3,32,32"
                ) from exc
        return cls(name, parts[0], shape)

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, np.ndarray):
            raise self.reject(value, "numpy.ndarray")
        code = DTYPE_CODES.get(value.dtype.name)
        if code is None:
            raise SampleValueError(
                f"encoding {self.name!r}: dtype {value.dtype} is not storable; use one of "
                f"{', '.join(DTYPE_CODES)}"
            )
        if value.size == 0 or value.ndim == 0:
            raise SampleValueError(
                f"encoding {self.name!r} needs an array with at least one dimension and one "
                f"element, got shape {value.shape}"
            )
        parts: list[bytes] = []
        if self.dtype is None:
            parts.append(bytes((code,)))
        elif value.dtype.name != self.dtype_name:
            raise SampleValueError(
                f"encoding {self.name!r} expects dtype {self.dtype_name}, got {value.dtype.name}"
            )
        if self.shape is None:
            if value.ndim > _MAX_NDIM:
                raise SampleValueError(
                    f"encoding {self.name!r} stores at most {_MAX_NDIM} dimensions, "
                    f"got {value.ndim}"
                )
            largest = max(value.shape)
            width = (
                0 if largest < 1 << 8 else 1 if largest < 1 << 16 else 2 if largest < 1 << 32 else 3
            )
            parts.append(bytes(((value.ndim << 2) | width,)))
            parts.append(np.asarray(value.shape, _SHAPE_WIDTHS[width]).tobytes())
        elif value.shape != self.shape:
            raise SampleValueError(
                f"encoding {self.name!r} expects shape {self.shape}, got {value.shape}"
            )
        if value.dtype.byteorder == ">":
            value = value.astype(value.dtype.newbyteorder("<"))
        parts.append(value.tobytes())
        return b"".join(parts)

    def decode(self, data: Buffer) -> np.ndarray[Any, Any]:
        position = 0
        dtype = self.dtype
        if dtype is None:
            dtype = _CODE_DTYPES.get(data[0])
            if dtype is None:
                raise SampleEncodingError(f"encoding {self.name!r}: unknown dtype code {data[0]}")
            position = 1
        shape: tuple[int, ...] | None = self.shape
        if shape is None:
            header = data[position]
            ndim, width = header >> 2, _SHAPE_WIDTHS[header & 3]
            position += 1
            shape = tuple(np.frombuffer(data, width, ndim, position).tolist())
            position += ndim * width.itemsize
        array = np.frombuffer(data, dtype, offset=position)
        return array.reshape(shape)


register_encoding("ndarray", NDArrayEncoding.from_name)
