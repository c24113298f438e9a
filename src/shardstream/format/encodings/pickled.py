"""``pkl``: any picklable value. Unsafe: decoding can run code, so readers refuse it by default."""

from __future__ import annotations

import pickle
from typing import Any

from shardstream.errors import SampleEncodingError, SampleTypeError, UnpicklableValueError
from shardstream.format.encodings.base import (
    Buffer,
    Encoding,
    no_argument,
    register_encoding,
    too_deep,
)

__all__ = ["PickleEncoding"]


class PickleEncoding(Encoding):
    """``pkl``: ``pickle.dumps`` of the value. Read only with ``allow_unsafe_types=True``."""

    unsafe = True

    def encode(self, value: Any) -> bytes:
        try:
            return pickle.dumps(value)
        except RecursionError as exc:
            raise too_deep("pkl", exc) from exc
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise _error_like(exc)(
                f"encoding 'pkl' cannot pickle the value: {exc}; convert it to picklable "
                "types first"
            ) from exc

    def decode(self, data: Buffer) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:  # corrupt pickles fail in many ways (EOFError, MemoryError, ...)
            raise SampleEncodingError(f"encoding 'pkl' cannot unpickle the value: {exc}") from exc


def _error_like(exc: Exception) -> type[SampleEncodingError]:
    """Our error of the builtin class pickle raised, which the reference lets through."""
    if isinstance(exc, pickle.PicklingError):
        return UnpicklableValueError
    if isinstance(exc, AttributeError):  # a local class or function
        return SampleTypeError
    return SampleEncodingError


register_encoding("pkl", no_argument(PickleEncoding))
