"""A byte range tied to the version a listing named: an object rewritten in between is refused.

Each store on its real server (SeaweedFS for S3 through obstore and through botocore,
fake-gcs-server, Azurite through obstore, a local folder): an object is listed, rewritten in
place under the same key with the same size, and a range read with the listed tag must raise
``ObjectChangedError`` naming the URL, never hand out the new version's bytes. Then a first
batch's range reader (``cache/sample_ranges.py``) on each server, with the shard rewritten on
the server between its header's range and its samples': the shard gets no view (the cache
fetches it whole), never the new samples under the old header.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from shardstream import MDSWriter
from shardstream.cache import CacheStream, ShardCache, sync_index
from shardstream.cache.sample_ranges import SampleRanges
from shardstream.errors import ObjectChangedError, UnsupportedURLError
from shardstream.format.index import parse_index
from shardstream.format.mds import MDSSchema, MDSShardView
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage import DownloadOptions, ObjectStore
from shardstream.storage.base import ObjectInfo
from shardstream.storage.store_base import BaseStore

TIED = ["local", "s3_obstore", "s3_botocore", "s3_plain", "gcs", "azure"]


def _store(request: pytest.FixtureRequest, name: str) -> BaseStore:
    factory: Callable[[], BaseStore] = request.getfixturevalue(f"store_factory_{name}")
    return factory()


def _put(store: BaseStore, tmp_path: Path, key: str, data: bytes) -> None:
    path = tmp_path / f"upload-{len(list(tmp_path.iterdir()))}"
    path.write_bytes(data)
    store.put_file(str(path), key)


@pytest.mark.parametrize("name", TIED)
def test_a_range_tied_to_the_listed_version_refuses_a_rewritten_object(request, tmp_path, name):
    store = _store(request, name)
    old, new = bytes(range(256)) * 16, bytes(reversed(range(256))) * 16
    _put(store, tmp_path, "shard.00000.mds", old)
    listed = store.list_info()["shard.00000.mds"]
    assert listed.etag
    assert listed.size == len(old)
    assert store.ties_ranges
    assert store.get_range("shard.00000.mds", 100, 300, if_match=listed.etag) == old[100:300]
    _put(store, tmp_path, "shard.00000.mds", new)  # the same size, other bytes
    assert store.list_info()["shard.00000.mds"].etag != listed.etag
    with pytest.raises(ObjectChangedError, match=r"shard\.00000\.mds.*rewritten since"):
        store.get_range("shard.00000.mds", 100, 300, if_match=listed.etag)
    # A ranged read names the version it read: the listing's, for the ranges after it.
    data, read = store.get_range_info("shard.00000.mds", 100, 300)
    assert (data, read) == (new[100:300], store.list_info()["shard.00000.mds"])
    assert read is not None
    assert store.get_range("shard.00000.mds", 0, 50, if_match=read.etag) == new[:50]
    # Untied, the same read gives the new version; tied to the new tag, too.
    assert store.get_range("shard.00000.mds", 100, 300) == new[100:300]
    now = store.list_info()["shard.00000.mds"].etag
    assert store.get_range("shard.00000.mds", 100, 300, if_match=now) == new[100:300]


@pytest.mark.parametrize("name", ["s3_obstore", "s3_plain", "gcs", "azure"])
def test_a_tied_range_past_the_end_is_still_a_range_error(request, tmp_path, name):
    store = _store(request, name)
    _put(store, tmp_path, "a.bin", b"x" * 100)
    tag = store.list_info()["a.bin"].etag
    assert tag is not None
    with pytest.raises(OSError, match=r"a\.bin") as info:
        store.get_range("a.bin", 50, 200, if_match=tag)
    assert not isinstance(info.value, ObjectChangedError)


@pytest.mark.parametrize("name", ["http", "azure_adlfs"])
def test_a_store_that_cannot_tie_a_range_says_so(request, name):
    store = _store(request, name)
    assert not store.ties_ranges
    with pytest.raises(UnsupportedURLError, match="cannot tie a byte range"):
        store.get_range("a.bin", 0, 10, if_match="v1")


class _RewritesAfterHeader:
    """A real store whose one shard is rewritten on the server right after its header is read."""

    def __init__(self, store: BaseStore, key: str, new: Path) -> None:
        self.store, self.key, self.new, self.rewritten = store, key, new, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def get_range_info(self, key: str, start: int, end: int) -> tuple[bytes, ObjectInfo | None]:
        answer = self.store.get_range_info(key, start, end)  # the header's range
        if key == self.key and start == 0 and not self.rewritten:
            self.rewritten = True
            self.store.put_file(str(self.new), key)
        return answer


def _write(folder: Path, seed: int) -> None:
    columns = {"id": "int", "pad": "bytes"}
    with MDSWriter(out=str(folder), columns=columns, size_limit=320_000) as writer:
        for i in range(24):
            pad = np.random.default_rng(seed + i).integers(0, 256, 30_000 + i, dtype=np.uint8)
            writer.write({"id": i, "pad": pad.tobytes()})


@pytest.mark.parametrize("name", TIED[1:])
def test_a_shard_rewritten_between_its_header_and_samples_is_never_read_mixed(
    request, tmp_path, caplog, name
):
    store = _store(request, name)
    old, new, local = tmp_path / "old", tmp_path / "new", tmp_path / "cache"
    _write(old, seed=0)
    _write(new, seed=1000)  # the same sizes and offsets, other payloads
    shard = "shard.00000.mds"
    assert (old / shard).stat().st_size == (new / shard).stat().st_size > 256 << 10
    for file in sorted(os.listdir(old)):  # the index last, as a writer publishes it
        if file != "index.json":
            store.put_file(str(old / file), file)
    store.put_file(str(old / "index.json"), "index.json")
    entries = sync_index(store, str(local), DownloadOptions(retry=0))  # a start: the listing
    assert entries is not None
    rewriting = _RewritesAfterHeader(store, shard, new / shard)
    cache = ShardCache([CacheStream(str(local), cast(ObjectStore, rewriting), entries)])
    policy = ReadPolicy()
    ranges = SampleRanges(
        cache, whole_bytes=policy.range_whole_bytes, gap_bytes=policy.range_gap_bytes
    )
    assert ranges.readable(0)
    assert ranges.readable(1)

    def schema(shard: int) -> MDSSchema:
        return MDSSchema(cache.locate(shard)[1].columns, sort=False)

    wanted = {0: [1, 7], 1: [0, 5]}
    with ThreadPoolExecutor(1) as pool:  # a header's range before any sample's
        views = ranges.views(wanted, schema, pool)
    assert rewriting.rewritten
    expected = MDSShardView((old / shard).read_bytes(), schema(0), entries[0].samples, source="old")
    for index in wanted[0] if 0 in views else ():  # never the new version's samples
        assert bytes(views[0].get(index)["pad"]) == bytes(expected.get(index)["pad"])
    assert 0 not in views  # read whole instead, by the cache
    assert any(shard in r.getMessage() and "rewritten" in r.getMessage() for r in caplog.records)
    other = MDSShardView((old / entries[1].raw_data.basename).read_bytes(), schema(1),
                         entries[1].samples, source="old")  # fmt: skip
    for index in wanted[1]:
        assert bytes(views[1].get(index)["pad"]) == bytes(other.get(index)["pad"])


@pytest.mark.parametrize("name", TIED[1:])
def test_a_shard_rewritten_between_its_ranges_and_its_whole_download_fails_the_epoch(
    request, tmp_path, name
):
    store = _store(request, name)
    old, new, local = tmp_path / "old", tmp_path / "new", tmp_path / "cache"
    _write(old, seed=0)
    _write(new, seed=1000)  # the same sizes and offsets, other payloads
    for file in sorted(os.listdir(old)):  # the index last, as a writer publishes it
        if file != "index.json":
            store.put_file(str(old / file), file)
    store.put_file(str(old / "index.json"), "index.json")
    # No listing at all: the ranges are tied to the version their first answer names.
    entries = parse_index(store.get_bytes("index.json"), source=store.url("index.json"))
    cache = ShardCache([CacheStream(str(local), store, entries)])
    policy = ReadPolicy()
    ranges = SampleRanges(
        cache, whole_bytes=policy.range_whole_bytes, gap_bytes=policy.range_gap_bytes
    )

    def schema(shard: int) -> MDSSchema:
        return MDSSchema(cache.locate(shard)[1].columns, sort=False)

    with ThreadPoolExecutor(2) as pool:
        views = ranges.views({0: [1, 7], 1: [0, 5]}, schema, pool)
    assert set(views) == {0, 1}  # handed out, of the old version
    shard = entries[0].raw_data.basename
    store.put_file(str(new / shard), shard)  # rewritten before its whole download
    cache.ensure(0)
    cache.ensure(1)
    with pytest.raises(ObjectChangedError, match=rf"{shard}.*rewritten while this epoch read it"):
        ranges.confirm(0)  # the rest of the epoch would read the new version: refused
    ranges.confirm(0)  # said once; a new epoch reads the whole file alone
    ranges.confirm(1)  # unchanged: its whole file holds the bytes handed out
