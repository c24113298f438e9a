"""A ListObjectsV2 page's objects: the scan reads what a parser reads, or leaves it to one."""

from __future__ import annotations

import random
from typing import Any

import pytest

from shardstream.errors import StorageError
from shardstream.storage import s3_listing
from shardstream.storage.base import ObjectInfo
from shardstream.storage.s3_listing import RAW_LISTING, keep_raw_listing, page_objects

HEAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>'
    b"<Prefix>ds/</Prefix><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
)
NS = b'xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/"'
TAIL = b"<NextContinuationToken>t0k</NextContinuationToken></ListBucketResult>"


def contents(
    key: bytes, size: bytes = b"20", etag: bytes = b"&#34;e1&#34;", order: int = 0
) -> bytes:
    """One ``<Contents>``, its children in one of the orders servers write them."""
    key_, size_, etag_ = (
        b"<Key>" + key + b"</Key>",
        b"<Size>" + size + b"</Size>",
        b"<ETag>" + etag + b"</ETag>",
    )
    date = b"<LastModified>2026-11-28T19:57:21Z</LastModified>"
    kinds = [
        key_ + etag_ + size_ + b"<StorageClass>STANDARD</StorageClass>" + date,  # SeaweedFS
        key_ + date + etag_ + size_ + b"<StorageClass>STANDARD</StorageClass>",  # AWS, MinIO
        size_ + b"<Owner><ID>0</ID><DisplayName>x</DisplayName></Owner>" + etag_ + key_,
    ]  # fmt: skip
    return b"<Contents>" + kinds[order % 3] + b"</Contents>"


def answer(body: bytes, encoded: bool = False) -> dict[str, Any]:
    """The answer botocore gives to ``body``, as the hook leaves it."""
    page: dict[str, Any] = {"EncodingType": "url"} if encoded else {}
    response: dict[str, Any] = {"status_code": 200, "body": body}
    keep_raw_listing(response, page)
    assert b"<Contents>" not in response["body"]  # botocore parses no object
    assert b"<NextContinuationToken>t0k" in response["body"]  # but still the token
    return page


def by_tree(body: bytes, encoded: bool, root: str = "ds/") -> dict[str, ObjectInfo]:
    """What ElementTree reads from the page, the reference the scan is held to."""
    objects = s3_listing._tree_objects(body, encoded, "s3://b/ds")
    return {
        name[len(root) :]: ObjectInfo(size, etag.strip('"') if etag else None)
        for name, size, etag in objects
        if name[len(root) :] and not name.endswith("/")
    }


def test_a_plain_page_is_scanned_and_read_as_a_parser_reads_it():
    rng = random.Random(7)  # noqa: S311 (sizes, not secrets)
    body = HEAD + b"".join(
        contents(f"ds/shard.{k:06d}.mds".encode(), str(rng.randrange(10**9)).encode(), order=k)
        for k in range(1000)
    ) + TAIL  # fmt: skip
    assert s3_listing._scanned_objects(body, False) is not None  # the fast route is taken
    listed = page_objects(answer(body), "ds/", "s3://b/ds")
    assert listed == by_tree(body, False)
    assert len(listed) == 1000
    assert listed["shard.000000.mds"].etag == "e1"


@pytest.mark.parametrize(
    ("encoded", "key", "expected"),
    [
        (True, b"ds/a+b%2Fc%26d.mds", "a b/c&d.mds"),
        (True, b"ds/%E2%82%AC.mds", "\u20ac.mds"),
        (False, b"ds/a+b.mds", "a+b.mds"),
        (False, b"ds/a&amp;b.mds", "a&b.mds"),  # an entity: left to the parser
        (False, "ds/\u20ac.mds".encode(), "\u20ac.mds"),  # not ASCII: left to the parser
        (False, b"ds/a&#x3C;b.mds", "a<b.mds"),
        (False, b"ds/folder/", None),  # a "folder" marker is no object
    ],
)
def test_keys_read_as_a_parser_reads_them(encoded: bool, key: bytes, expected: str | None):
    body = HEAD + contents(b"ds/x.mds") + contents(key) + TAIL
    listed = page_objects(answer(body, encoded), "ds/", "s3://b/ds")
    assert listed == by_tree(body, encoded)
    assert set(listed) == {"x.mds"} | ({expected} if expected else set())


UNUSUAL = [
    # prefixed elements: a scan that counted only <Contents> would find no object at all
    HEAD.replace(b"<ListBucketResult ", b"<ListBucketResult " + NS + b" ")
    + b"<s3:Contents><s3:Key>ds/a</s3:Key><s3:Size>1</s3:Size><s3:ETag>e</s3:ETag>"
    b"</s3:Contents>" + TAIL,
    HEAD + contents(b"ds/a") + b'<Contents><Key a="1">ds/b</Key><Size>2</Size><ETag>e</ETag>'
    b"</Contents>" + TAIL,
    HEAD + contents(b"ds/a") + b"<Contents><Key>ds/<![CDATA[b]]></Key><Size>2</Size>"
    b"<ETag>e</ETag></Contents>" + TAIL,
    HEAD + contents(b"ds/a") + b"<!-- <Contents><Key>ds/z</Key><Size>1</Size><ETag>e</ETag>"
    b"</Contents> -->" + TAIL,
    HEAD + contents(b"ds/a") + b"<?pi <Contents><Key>ds/z</Key><Size>1</Size><ETag>e</ETag>"
    b"</Contents> ?>" + TAIL,
    HEAD + contents(b"ds/a", etag=b"&quot;q&quot;") + contents(b"ds/b", etag=b"&#x22;r&#x22;")
    + contents(b"ds/c", etag=b"&amp;s") + TAIL,
    HEAD + contents(b"ds/a", size=b" 7 ") + TAIL,
    HEAD + b"<Contents><Key>ds/a</Key><Size>1</Size></Contents>" + contents(b"ds/b") + TAIL,
    HEAD + contents(b"ds/a\r\nb") + TAIL,
    HEAD + contents(b"ds/a>Key>b") + TAIL,
]  # fmt: skip


@pytest.mark.parametrize("body", UNUSUAL)
def test_an_unusual_page_reads_as_the_parser_reads_it(body: bytes):
    assert page_objects(answer(body), "ds/", "s3://b/ds") == by_tree(body, False)


@pytest.mark.parametrize(
    "body",
    [
        HEAD + contents(b"ds/a") + contents(b"ds/b"),  # cut short between two objects
        HEAD + contents(b"ds/a")[:30],
        b"<html><body>gateway timeout</body></html>",
        b'<?xml version="1.0"?><Error><Code>x</Code></Error>',
        b"",
    ],
)
def test_an_answer_that_is_no_listing_page_is_a_transfer_error(body: bytes):
    page = {RAW_LISTING: body}
    with pytest.raises(StorageError, match="no listing page"):
        page_objects(page, "ds/", "s3://b/ds")


def test_a_failed_answer_is_left_to_botocore():
    response = {"status_code": 403, "body": b"<Error><Code>AccessDenied</Code></Error>"}
    page: dict[str, Any] = {}
    keep_raw_listing(response, page)
    assert page == {}
    assert response["body"] == b"<Error><Code>AccessDenied</Code></Error>"
