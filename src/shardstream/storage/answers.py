"""What stores' requests ask and their answers say about an object, the same for every backend.

The byte range a ranged GET asks for, the body of a server that ignored it, and the version tag
(ETag) an answer gives: one spelling each, so that a listing's tags and a read's compare equal
whichever backend and SDK gave them.
"""

from __future__ import annotations

from typing import Any

from shardstream.errors import StorageError
from shardstream.storage.base import ObjectInfo
from shardstream.storage.store_base import PastTheEnd

__all__ = ["info_from_headers", "range_header", "range_info", "ranged_body", "tag"]

#: The status of an answer that sends the whole object (a server that ignored ``Range``).
_WHOLE = 200


def tag(value: object) -> str | None:
    """A version tag as a listing and a read both give it: without quotes; none if empty."""
    return str(value).strip('"') or None if value else None


def range_header(start: int, end: int | None) -> str | None:
    """The ``Range`` header of bytes ``start .. end - 1`` (``end`` ``None``: to the end).

    ``None`` when the whole object is asked for (``start`` 0, no ``end``): a plain GET.
    """
    if not start and end is None:
        return None
    return f"bytes={start}-{'' if end is None else end - 1}"


def ranged_body(body: bytes, status: int, start: int, end: int | None) -> bytes:
    """The asked bytes of an answer to a ranged GET that may have ignored the range.

    A server that ignores ``Range`` answers 200 with the whole object: the range is cut from it
    here, and a range past its end raises
    ``PastTheEnd`` (the store then names the size).
    """
    if status == _WHOLE and (start or end is not None):
        if end is not None and end > len(body):
            raise PastTheEnd
        return body[start:end]
    return body


def range_info(content_range: object, etag: object) -> ObjectInfo | None:
    """The object's size and tag from a ranged answer's ``Content-Range`` and ``ETag``.

    ``None`` when either is missing or the range names no total (``bytes 0-9/*``).
    """
    total = str(content_range or "").rpartition("/")[2].strip()
    version = tag(etag)
    if not total.isdigit() or version is None:
        return None
    return ObjectInfo(size=int(total), etag=version)


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
    return ObjectInfo(size=int(length), etag=tag(headers.get("ETag")))
