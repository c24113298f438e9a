"""S3 listings: every key, size and tag, page after page, through either client of reads.

Listings go through obstore where reads do (the default), else through botocore, whose page's
own XML is read (:mod:`shardstream.storage.s3_listing`). The tests that take ``lister`` run
under both; the page size of either is set with :func:`_page_keys` (botocore's ``MaxKeys``;
obstore's pages of its stream, as ``object_store`` asks the server for pages of 1,000 keys).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.writer_samples import COLUMNS, sample

from shardstream import MDSWriter
from shardstream.cache import index_sync, sync_index
from shardstream.cache.provenance import read_record
from shardstream.errors import DownloadTimeoutError, ObjectNotFoundError, StorageError
from shardstream.storage import (
    DownloadOptions,
    S3Store,
    fetch_listing,
    obstore_client,
    s3_listing,
    store_base,
)
from shardstream.storage import download as download_module
from shardstream.storage.key_ranges import range_index, upper_bounds

from .conftest import S3Server
from .faults import FaultProxy

pytestmark = pytest.mark.s3


@pytest.fixture(params=["obstore", "botocore", "plain"])
def lister(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The client of the test's listings (``SHARDSTREAM_S3_CLIENT``)."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", request.param)
    return str(request.param)


def _page_keys(patch: pytest.MonkeyPatch, keys: int) -> None:
    """Pages of ``keys`` keys, whichever client lists (S3's page size, one for every client)."""
    patch.setattr(obstore_client, "PAGE_KEYS", keys)


KEYS = ["a b.bin", "c+d.bin", "e%41.bin", "f&g<h>.bin", "ünï.bin", "n/deep/x.bin", "z.bin"]


def test_list_info_reads_every_key_size_and_tag_across_pages(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lister: str
) -> None:
    store = S3Store(
        s3_env.url(f"listing-{lister}"),
        endpoint_url=s3_env.endpoint,
        key=s3_env.key,
        secret=s3_env.secret,
    )
    source = tmp_path / "f.bin"
    for number, key in enumerate(KEYS):
        source.write_bytes(bytes([number]) * (number + 1))
        store.put_file(str(source), key)
    _page_keys(monkeypatch, 2)  # four pages, three tokens
    listed = store.list_info()
    assert sorted(listed) == sorted(KEYS)
    for number, key in enumerate(KEYS):
        info = store.info(key)
        assert listed[key].size == number + 1 == info.size
        assert listed[key].etag == info.etag
        assert info.etag
        assert '"' not in info.etag
    assert sorted(store.list_info("n/")) == ["n/deep/x.bin"]
    assert store.list_info("nothing-here/") == {}


def _proxied_store(s3_env: S3Server, proxy: FaultProxy, url: str) -> S3Store:
    return S3Store(
        url,
        endpoint_url=proxy.endpoint,
        key=s3_env.key,
        secret=s3_env.secret,
        read_timeout=30,  # a trickled page keeps every socket read within this
    )


def _seed(s3_env: S3Server, prefix: str, tmp_path: Path) -> str:
    """Write :data:`KEYS` under a fresh prefix; its URL."""
    url = s3_env.url(prefix)
    direct = S3Store(url, endpoint_url=s3_env.endpoint, key=s3_env.key, secret=s3_env.secret)
    source = tmp_path / "f.bin"
    for number, key in enumerate(KEYS):
        source.write_bytes(bytes([number]) * (number + 1))
        direct.put_file(str(source), key)
    return url


PAGED = 2 * obstore_client.PAGE_KEYS + 3  # three pages of the server's, whichever client


@pytest.fixture(scope="module")
def paged_url(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A prefix of :data:`PAGED` keys: three pages of the server's own size (1,000 keys)."""
    url = s3_server.url("paged")
    store = S3Store(
        url, endpoint_url=s3_server.endpoint, key=s3_server.key, secret=s3_server.secret
    )
    source = tmp_path_factory.mktemp("paged") / "f.bin"
    source.write_bytes(b"x")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put_file(str(source), f"k.{k:05}.bin"), range(PAGED)))
    return url


