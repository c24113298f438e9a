"""The rules every backend applies to keys and byte ranges before asking its store."""

from __future__ import annotations

from shardstream.errors import ConfigurationError

__all__ = ["check_key", "check_range"]


def check_key(key: str, root: str) -> str:
    """Return ``key`` when it names something under the store's root, else raise.

    Args:
        key: A ``/``-separated key relative to the root.
        root: The store's root URL, for the message.

    Raises:
        ConfigurationError: ``key`` is absolute, holds a backslash or a NUL, or climbs with
            ``..``.
    """
    parts = key.split("/")
    if key.startswith("/") or "\\" in key or "\0" in key or ".." in parts:
        raise ConfigurationError(
            f"key {key!r} under {root} must be relative and must not climb with '..'"
        )
    return key


def check_range(start: int, end: int, url: str) -> None:
    """Raise unless ``0 <= start <= end`` (a well-formed byte range of ``url``).

    Raises:
        ConfigurationError: The range is negative or reversed.
    """
    if start < 0 or end < start:
        raise ConfigurationError(
            f"reading {url}: byte range [{start}, {end}) is not 0 <= start <= end"
        )
