"""The ObjectStore contract (``shardstream.storage.base``), checked the same way for every backend.

To add a backend:

1. Provide a fixture ``store_factory_<name>`` (in ``tests/integration/conftest.py`` or a module
   it imports) returning a callable ``() -> ObjectStore`` that gives a fresh, empty root.
2. Add ``<name>`` to ``BACKENDS`` below, and its pytest marks (if any) to ``MARKS``.
3. A read-only backend also goes into ``READ_ONLY`` and provides ``seed_<name>``, a fixture
   returning ``seed(store, key, data)`` that puts an object behind the store's back. Its
   ``put_file`` and ``list`` are checked to refuse clearly instead.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shardstream.errors import (
    ConfigurationError,
    ObjectNotFoundError,
    ShardFormatError,
    ShardstreamError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage import DownloadOptions, ObjectStore, download_file, fetch_bytes
from shardstream.storage.base import Remover
from shardstream.storage.store_base import BaseStore

BACKENDS = [
    "local",
    "s3_obstore",  # S3Store's reads through each client: the same contract, the same errors
    "s3_botocore",
    "s3_plain",
    "http",
    "gcs",
    "azure",  # reads through obstore when installed
    "azure_adlfs",
    "oci",
    "databricks",
    "obstore_s3",  # the obstore client alone, as a whole store (writes and listings too)
    "obstore_azure",
]
READ_ONLY = {"http"}
MARKS: dict[str, list[Any]] = {
    "s3_obstore": [pytest.mark.s3],
    "s3_botocore": [pytest.mark.s3],
    "s3_plain": [pytest.mark.s3],
    "gcs": [pytest.mark.gcs],
    "azure": [pytest.mark.azure],
    "azure_adlfs": [pytest.mark.azure],
    "obstore_s3": [pytest.mark.s3],
    "obstore_azure": [pytest.mark.azure],
}


@dataclass
class Root:
    """A fresh store, and how to put objects into it (``put_file``, or a read-only one's seed)."""

    name: str
    store: ObjectStore
    put: Callable[[str, bytes], None]
    writable: bool


@pytest.fixture(
    params=[pytest.param(name, marks=MARKS.get(name, []), id=name) for name in BACKENDS]
)
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Root:
    name: str = request.param
    store: ObjectStore = request.getfixturevalue(f"store_factory_{name}")()
    if name in READ_ONLY:
        seed = request.getfixturevalue(f"seed_{name}")
        return Root(name, store, lambda key, data: seed(store, key, data), writable=False)

    def put(key: str, data: bytes) -> None:
        source = tmp_path / f"source-{uuid.uuid4().hex[:8]}"
        source.write_bytes(data)
        store.put_file(str(source), key)

    return Root(name, store, put, writable=True)


def leftovers(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An empty folder for downloads, apart from the local backend's root and the sources."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    return folder


# --- writing --------------------------------------------------------------------------------------


def test_put_file_round_trip_or_a_clear_refusal(root: Root, tmp_path: Path):
    source = tmp_path / "f.bin"
    data = os.urandom(70_001)
    source.write_bytes(data)
    if not root.writable:
        with pytest.raises(ShardstreamError, match="read-only") as info:
            root.store.put_file(str(source), "f.bin")
        assert root.store.url("f.bin") in str(info.value)
        assert not root.store.exists("f.bin")
        return
    root.store.put_file(str(source), "f.bin")
    root.store.put_file(str(source), "deep/er/f.bin")
    assert root.store.get_bytes("f.bin") == data
    assert root.store.get_bytes("deep/er/f.bin") == data
    source.write_bytes(b"replaced")
    root.store.put_file(str(source), "f.bin")
    assert root.store.get_bytes("f.bin") == b"replaced"


def test_put_file_of_a_missing_source_raises_oserror_and_publishes_nothing(
    root: Root, tmp_path: Path
):
    if not root.writable:
        with pytest.raises(ShardstreamError):
            root.store.put_file(str(tmp_path / "nope"), "x.bin")
    else:
        with pytest.raises(OSError, match="nope"):
            root.store.put_file(str(tmp_path / "nope"), "x.bin")
    assert not root.store.exists("x.bin")


def test_delete_removes_one_object_and_a_missing_one_is_no_error(root: Root):
    # A writer deletes the shards of earlier writes once its index is published.
    if not root.writable:
        assert not isinstance(root.store, Remover)
        return
    assert isinstance(root.store, Remover)
    for key in ("a.bin", "ab.bin", "deep/a.bin"):
        root.put(key, b"x")
    root.store.delete("a.bin")
    root.store.delete("deep/a.bin")
    assert root.store.list() == ["ab.bin"]
    root.store.delete("a.bin")  # already gone
    root.store.delete("never/was.bin")
    assert root.store.list() == ["ab.bin"]
    with pytest.raises(ConfigurationError):
        root.store.delete("../outside.bin")


# --- reading --------------------------------------------------------------------------------------


def test_get_bytes_of_objects_large_small_and_empty(root: Root):
    data = os.urandom(300_000)
    root.put("big.bin", data)
    root.put("empty.bin", b"")
    root.put("one.bin", b"x")
    assert root.store.get_bytes("big.bin") == data
    assert root.store.get_bytes("empty.bin") == b""
    assert root.store.get_bytes("one.bin") == b"x"


def test_get_range_at_the_start_middle_and_end(root: Root):
    data = os.urandom(10_000)
    root.put("r.bin", data)
    store = root.store
    assert store.get_range("r.bin", 0, 10) == data[:10]
    assert store.get_range("r.bin", 4_321, 5_000) == data[4_321:5_000]
    assert store.get_range("r.bin", 9_990, 10_000) == data[-10:]
    assert store.get_range("r.bin", 0, 10_000) == data
    assert store.get_range("r.bin", 9_999, 10_000) == data[-1:]
    assert store.get_range("r.bin", 500, 500) == b""
    assert store.get_range("r.bin", 10_000, 10_000) == b""


@pytest.mark.parametrize(("start", "end"), [(9_990, 10_001), (10_000, 10_050), (20_000, 20_001)])
def test_get_range_past_the_end_is_an_error_not_a_short_read(root: Root, start: int, end: int):
    root.put("r.bin", os.urandom(10_000))
    with pytest.raises(StorageError) as info:
        root.store.get_range("r.bin", start, end)
    assert not isinstance(info.value, ObjectNotFoundError)
    assert root.store.url("r.bin") in str(info.value)
    # Every backend in the same words, naming the object's size (not the SDK's reply).
    assert f"byte range [{start}, {end}) runs past the end" in str(info.value)
    assert "(10000 bytes)" in str(info.value)


@pytest.mark.parametrize(("start", "end"), [(-1, 5), (10, 5)])
def test_get_range_refuses_reversed_or_negative_ranges(root: Root, start: int, end: int):
    root.put("r.bin", b"0123456789abcdef")
    with pytest.raises(ConfigurationError, match="byte range"):
        root.store.get_range("r.bin", start, end)


def test_info_gives_the_size_and_an_etag_that_follows_the_content(root: Root):
    root.put("i.bin", b"a" * 1234)
    first = root.store.info("i.bin")
    assert first.size == 1234
    assert root.store.info("i.bin") == first  # stable while the object is unchanged
    root.put("i.bin", b"b" * 99)
    second = root.store.info("i.bin")
    assert second.size == 99
    if first.etag is not None:
        assert second.etag is not None
        assert second.etag != first.etag
    root.put("empty.bin", b"")
    assert root.store.info("empty.bin").size == 0


def test_exists_is_true_for_objects_only(root: Root):
    root.put("dir/sub/obj.bin", b"x")
    store = root.store
    assert store.exists("dir/sub/obj.bin")
    assert not store.exists("dir/sub/other.bin")
    assert not store.exists("dir/sub")  # a "folder" is not an object
    assert not store.exists("nowhere/obj.bin")


def test_list_with_prefixes_and_nested_keys(root: Root):
    store = root.store
    if not root.writable:
        root.put("a.bin", b"x")
        with pytest.raises(ShardstreamError, match="cannot list") as info:
            store.list()
        assert root.store.url("") in str(info.value)
        return
    assert store.list() == []  # a fresh root
    for key in ["b.bin", "a.bin", "a/x.bin", "a/y/z.bin", "ab.bin", "c/d/e/f.bin"]:
        root.put(key, key.encode())
    assert store.list() == ["a.bin", "a/x.bin", "a/y/z.bin", "ab.bin", "b.bin", "c/d/e/f.bin"]
    assert store.list("a/") == ["a/x.bin", "a/y/z.bin"]
    assert store.list("a") == ["a.bin", "a/x.bin", "a/y/z.bin", "ab.bin"]
    assert store.list("c/d/") == ["c/d/e/f.bin"]
    assert store.list("zzz") == []
    for key in store.list():
        assert store.get_bytes(key) == key.encode()


def test_list_info_gives_every_listed_object_with_a_tag_that_follows_the_content(root: Root):
    store = root.store
    if not root.writable:
        root.put("a.bin", b"x")
        with pytest.raises(ShardstreamError, match="cannot list"):
            store.list_info()
        return
    assert store.list_info() == {}
    for key, size in [("a.bin", 10), ("n/b.bin", 3), ("n/deep/c.bin", 0)]:
        root.put(key, b"q" * size)
    first = store.list_info()
    assert sorted(first) == store.list() == ["a.bin", "n/b.bin", "n/deep/c.bin"]
    assert {key: info.size for key, info in first.items()} == {
        "a.bin": 10, "n/b.bin": 3, "n/deep/c.bin": 0,
    }  # fmt: skip
    assert sorted(store.list_info("n/")) == ["n/b.bin", "n/deep/c.bin"]
    assert store.list_info() == first  # stable while nothing changes
    time.sleep(0.01)  # stores that tag by modification time tell the rewrite apart
    root.put("n/b.bin", b"r" * 3)  # rewritten in place: same key, same size
    second = store.list_info()
    assert second["a.bin"] == first["a.bin"]
    assert second["n/b.bin"].size == 3
    assert second["n/b.bin"].etag is not None
    assert second["n/b.bin"].etag != first["n/b.bin"].etag


def test_get_bytes_info_gives_the_identity_a_listing_gives_the_version_read(root: Root):
    store = root.store
    if not (isinstance(store, BaseStore) and store.identifies_reads):
        root.put("g.bin", b"g")
        if isinstance(store, BaseStore):
            with pytest.raises(UnsupportedURLError, match="cannot tell which version"):
                store.get_bytes_info("g.bin")
        return
    root.put("g.bin", b"g" * 1500)
    data, info = store.get_bytes_info("g.bin")
    assert data == b"g" * 1500
    assert info.size == 1500
    assert info.etag  # a version tag, compared with the listing's by equality
    assert store.list_info()["g.bin"] == info == store.info("g.bin")
    time.sleep(0.01)  # stores that tag by modification time tell the rewrite apart
    root.put("g.bin", b"h" * 1500)  # rewritten in place: same key, same size
    again, later = store.get_bytes_info("g.bin")
    assert again == b"h" * 1500
    assert later != info
    assert store.list_info()["g.bin"] == later
    with pytest.raises(ObjectNotFoundError, match=r"nowhere\.bin"):
        store.get_bytes_info("nowhere.bin")


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.get_bytes("missing/key.bin"),
        lambda store: store.get_range("missing/key.bin", 0, 4),
        lambda store: store.info("missing/key.bin"),
    ],
    ids=["get_bytes", "get_range", "info"],
)
def test_missing_keys_raise_object_not_found_naming_the_url(
    root: Root, call: Callable[[ObjectStore], object]
):
    root.put("present.bin", b"x")
    with pytest.raises(ObjectNotFoundError) as info:
        call(root.store)
    assert root.store.url("missing/key.bin") in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize("key", ["../escape.bin", "a/../../escape.bin", "/absolute.bin", ".."])
