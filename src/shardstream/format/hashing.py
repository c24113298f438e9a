"""Shard file digests: the hashlib algorithms and the xxhash family, as lowercase hex."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

from shardstream.errors import ConfigurationError

__all__ = ["HASH_ALGORITHMS", "check_hash_names", "hash_bytes", "hash_chunks"]

_HASHLIB = (
    "blake2b", "blake2s", "md5", "sha1", "sha224", "sha256", "sha384", "sha512",
    "sha3_224", "sha3_256", "sha3_384", "sha3_512",
)  # fmt: skip
_XXHASH = ("xxh128", "xxh32", "xxh3_128", "xxh3_64", "xxh64")

#: Every supported algorithm name, sorted; the value says which library provides it.
HASH_ALGORITHMS: Mapping[str, str] = MappingProxyType(
    dict(sorted({**dict.fromkeys(_HASHLIB, "hashlib"), **dict.fromkeys(_XXHASH, "xxhash")}.items()))
)


@cache
def _hasher(algorithm: str) -> Callable[..., Any]:
    if HASH_ALGORITHMS.get(algorithm) == "hashlib":
        return getattr(hashlib, algorithm)  # type: ignore[no-any-return]
    if HASH_ALGORITHMS.get(algorithm) == "xxhash":
        import xxhash

        return getattr(xxhash, algorithm)  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"unknown hash algorithm {algorithm!r}; use one of {', '.join(HASH_ALGORITHMS)}"
    )


def hash_bytes(algorithm: str, data: bytes | memoryview) -> str:
    """Return the lowercase hex digest of ``data`` under ``algorithm``."""
    return str(_hasher(algorithm)(data).hexdigest())


def hash_chunks(algorithm: str, chunks: Iterable[bytes | memoryview]) -> str:
    """Return the lowercase hex digest of the concatenated ``chunks`` under ``algorithm``."""
    hasher = _hasher(algorithm)()
    for chunk in chunks:
        hasher.update(chunk)
    return str(hasher.hexdigest())


def check_hash_names(names: Iterable[str] | None) -> list[str]:
    """Validate a writer's ``hashes`` argument: known names, unique and sorted, as the format needs.

    Raises:
        ConfigurationError: A name is unknown, repeated, or the list is not sorted.
    """
    result = list(names or [])
    for name in result:
        _hasher(name)
    if result != sorted(set(result)):
        raise ConfigurationError(
            f"hashes must be unique and sorted, got {result}; pass {sorted(set(result))}"
        )
    return result