@pytest.mark.parametrize("pages", ["list-type=2", "continuation-token"])
def test_a_listing_is_bounded_as_a_whole_even_when_trickled(
    s3_env: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    paged_url: str,
    pages: str,
    lister: str,
):
    """Every page of a listing, sent a byte at a time, falls under timeout and retry."""
    monkeypatch.setattr(download_module, "backoff_delays", lambda retries, rng: [0.0] * retries)
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        store = _proxied_store(s3_env, proxy, paged_url)
        assert len(store.list_info()) == PAGED  # warm: imports and the client
        # obstore asks once more from the last key, to tell an end from a lost page.
        assert proxy.count("GET", "list-type=2") == 3 + (lister == "obstore")
        assert proxy.count("GET", "continuation-token") == 2
        # Every page (or every page after the first) trickles: each read comes well within
        # the socket timeout, a page takes minutes.
        proxy.inject("trickle", count=100, method="GET", path_contains=pages)
        options = DownloadOptions(retry=1, timeout=1.5)
        started = time.monotonic()
        with pytest.raises(DownloadTimeoutError) as info:
            fetch_listing(store, "", options)
        elapsed = time.monotonic() - started
    # Two attempts of the whole listing, 1.5 s each, never the pages' minutes: a loose bound,
    # where the deadline is the point.
    assert elapsed < 30.0
    assert store.url("") in str(info.value)
    assert "after 2 attempts" in str(info.value)


@pytest.mark.parametrize("fault", ["html200", "short200"])
def test_a_wrong_200_listing_page_is_a_transfer_error_not_an_empty_listing(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, paged_url: str, fault: Any, lister: str
):
    monkeypatch.setattr(download_module, "backoff_delays", lambda retries, rng: [0.0] * retries)
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        store = _proxied_store(s3_env, proxy, paged_url)
        # The second page is wrong once: retried, and the listing is whole.
        proxy.inject(fault, count=1, method="GET", path_contains="continuation-token")
        assert len(fetch_listing(store, "", DownloadOptions(retry=1))) == PAGED
        assert proxy.count("GET", "continuation-token") == 3  # the wrong one, asked again
        if lister == "obstore":
            # A wrong first page reads as an empty listing through obstore: the listing's end is
            # asked once more, whose answer shows the loss, and the listing is retried.
            proxy.inject(fault, count=1, method="GET", path_contains="list-type=2")
            assert len(fetch_listing(store, "", DownloadOptions(retry=1))) == PAGED
            return
        # The first page is wrong every time: a transfer error, never an empty listing
        # (which would read as "no such object" or "every object deleted").
        proxy.inject(fault, count=2, method="GET", path_contains="list-type=2")
        with pytest.raises(StorageError) as info:
            fetch_listing(store, "", DownloadOptions(retry=1))
    message = str(info.value)
    assert not isinstance(info.value, ObjectNotFoundError), message
    assert store.url("") in message
    assert "after 2 attempts" in message
    assert "transfer error" in message


SPLIT_KEYS = [f"shard.{k:05}.mds" for k in range(120)] + [*KEYS, "index.json", "zz/last.bin"]


