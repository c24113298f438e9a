"""What stores' answers say about an object, read the same way by every backend."""

from __future__ import annotations

from typing import Any

from shardstream.errors import StorageError
from shardstream.storage.base import ObjectInfo

__all__ = ["info_from_headers"]


def info_from_headers(headers: Any, url: str) -> ObjectInfo:
    """An object's size and etag from the headers of an HTTP answer about it.

    Args:
        headers: The answer's headers (anything with ``get``).
        url: The object's URL, named in the error.

    Raises:
        StorageError: The answer gave no size.
    """
    length = str(headers.get("Content-Length", "")).strip()
    if not length.isdigit():
        raise StorageError(f"checking {url}: the answer gave no size (Content-Length {length!r})")
    etag = headers.get("ETag")
    return ObjectInfo(size=int(length), etag=str(etag).strip('"') if etag else None)
