"""The rules every backend applies to keys and byte ranges before asking its store."""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import SplitResult, urlsplit

from shardstream.errors import ConfigurationError

__all__ = ["check_key", "check_range", "split_store_url", "url_for_message"]


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


def split_store_url(
    url: str, schemes: Collection[str], kind: str, usage: str, instead: str = ""
) -> SplitResult:
    """``url`` split, when its scheme is one of ``schemes`` and it names a host, with no query.

    Args:
        url: A store's URL, as the user wrote it.
        schemes: The schemes the store takes, in lower case.
        kind: What the URL should be, for messages (``"an S3 URL"``).
        usage: How to write one (``"s3://bucket[/prefix]"``).
        instead: What to do instead of a query, appended to its message (``" and pass ..."``).

    Raises:
        ConfigurationError: Another scheme, no host, or a query or fragment (which may hold a
            secret, never shown).
    """
    parts = urlsplit(url)
    if parts.scheme.lower() not in schemes or not parts.netloc:
        raise ConfigurationError(f"{url_for_message(url)!r} is not {kind}: write {usage}")
    if parts.query or parts.fragment:
        raise ConfigurationError(
            f"{url_for_message(url)!r}: {kind} takes no query or fragment; drop it{instead}"
        )
    return parts