def test_keys_that_leave_the_root_are_refused(root: Root, tmp_path: Path, key: str):
    source = tmp_path / "f"
    source.write_bytes(b"x")
    store = root.store
    for call in (
        lambda: store.get_bytes(key),
        lambda: store.get_range(key, 0, 1),
        lambda: store.info(key),
        lambda: store.exists(key),
    ):
        with pytest.raises(ConfigurationError, match="relative"):
            call()
    with pytest.raises(ShardstreamError):  # refused for the key, or because read-only
        store.put_file(str(source), key)
    assert not (tmp_path.parent / "escape.bin").exists()


def test_url_names_the_key(root: Root):
    url = root.store.url("sub/shard.00000.mds")
    assert url.endswith("sub/shard.00000.mds")
    assert url != root.store.url("sub/shard.00001.mds")


# --- downloading ----------------------------------------------------------------------------------


def test_download_file_round_trip_small(root: Root, out: Path):
    data = os.urandom(50_000)
    root.put("shard.00000.mds", data)
    dest = out / "cache" / "shard.00000.mds"
    assert download_file(root.store, "shard.00000.mds", str(dest)) == len(data)
    assert dest.read_bytes() == data
    assert leftovers(dest.parent) == ["shard.00000.mds"]


def test_download_file_round_trip_in_parallel_ranges(root: Root, out: Path):
    data = os.urandom(10_500)
    root.put("shard.00001.mds", data)
    dest = out / "shard.00001.mds"
    options = DownloadOptions(part_size=1_000, concurrency=3)
    written = download_file(root.store, "shard.00001.mds", str(dest), options, expected_size=10_500)
    assert written == len(data)
    assert dest.read_bytes() == data
    assert leftovers(out) == ["shard.00001.mds"]


