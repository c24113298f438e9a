"""How every backend spells a ranged request and reads an answer's range and version tag."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.http_server import StaticServer

from shardstream.errors import ObjectNotFoundError, StorageError
from shardstream.storage import HTTPStore
from shardstream.storage.answers import info_from_headers, range_header, ranged_body, tag
from shardstream.storage.base import ObjectInfo
from shardstream.storage.store_base import PastTheEnd

DATA = b"0123456789"


def test_a_range_header_asks_for_the_last_byte_inclusive_and_none_for_a_whole_object():
    assert range_header(0, None) is None  # a plain GET
    assert range_header(0, 10) == "bytes=0-9"
    assert range_header(3, 4) == "bytes=3-3"
    assert range_header(7, None) == "bytes=7-"  # a suffix from byte 7


@pytest.mark.parametrize(("start", "end"), [(0, 10), (2, 6), (9, 10), (4, None)])
def test_a_body_sent_whole_for_a_range_is_cut_to_it(start: int, end: int | None):
    assert ranged_body(DATA, 200, start, end) == DATA[start:end]


def test_a_partial_answer_and_a_whole_read_are_kept_as_sent():
    assert ranged_body(b"2345", 206, 2, 6) == b"2345"
    assert ranged_body(b"234", 206, 2, 6) == b"234"  # short: the store's range check refuses it
    assert ranged_body(DATA, 200, 0, None) == DATA


@pytest.mark.parametrize(("start", "end"), [(5, 11), (20, 30)])
def test_a_range_past_a_whole_body_says_so_rather_than_cutting_short(start: int, end: int):
    with pytest.raises(PastTheEnd):
        ranged_body(DATA, 200, start, end)


def test_a_tag_loses_its_quotes_and_an_empty_one_is_none():
    assert tag('"abc"') == "abc"
    assert tag("abc") == "abc"
    assert tag('""') is None
    assert tag("") is None
    assert tag(None) is None
    assert tag(1234) == "1234"  # a GCS generation


def test_headers_give_size_and_tag_or_a_clear_error():
    assert info_from_headers({"Content-Length": "10", "ETag": '"t"'}, "u") == ObjectInfo(10, "t")
    assert info_from_headers({"Content-Length": " 3 "}, "u") == ObjectInfo(3, None)
    with pytest.raises(StorageError, match="http://h/k: the answer gave no size"):
        info_from_headers({"ETag": "t"}, "http://h/k")


@pytest.fixture
def ignoring_server(tmp_path: Path) -> Iterator[str]:
    """A file server on 127.0.0.1 that ignores ``Range`` (answers 200 with the whole file)."""
    (tmp_path / "k.bin").write_bytes(DATA)
    with StaticServer(str(tmp_path), ranges=False) as server:
        yield server.url


def test_a_server_that_ignores_ranges_still_gives_each_range_and_names_the_true_size(
    ignoring_server: str,
):
    store = HTTPStore(ignoring_server)
    assert store.get_range("k.bin", 2, 6) == b"2345"
    assert store.get_range("k.bin", 9, 10) == b"9"
    for start, end in ((5, 11), (20, 30)):
        with pytest.raises(StorageError, match=r"runs past the end of the object \(10 bytes\)"):
            store.get_range("k.bin", start, end)
    with pytest.raises(ObjectNotFoundError):
        store.get_range("none.bin", 0, 1)
