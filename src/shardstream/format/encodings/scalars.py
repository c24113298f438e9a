"""Encodings of single values: bytes, text, integers, floats, numbers as text, and JSON."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from shardstream.errors import (
    SampleEncodingError,
    SampleRangeError,
    SampleValueError,
    UnencodableTextError,
)
from shardstream.format.encodings.base import (
    Buffer,
    Encoding,
    no_argument,
    register_encoding,
    too_deep,
)

__all__ = [
    "BytesEncoding",
    "IntEncoding",
    "JSONEncoding",
    "NumericScalarEncoding",
    "StrDecimalEncoding",
    "StrEncoding",
    "StrFloatEncoding",
    "StrIntEncoding",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT64_FROM_BYTES = functools.partial(int.from_bytes, byteorder="little", signed=True)


class BytesEncoding(Encoding):
    """``bytes``: the value's bytes as they are."""

    raw_bytes = True

    def encode(self, value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise self.reject(value, "bytes, bytearray or memoryview")

    def decode(self, data: Buffer) -> bytes:
        return bytes(data)

    @property
    def decoder(self) -> Callable[[Buffer], Any]:
        """The ``bytes`` constructor itself: no Python frame per value."""
        return bytes


class StrEncoding(Encoding):
    """``str``: text as UTF-8."""

    def encode(self, value: Any) -> bytes:
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _lone_surrogate(self.name, value, exc) from exc
        hint = (
            " (decode bytes to str first, or use the 'bytes' encoding)"
            if isinstance(value, (bytes, bytearray))
            else ""
        )
        raise self.reject(value, "str" + hint)

    def decode(self, data: Buffer) -> str:
        return str(data, "utf-8")


def _as_int(encoding: Encoding, value: Any) -> int:
    if isinstance(value, (int, np.integer)):  # bool is an int, as in the reference
        return int(value)
    raise encoding.reject(value, "int or a numpy integer")


class IntEncoding(Encoding):
    """``int``: a Python or numpy integer stored as 8 bytes of little-endian int64."""

    size = 8
    struct_format = "<q"

    def encode(self, value: Any) -> bytes:
        number = _as_int(self, value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise SampleRangeError(
                f"encoding 'int' stores int64, and {number} is out of range; use 'str_int'"
            )
        return number.to_bytes(8, "little", signed=True)

    def decode(self, data: Buffer) -> int:
        return int.from_bytes(data, "little", signed=True)

    @property
    def decoder(self) -> Callable[[Buffer], Any]:
        """``int.from_bytes`` with its arguments bound: no Python frame per value."""
        return _INT64_FROM_BYTES


class NumericScalarEncoding(Encoding):
    """``int8`` ... ``float64``: one numpy scalar of a fixed dtype, little-endian."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.dtype = np.dtype(name).newbyteorder("<")
        self.size = self.dtype.itemsize
        self.numpy_scalar = self.dtype.str
        self._integer = self.dtype.kind in "iu"
        if self._integer:
            info = np.iinfo(self.dtype)
            self._bounds = (int(info.min), int(info.max))

    def encode(self, value: Any) -> bytes:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if self._integer:
            if isinstance(value, (float, np.floating)) and float(value).is_integer():
                value = int(value)
            number = _as_int(self, value)
            low, high = self._bounds
            if not low <= number <= high:
                raise SampleRangeError(
                    f"encoding {self.name!r} holds {low}..{high}; {number} is out of range"
                )
            return np.array(number, self.dtype).tobytes()
        if isinstance(value, (int, float, np.integer, np.floating)):
            try:
                with np.errstate(over="ignore"):
                    stored = np.array(value, self.dtype)
                overflow = bool(np.isinf(stored))
            except OverflowError:  # a Python int too large for any float
                overflow = True
            if overflow and not (isinstance(value, (float, np.floating)) and math.isinf(value)):
                raise SampleRangeError(
                    f"encoding {self.name!r} holds at most {float(np.finfo(self.dtype).max)!r} in "
                    f"magnitude; {value!r} is out of range"
                )
            return stored.tobytes()
        raise self.reject(value, "a real number (int, float or numpy scalar)")

    def decode(self, data: Buffer) -> Any:
        return np.frombuffer(data, self.dtype, 1)[0]


class StrIntEncoding(Encoding):
    """``str_int``: an integer of any size stored as its decimal text."""

    def encode(self, value: Any) -> bytes:
        return str(_as_int(self, value)).encode("ascii")

    def decode(self, data: Buffer) -> int:
        return int(str(data, "ascii"))


class StrFloatEncoding(Encoding):
    """``str_float``: a float stored as its shortest round-tripping text (``str(float)``)."""

    def encode(self, value: Any) -> bytes:
        if isinstance(value, (float, int, np.floating, np.integer)) and not isinstance(value, bool):
            text = str(value) if isinstance(value, (float, int)) else str(float(value))
            return text.encode("ascii")
        raise self.reject(value, "float")

    def decode(self, data: Buffer) -> float:
        return float(str(data, "ascii"))


class StrDecimalEncoding(Encoding):
    """``str_decimal``: a :class:`decimal.Decimal` stored as its text."""

    def encode(self, value: Any) -> bytes:
        if isinstance(value, Decimal):
            return str(value).encode("ascii")
        raise self.reject(value, "decimal.Decimal")

    def decode(self, data: Buffer) -> Decimal:
        try:
            return Decimal(str(data, "ascii"))
        except InvalidOperation as exc:
            raise SampleEncodingError(
                f"encoding {self.name!r}: not a decimal number: {bytes(data)[:40]!r}"
            ) from exc


class JSONEncoding(Encoding):
    """``json``: any JSON-serialisable value (numpy arrays become lists), as UTF-8 text."""

    def encode(self, value: Any) -> bytes:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        try:
            text = json.dumps(value)
        except RecursionError as exc:
            raise too_deep("json", exc) from exc
        except (TypeError, ValueError) as exc:
            # The class json raised (TypeError: a type it lacks; ValueError: a cycle).
            error = SampleValueError if isinstance(exc, ValueError) else SampleEncodingError
            raise error(
                f"encoding 'json' cannot serialise the value: {exc}; convert it to dicts, "
                "lists, str, int, float, bool and None first"
            ) from exc
        return text.encode("utf-8")

    def decode(self, data: Buffer) -> Any:
        return json.loads(str(data, "utf-8"))


def _lone_surrogate(name: str, text: str, exc: UnicodeEncodeError) -> UnencodableTextError:
    """The error for text that UTF-8 cannot store: where the surrogate is, and what to do."""
    return UnencodableTextError(
        f"encoding {name!r} stores UTF-8, which has no bytes for the lone surrogate "
        f"{text[exc.start]!r} at character {exc.start} of {len(text)}: repair the text (e.g. "
        "text.encode('utf-8', 'replace').decode('utf-8')), or store its bytes in a 'bytes' "
        "column (os.fsencode(text) for a file name)"
    )


for _name, _cls in (
    ("bytes", BytesEncoding),
    ("str", StrEncoding),
    ("int", IntEncoding),
    ("str_int", StrIntEncoding),
    ("str_float", StrFloatEncoding),
    ("str_decimal", StrDecimalEncoding),
    ("json", JSONEncoding),
):
    register_encoding(_name, no_argument(_cls))
for _name in (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
):
    register_encoding(_name, no_argument(NumericScalarEncoding))