def test_download_file_of_an_empty_object(root: Root, out: Path):
    root.put("empty.bin", b"")
    dest = out / "empty.bin"
    assert download_file(root.store, "empty.bin", str(dest)) == 0
    assert dest.read_bytes() == b""


def test_download_file_replaces_an_older_copy(root: Root, out: Path):
    root.put("index.json", b'{"new": true}')
    dest = out / "index.json"
    dest.write_bytes(b"old and longer contents")
    download_file(root.store, "index.json", str(dest))
    assert dest.read_bytes() == b'{"new": true}'
    assert leftovers(out) == ["index.json"]


def test_download_file_is_atomic_no_partial_file_under_the_final_name(root: Root, out: Path):
    root.put("shard.bin", os.urandom(5_000))
    dest = out / "shard.bin"
    with pytest.raises(ShardFormatError, match="4000") as info:
        download_file(root.store, "shard.bin", str(dest), expected_size=4_000)
    assert root.store.url("shard.bin") in str(info.value)
    with pytest.raises(ObjectNotFoundError):
        download_file(root.store, "missing.bin", str(out / "missing.bin"))
    assert leftovers(out) == []
    dest.write_bytes(b"previous")
    with pytest.raises(ShardFormatError):
        download_file(
            root.store, "shard.bin", str(dest), DownloadOptions(part_size=999), expected_size=1
        )
    assert dest.read_bytes() == b"previous"
    assert leftovers(out) == ["shard.bin"]


def test_fetch_bytes(root: Root):
    root.put("index.json", b'{"version": 2}')
    assert fetch_bytes(root.store, "index.json") == b'{"version": 2}'
    with pytest.raises(ObjectNotFoundError):
        fetch_bytes(root.store, "nope.json", DownloadOptions(retry=3))
