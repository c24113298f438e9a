"""The rules every backend applies to keys and byte ranges before asking its store."""

from __future__ import annotations

import re

from shardstream.errors import ConfigurationError

__all__ = ["check_key", "check_range", "url_for_message"]


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
            f"key {key!r} under {root} must be relative ('/'-separated, no leading '/', no "
            "'\\' or NUL) and must not climb with '..'"
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


def url_for_message(url: str) -> str:
    """``url`` as an error message may show it: without a password, query or fragment.

    A query may hold a secret (an Azure SAS token, a presigned signature) and so may the
    ``user:password@`` part of a URL; both are replaced with ``***``.

    Args:
        url: The URL a user passed, possibly malformed.
    """
    base, *tail = re.split(r"[?#]", url, maxsplit=1)
    scheme, sep, rest = base.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if sep and at and ":" in userinfo:  # user:password@host; bucket@namespace stays
        base = f"{scheme}://{userinfo.partition(':')[0]}:***@{host}{slash}{path}"
    return base + ("?***" if tail else "")
