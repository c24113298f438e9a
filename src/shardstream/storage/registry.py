"""Choosing a storage backend from a URL."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from shardstream.errors import UnsupportedURLError
from shardstream.storage.base import ObjectStore
from shardstream.storage.local import LocalStore
from shardstream.storage.s3 import S3Store

__all__ = ["is_remote", "local_path", "open_store"]


def _scheme(url: str) -> str:
    scheme = urlsplit(url).scheme
    # A Windows drive letter ("C:\\data") is not a scheme.
    return "" if len(scheme) <= 1 else scheme.lower()


def is_remote(url: str) -> bool:
    """True when ``url`` names an object store rather than a local path (``file://`` is local)."""
    return _scheme(url) not in ("", "file")


def local_path(url: str) -> str:
    """The local path of a plain path or ``file://`` URL, with ``~`` expanded."""
    if _scheme(url) == "file":
        url = urlsplit(url).path
    return os.path.expanduser(url)


def open_store(url: str) -> ObjectStore:
    """Return the backend that publishes to ``url``: a local folder or ``s3://``.

    Opening does no I/O: credentials and the connection are checked on first use.

    Raises:
        UnsupportedURLError: No backend handles the URL's scheme in this version.
    """
    scheme = _scheme(url)
    if scheme in ("", "file"):
        return LocalStore(local_path(url))
    if scheme == "s3":
        return S3Store(url)
    raise UnsupportedURLError(
        f"cannot publish to {url!r}: this version of shardstream has no storage backend for "
        f"'{scheme}://' yet. Write to a local folder or a file:// URL, then copy the folder."
    )