@pytest.fixture(scope="module")
def split_url(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A prefix holding :data:`SPLIT_KEYS`, written once for the split listing tests."""
    url = s3_server.url("split")
    store = S3Store(
        url, endpoint_url=s3_server.endpoint, key=s3_server.key, secret=s3_server.secret
    )
    folder = tmp_path_factory.mktemp("split")

    def put(number_key: tuple[int, str]) -> None:
        number, key = number_key
        source = folder / f"{number}.bin"
        source.write_bytes(key.encode() * (number % 3 + 1))
        store.put_file(str(source), key)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, enumerate(SPLIT_KEYS)))
    return url


def _no_folder(key: str) -> bool:
    """Whether ``key`` sorts neither at a folder of the stored keys nor between it and its keys.

    SeaweedFS's filer, asked for the keys after a folder's own name (``zz`` of ``zz/last.bin``)
    or after a name between it and its keys (``zz.``, as ``.`` sorts before ``/``), skips the
    folder's keys too: it compares whole names, where S3 and GCS list after the key in byte
    order, the folder's keys first. A start splits at the names of objects, which on a filer
    are files, never folders.
    """
    folders = {
        stored[:at] for stored in SPLIT_KEYS for at, char in enumerate(stored) if char == "/"
    }
    return not any(key.startswith(folder) and key[len(folder) : len(folder) + 1] < "/"
                   for folder in folders)  # fmt: skip


SPLIT_POINTS = st.one_of(
    st.sampled_from(SPLIT_KEYS), st.text(alphabet="sha.0123z/ü", max_size=12).filter(_no_folder)
)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
# SeaweedFS's filer answered a start key of "/" with names that are no keys: such keys (empty,
# "." or ".." parts) are never split at.
@example(splits=["/"])
@example(splits=["shard.00010.mds/", "a//b", "./x", "shard.00050.mds"])
@example(splits=["zz0", "shard.00010.mds"])
@given(splits=st.lists(SPLIT_POINTS, max_size=20))
def test_a_split_listing_of_seaweedfs_is_exactly_the_serial_one(
    s3_server: S3Server, split_url: str, splits: list[str], lister: str
) -> None:
    store = S3Store(
        split_url, endpoint_url=s3_server.endpoint, key=s3_server.key, secret=s3_server.secret
    )
    with pytest.MonkeyPatch.context() as patch:
        _page_keys(patch, 7)  # ranges of several pages
        patch.setattr(store_base, "KEYS_PER_RANGE", 1)  # split at every key given
        serial = store.list_info()
        assert list(serial) == sorted(SPLIT_KEYS)
        split = store.list_info(split_at=splits)
        assert split == serial
        assert list(split) == list(serial)
        assert store.list_info("shard.0001", split_at=splits) == {
            key: info for key, info in serial.items() if key.startswith("shard.0001")
        }


def test_seaweedfs_pages_are_scanned_and_read_as_a_parser_reads_them(
    s3_server: S3Server, split_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan is taken on a real server's pages, and each page it reads, it reads exactly."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "botocore")  # obstore reads its pages in Rust
    pages: list[tuple[bytes, bool, Any]] = []
    scan = s3_listing._scanned_objects

    def spied(page: bytes, encoded: bool) -> Any:
        objects = scan(page, encoded)
        pages.append((page, encoded, objects))
        return objects

    monkeypatch.setattr(s3_listing, "_scanned_objects", spied)
    monkeypatch.setattr(obstore_client, "PAGE_KEYS", 10)
    store = S3Store(
        split_url, endpoint_url=s3_server.endpoint, key=s3_server.key, secret=s3_server.secret
    )
    assert list(store.list_info()) == sorted(SPLIT_KEYS)
    scanned = [page for page in pages if page[2] is not None]
    assert len(scanned) >= 10  # the plain pages of shard names (the odd keys' go to the tree)
    for page, encoded, objects in scanned:
        assert objects == s3_listing._tree_objects(page, encoded, split_url)


def test_a_split_listing_asks_each_range_from_its_first_key(
    s3_server: S3Server, split_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server pages counted: botocore's, whose page size is set (obstore's are 1,000 keys)."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "botocore")
    monkeypatch.setattr(obstore_client, "PAGE_KEYS", 10)
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 30)
    with FaultProxy(int(s3_server.endpoint.rsplit(":", 1)[1])) as proxy:
        store = S3Store(
            split_url, endpoint_url=proxy.endpoint, key=s3_server.key, secret=s3_server.secret
        )
        serial = store.list_info()
        serial_pages = proxy.count("GET", "list-type=2")
        assert serial_pages == len(SPLIT_KEYS) // 10 + 1
        proxy.reset_counts()
        names = [key for key in SPLIT_KEYS if key.startswith("shard.")]
        assert store.list_info(split_at=names) == serial
        # 120 names, 30 a range: five ranges, four of them asked from a split key on.
        assert proxy.count("GET", "start-after=") == 4
        # Each range ends at the page that crosses its end: at most one page more each.
        assert proxy.count("GET", "list-type=2") <= serial_pages + 5


def test_a_first_start_reads_the_index_once_then_lists_split_at_its_names(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _page_keys(monkeypatch, 5)
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 5)
    url = s3_env.url("first-start")
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300) as writer:
        for i in range(40):
            writer.write(sample(i))
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        store = S3Store(url, endpoint_url=proxy.endpoint, key=s3_env.key, secret=s3_env.secret)
        entries = sync_index(store, str(tmp_path / "cache"), DownloadOptions())
        assert entries is not None
        assert len(entries) > 10
        assert proxy.count("GET", "index.json") == 1  # the index, once, before the listing
        assert proxy.count("HEAD") == 0
        assert proxy.count("GET", "start-after=") >= 2  # split at the index's names
        # The GET's ETag is the listing's: the record holds the index read.
        record = read_record(str(tmp_path / "cache" / ".shardstream"))
        assert record is not None
        info = store.info("index.json")
        assert record.objects["index.json"] == f"{info.size}:{info.etag}"
        proxy.reset_counts()
        assert sync_index(store, str(tmp_path / "cache"), DownloadOptions()) is None
        assert proxy.count("GET", "index.json") == 0  # a warm start fetches nothing


def test_a_first_start_through_obstore_builds_no_botocore_client(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With obstore reads, the index's GET and the listing go through obstore as well."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "obstore")
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 5)
    url = s3_env.url("first-start-obstore")
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300) as writer:
        for i in range(40):
            writer.write(sample(i))
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    with FaultProxy(port) as proxy:
        store = S3Store(url, endpoint_url=proxy.endpoint, key=s3_env.key, secret=s3_env.secret)
        entries = sync_index(store, str(tmp_path / "cache"), DownloadOptions())
        assert entries is not None
        assert len(entries) > 10
        assert proxy.count("GET", "index.json") == 1  # its identity matched the listing's
        assert proxy.count("GET", "start-after=") >= 2  # split at the index's names
        assert store._client is None  # no botocore client was built
        record = read_record(str(tmp_path / "cache" / ".shardstream"))
        assert record is not None
        assert record.objects == {
            key: f"{info.size}:{info.etag}" for key, info in store.list_info().items()
        }


def test_a_first_start_lists_while_the_index_is_parsed(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing's first page is asked for before the index's parse ends, not after."""
    _page_keys(monkeypatch, 5)
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 5)
    url = s3_env.url("parse-while-listing")
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300) as writer:
        for i in range(40):
            writer.write(sample(i))
    store = S3Store(url, endpoint_url=s3_env.endpoint, key=s3_env.key, secret=s3_env.secret)
    listed = threading.Event()
    page = store._list_page

    def counted(*args: Any) -> Any:
        listed.set()
        return page(*args)

    monkeypatch.setattr(store, "_list_page", counted)
    held: list[bool] = []
    parse = index_sync.parse_index  # type: ignore[attr-defined]

    def parse_when_listed(data: bytes | str, *, source: str) -> Any:
        if source == store.url("index.json") and not held:
            # A bound, not a timing: a start that lists only after the parse never gets here.
            held.append(listed.wait(timeout=20))
        return parse(data, source=source)

    monkeypatch.setattr(index_sync, "parse_index", parse_when_listed)
    entries = sync_index(store, str(tmp_path / "cache"), DownloadOptions())
    assert entries is not None
    assert len(entries) > 10
    assert held == [True]  # the index's parse saw the listing under way
    record = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert record is not None
    assert set(record.objects) == set(store.list_info())  # split at scanned names: every key


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@example(splits=[], per_range=1, page=3)
@example(splits=["index.json", "zz/last.bin", "zzz"], per_range=1, page=1)  # past the last key
@example(splits=["a", "a b.bin", "a c"], per_range=1, page=2)  # an empty range between keys
@given(
    splits=st.lists(SPLIT_POINTS, max_size=12),
    per_range=st.integers(1, 4),
    page=st.integers(1, 9),
)
def test_the_key_ranges_of_seaweedfs_hold_every_key_once(
    s3_server: S3Server, split_url: str, splits: list[str], per_range: int, page: int, lister: str
) -> None:
    """Each range listed alone: together the serial listing, no key in two, each where it lies."""
    store = S3Store(
        split_url, endpoint_url=s3_server.endpoint, key=s3_server.key, secret=s3_server.secret
    )
    with pytest.MonkeyPatch.context() as patch:
        _page_keys(patch, page)
        patch.setattr(store_base, "KEYS_PER_RANGE", per_range)
        ranges = store.key_ranges("", splits)
        parts = [store.list_range("", key_range) for key_range in ranges]
        _page_keys(patch, 1000)
        serial = store.list_info()
    seen: list[str] = []
    for number, (key_range, part) in enumerate(zip(ranges, parts, strict=True)):
        assert all(key_range.holds(key) for key in part)
        assert all(range_index(upper_bounds(ranges), key) == number for key in part)
        seen.extend(part)
    assert seen == list(serial)  # every key once, in key order
    assert {key: info for part in parts for key, info in part.items()} == serial
