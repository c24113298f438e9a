"""Reading an S3 ListObjectsV2 page: its objects from the page's own XML, not botocore's parse.

botocore's modelled parser costs more CPU a page than the page's round trip to a distant
region, and a start lists every object of a dataset. A botocore ``before-parse`` hook
(:func:`keep_raw_listing`) keeps a successful page's XML and cuts its ``<Contents>`` out of
what botocore parses, which keeps the page's truncation flag and continuation token; the
objects are read from the XML here (:func:`page_objects`).

The objects are read by a scan for the three elements they need (``Key``, ``Size``,
``ETag``), several times cheaper than a tree, only when the page is the plain document every
S3 server writes: each ``<Contents>`` holds one of each, no element carries a namespace prefix
or an attribute, no text holds an entity but an ETag's quotes, no CDATA, comment or carriage
return. Any other page is read with ElementTree, as a conforming parser reads it, so an
unusual page costs time, never objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus
from xml.etree import ElementTree

from shardstream.errors import StorageError
from shardstream.storage.base import ObjectInfo

__all__ = ["RAW_LISTING", "keep_raw_listing", "page_objects", "page_of_xml", "parsed_objects"]

#: Where a listing page's own XML travels, in botocore's parsed answer.
RAW_LISTING = "shardstream-raw-listing"

_KEY = re.compile(rb"<Key>([^<]*)</Key>")
_SIZE = re.compile(rb"<Size>([^<]*)</Size>")
_ETAG = re.compile(rb"<ETag>([^<]*)</ETag>")
# What a page must not hold for the scan to read it as a parser would.
_UNUSUAL = (b"<![CDATA[", b"<!--", b"\r", b"<!DOCTYPE", b"<!ENTITY")
_QUOTES = (b"&#34;", b"&quot;", b"&#x22;")


def keep_raw_listing(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **kwargs: Any
) -> None:
    """Hand a listing page's XML to :func:`page_objects` and spare botocore its objects.

    Errors parse as usual: only a successful answer's body is kept and cut.
    """
    body = response_dict.get("body")
    if response_dict.get("status_code", 500) >= 300 or not isinstance(body, bytes):
        return
    customized_response_dict[RAW_LISTING] = body
    response_dict["body"] = _without_contents(body)


def page_of_xml(body: bytes, url: str) -> dict[str, Any]:
    """A ListObjectsV2 answer's XML as :func:`page_objects` takes it, with its continuation.

    What a page says beside its objects (truncated or not, the next page's token, whether
    keys come URL-encoded) is read with ElementTree from the page without its objects.

    Raises:
        StorageError: The ``200 OK`` answer is no listing page (see :func:`page_objects`).
    """
    root = _listing_root(_without_contents(body), body, url)
    fields = {child.tag.rpartition("}")[2]: child.text or "" for child in root}
    truncated = fields.get("IsTruncated", "").lower() == "true"
    page: dict[str, Any] = {RAW_LISTING: body, "IsTruncated": truncated}
    if token := fields.get("NextContinuationToken"):
        page["NextContinuationToken"] = token
    if encoding := fields.get("EncodingType"):
        page["EncodingType"] = encoding
    return page


def page_objects(page: dict[str, Any], root: str, url: str) -> dict[str, ObjectInfo]:
    """Each object of a ListObjectsV2 answer botocore gave, keyed relative to ``root``.

    ``page``: botocore's answer (with the raw XML :func:`keep_raw_listing` kept, else the
    objects botocore parsed); ``root``: the store's prefix with its ``/``; ``url``: the listed
    URL, for messages. "Folder" markers (keys ending in ``/``) are no objects.

    Raises:
        StorageError: The ``200 OK`` answer is no listing page (a gateway's HTML page, a body
            cut short): a transfer error, retried as one; read as a page of no keys, it would
            end the listing early and every later object would seem deleted.
    """
    # A server that ignores EncodingType does not echo it (botocore reads it so).
    encoded = page.get("EncodingType") == "url"
    raw = page.get(RAW_LISTING)
    if raw is None:
        listed: Any = parsed_objects(page)
    else:
        listed = _scanned_objects(raw, encoded)
        if listed is None:
            listed = _tree_objects(raw, encoded, url)
    skip = len(root)
    infos: dict[str, ObjectInfo] = {}
    for name, size, etag in listed:
        key = name[skip:]
        if key and not key.endswith("/"):
            infos[key] = ObjectInfo(size=size, etag=etag.strip('"') if etag else None)
    return infos


def parsed_objects(page: dict[str, Any]) -> Iterator[tuple[str, int, str | None]]:
    """``(key, size, etag)`` of a page botocore parsed itself (its body came as no bytes)."""
    for item in page.get("Contents") or ():
        etag = item.get("ETag")
        yield (
            unquote_plus(str(item["Key"]))
            if page.get("EncodingType") == "url"
            else str(item["Key"]),
            int(item["Size"]),
            str(etag) if etag else None,
        )


def _without_contents(body: bytes) -> bytes:
    """``body`` with every ``<Contents>...</Contents>`` cut out (keys hold no ``<``)."""
    parts = body.split(b"<Contents>")
    return parts[0] + b"".join(part.partition(b"</Contents>")[2] for part in parts[1:])


def _scanned_objects(page: bytes, encoded: bool) -> list[tuple[str, int, str | None]] | None:
    """The page's objects, read by a scan; ``None`` when the page is not plain enough for one.

    Each element is counted twice over: as the scan finds it whole, and as the text
    ``Name>`` that ends its opening tag and its closing one. A prefixed (``<s3:Key>``) or
    attributed (``<Key a="">``) tag, or an element split by a comment, makes the counts differ.
    """
    if not page.isascii() or any(mark in page for mark in _UNUSUAL):
        return None  # a declared encoding to honour, or markup a scan would misread
    if page.find(b"<?", 1) >= 0 or not _is_whole_result(page):
        return None
    keys, sizes, etags = _KEY.findall(page), _SIZE.findall(page), _ETAG.findall(page)
    count = page.count(b"<Contents>")
    if not len(keys) == len(sizes) == len(etags) == count:
        return None
    if any(page.count(tag) != 2 * count for tag in (b"Contents>", b"Key>", b"Size>", b"ETag>")):
        return None
    objects: list[tuple[str, int, str | None]] = []
    for key, size, etag in zip(keys, sizes, etags, strict=True):
        for quote in _QUOTES:
            etag = etag.replace(quote, b'"')
        if b"&" in key or b"&" in etag or not size.strip().isdigit():
            return None  # an entity to resolve, or a size no integer: the parser's work
        name, tag = key.decode("ascii"), etag.decode("ascii")  # the page is ASCII
        if encoded and ("%" in name or "+" in name):
            name = unquote_plus(name)
        objects.append((name, int(size), tag or None))
    return objects


def _is_whole_result(page: bytes) -> bool:
    """Whether ``page`` is one ``ListBucketResult`` document, ending where it should."""
    start = page.find(b"<ListBucketResult")
    return 0 <= start < page.find(b">", start) and page.rstrip().endswith(b"</ListBucketResult>")


def _tree_objects(page: bytes, encoded: bool, url: str) -> list[tuple[str, int, str | None]]:
    """``(key, size, etag)`` of each object of a page, read with ElementTree.

    Raises:
        StorageError: The page is no listing page (see :func:`page_objects`).
    """
    objects = []
    for element in _listing_root(page, page, url):
        if element.tag.rpartition("}")[2] != "Contents":
            continue
        fields = {child.tag.rpartition("}")[2]: child.text or "" for child in element}
        key = unquote_plus(fields["Key"]) if encoded else fields["Key"]
        objects.append((key, int(fields["Size"]), fields.get("ETag") or None))
    return objects


def _listing_root(xml: bytes, page: bytes, url: str) -> ElementTree.Element:
    """The ``ListBucketResult`` element of ``xml`` (all or part of ``page``).

    Raises:
        StorageError: The page is no listing page (see :func:`page_objects`).
    """
    # The page comes from the store the caller named, parsed as botocore parses it (expat
    # refuses entity expansion attacks).
    try:
        root = ElementTree.fromstring(xml)  # noqa: S314
    except ElementTree.ParseError as exc:
        raise _not_a_listing(url, page, f"not XML ({exc})") from exc
    name = root.tag.rpartition("}")[2]
    if name != "ListBucketResult":
        raise _not_a_listing(url, page, f"a <{name}> document")
    return root


def _not_a_listing(url: str, page: bytes, what: str) -> StorageError:
    return StorageError(
        f"listing {url} failed: a transfer error: the server answered 200 OK with "
        f"{len(page)} bytes that are no listing page but {what}"
    )
