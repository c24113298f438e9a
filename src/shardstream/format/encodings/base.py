"""The column-encoding contract and the registry that maps encoding names to implementations.

An encoding turns one column value into bytes and back. Names follow the MDS format: a base
name, optionally followed by ``:`` and an argument (``ndarray:float32:2,3``). Users add their
own with :func:`register_encoding`; nothing needs monkeypatching.
"""

from __future__ import annotations

import mmap
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from shardstream.errors import (
    ConfigurationError,
    SampleTooDeepError,
    SampleTypeError,
    UnknownEncodingError,
)

__all__ = [
    "Buffer",
    "Encoding",
    "EncodingFactory",
    "encoding_names",
    "get_encoding",
    "no_argument",
    "register_encoding",
    "too_deep",
]

# What decode() receives: a slice of a memory-mapped shard, or bytes.
Buffer = bytes | bytearray | memoryview | mmap.mmap


class Encoding(ABC):
    """Encodes the values of one column to bytes and decodes them back.

    Implementations must be stateless after construction: one instance serves every shard and
    every thread. ``encode`` checks the value's type and raises
    :class:`~shardstream.errors.SampleEncodingError` (naming the expected and received types)
    rather than storing something the reader cannot give back. ``decode`` receives exactly
    the bytes ``encode`` produced.

    Attributes:
        name: The full encoding name as written to ``index.json``, argument included.
        size: The fixed byte size of every encoded value, or ``None`` when it varies.
        unsafe: True when decoding can execute code (pickle); readers refuse such columns
            unless the user passes ``allow_unsafe_types=True``.
        raw_bytes: True when the value is the stored bytes as they are (a reader fast path).
        struct_format: The ``struct`` format that decodes the value, if one does (a fast path).

    Example:
        class Upper(Encoding):
            def encode(self, value):
                if not isinstance(value, str):
                    raise self.reject(value, "a str")
                return value.upper().encode()
            def decode(self, data):
                return bytes(data).decode()
    """

    size: int | None = None
    unsafe: bool = False
    #: True when ``decode(data) == bytes(data)``: readers may then slice the shard directly.
    raw_bytes: bool = False
    #: A struct format when ``decode(data) == struct.unpack(struct_format, data)[0]``.
    struct_format: str | None = None
    #: A numpy dtype when ``decode(data) == np.frombuffer(data, numpy_scalar, 1)[0]``.
    numpy_scalar: str | None = None
    #: ``(dtype, shape)`` when ``decode(data)`` equals ``np.frombuffer(data, dtype).reshape(shape)``
    #: (a fixed-size array): readers may then gather many values into one array.
    numpy_array: tuple[Any, tuple[int, ...]] | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def encode(self, value: Any) -> bytes:
        """Return the bytes of ``value``; raise :class:`.SampleEncodingError` if it does not fit."""

    @abstractmethod
    def decode(self, data: Buffer) -> Any:
        """Return the value whose encoding is ``data``."""

    @property
    def decoder(self) -> Callable[[Buffer], Any]:
        """The fastest callable equivalent to :meth:`decode` (readers call it once per value)."""
        return self.decode

    def reject(self, value: Any, expected: str) -> SampleTypeError:
        """Build the error for a value of the wrong type (the caller raises it).

        A :class:`~shardstream.errors.SampleTypeError`: also the ``AttributeError`` that
        mosaicml-streaming's writer raises for a value of the wrong type.
        """
        return SampleTypeError(
            f"encoding {self.name!r} expects {expected}, got {type(value).__name__}: "
            f"{_preview(value)}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


# A factory receives the full name and the argument after the first ':' (None when absent).
EncodingFactory = Callable[[str, "str | None"], Encoding]

_lock = threading.Lock()
_factories: dict[str, EncodingFactory] = {}
_instances: dict[str, Encoding] = {}


def register_encoding(name: str, factory: EncodingFactory, *, clobber: bool = False) -> None:
    """Make a column encoding available to writers and readers under ``name``.

    Args:
        name: The base name used in column specs and ``index.json`` (no ``:``).
        factory: Called as ``factory(full_name, argument)`` where ``argument`` is the text after
            the first ``:`` of a column's encoding, or ``None``; returns an :class:`Encoding`.
        clobber: Replace an existing encoding of the same name. Built-in names can only be
            replaced with ``clobber=True``.

    Raises:
        ConfigurationError: The name is empty, contains ``:``, or is taken and ``clobber`` is False.

    Example:
        class Upper(Encoding):
            def encode(self, value):
                return value.upper().encode()
            def decode(self, data):
                return bytes(data).decode()
        register_encoding("upper", lambda name, argument: Upper(name))
        columns = {"title": "upper"}  # for MDSWriter
    """
    if not name or ":" in name:
        raise ConfigurationError(f"encoding name {name!r} must be non-empty and contain no ':'")
    with _lock:
        if name in _factories and not clobber:
            raise ConfigurationError(
                f"encoding {name!r} is already registered; pass clobber=True to replace it"
            )
        _factories[name] = factory
        for key in [k for k in _instances if k.split(":", 1)[0] == name]:
            del _instances[key]


def encoding_names() -> Mapping[str, EncodingFactory]:
    """Return a read-only view of the registered base names, sorted."""
    with _lock:
        return MappingProxyType(dict(sorted(_factories.items())))


def get_encoding(spec: str) -> Encoding:
    """Return the encoding for a column spec such as ``'int'`` or ``'ndarray:uint8:3,32,32'``.

    Raises:
        UnknownEncodingError: No encoding is registered under the spec's base name, or the
            argument is invalid for it.

    Example:
        import numpy as np
        encoding = get_encoding("ndarray:uint8:3,32,32")
        data = encoding.encode(np.zeros((3, 32, 32), dtype=np.uint8))
        image = encoding.decode(data)
    """
    if not isinstance(spec, str):
        raise UnknownEncodingError(f"a column encoding must be a string, got {spec!r}")
    cached = _instances.get(spec)
    if cached is not None:
        return cached
    base, sep, argument = spec.partition(":")
    factory = _factories.get(base)
    if factory is None:
        raise UnknownEncodingError(
            f"unknown column encoding {spec!r}; the registered encodings are "
            f"{', '.join(sorted(_factories))}. Register your own with "
            f"shardstream.register_encoding()."
        )
    try:
        encoding = factory(spec, argument if sep else None)
    except (ValueError, TypeError) as exc:
        raise UnknownEncodingError(f"invalid column encoding {spec!r}: {exc}") from exc
    with _lock:
        _instances[spec] = encoding
    return encoding


def no_argument(cls: Callable[[str], Encoding]) -> EncodingFactory:
    """Wrap an encoding class whose name takes no ``:argument``."""

    def factory(name: str, argument: str | None) -> Encoding:
        if argument is not None:
            base = name.partition(":")[0]
            raise ValueError(f"encoding {base!r} takes no ':' argument: write just {base!r}")
        return cls(name)

    return factory


def too_deep(name: str, exc: RecursionError) -> SampleTooDeepError:
    """The error for a value nested past the recursion limit (the caller raises it)."""
    return SampleTooDeepError(
        f"encoding {name!r} cannot serialise the value: it nests deeper than Python's recursion "
        f"limit ({sys.getrecursionlimit()}) allows ({exc}); flatten it, or serialise it "
        "yourself into a 'bytes' or 'str' column"
    )


def _preview(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
