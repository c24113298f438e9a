"""The base every backend extends: checks before requests, errors, pages and parallel listing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
)
from shardstream.storage import (
    AzureStore,
    DatabricksVolumeStore,
    GCSStore,
    HTTPStore,
    LocalStore,
    OCIStore,
    S3Store,
    store_base,
)
from shardstream.storage.base import ObjectInfo
from shardstream.storage.obstore_client import ObstoreClient
from shardstream.storage.store_base import BaseStore, Failure, Kind, WritableStore


class MemoryStore(WritableStore):
    """A store whose objects are a dict: real primitives, counted, with small pages."""

    _lists_from_key = True

    def __init__(self, objects: dict[str, bytes] | None = None, page: int = 3) -> None:
        self.objects = dict(objects or {})
        self.page = page
        self.calls: list[tuple[str, str | None, str | None]] = []
        self.calls_lock = threading.Lock()
        self.short_by = 0  # bytes a read leaves out, as a body cut short would
        self.refuse_ranges = False  # answer a ranged read as HTTP 416 does
        super().__init__()

    def url(self, key: str) -> str:
        return f"mem://root/{key}"

    def _count(self, *call: str | None) -> None:
        with self.calls_lock:
            self.calls.append((call[0] or "", call[1], call[2]))

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        self._count("read", key, None)
        data = self.objects[key]
        if self.refuse_ranges and end is not None and end > len(data):
            raise RangeError
        stop = len(data) if end is None else end
        return data[start : max(start, stop - self.short_by)]

    def _write(self, local_path: str, key: str) -> None:
        self.objects[key] = Path(local_path).read_bytes()

    def _remove(self, key: str) -> None:
        del self.objects[key]

    def _head(self, key: str) -> ObjectInfo:
        self._count("head", key, None)
        return ObjectInfo(size=len(self.objects[key]), etag=str(len(self.objects[key])))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        self._count("list", start_after, token)
        after = token if token is not None else start_after
        keys = sorted(
            k for k in self.objects if k.startswith(prefix) and (after is None or k > after)
        )
        page = keys[: self.page]
        infos = {key: ObjectInfo(size=len(self.objects[key])) for key in page}
        return infos, (page[-1] if len(keys) > self.page else None)

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, KeyError):
            return Failure(Kind.NOT_FOUND, f"KeyError: {exc}")
        if isinstance(exc, PermissionError):
            return Failure(Kind.CREDENTIALS, str(exc))
        if isinstance(exc, RangeError):
            return Failure(Kind.PAST_END, "416")
        if isinstance(exc, OSError):
            return Failure(Kind.OTHER, str(exc))
        return None

    def _secrets(self) -> list[str]:
        return ["hunter2-secret"]


class RangeError(Exception):
    """What the memory store raises for a range past the end (HTTP 416)."""


@pytest.mark.parametrize(
    "store_class",
    [
        S3Store,
        GCSStore,
        AzureStore,
        OCIStore,
        DatabricksVolumeStore,
        HTTPStore,
        LocalStore,
        ObstoreClient,
    ],
)
def test_every_backend_is_built_on_the_one_base(store_class: type):
    assert issubclass(store_class, BaseStore)
    # Only the primitives, the error hook and the message hooks are the backend's own.
    own = ("get_bytes", "get_range", "info", "list", "list_info", "_boundary", "_scrub", "_lazy")
    for name in own:
        assert name not in vars(store_class), name


def test_keys_and_ranges_are_checked_before_any_primitive():
    store = MemoryStore({"a": b"0123456789"})
    for call in (
        lambda: store.get_bytes("../a"),
        lambda: store.info("/a"),
        lambda: store.get_range("a", 5, 4),
        lambda: store.get_range("a", -1, 4),
        lambda: store.delete("a/../../b"),
    ):
        with pytest.raises(ConfigurationError):
            call()
    assert store.get_range("a", 4, 4) == b""
    assert store.calls == []


def test_a_short_body_is_an_error_naming_the_url_never_a_short_read():
    store = MemoryStore({"a": b"0123456789"})
    store.short_by = 2
    with pytest.raises(StorageError, match=r"mem://root/a: byte range \[2, 9\) runs past the end"):
        store.get_range("a", 2, 9)


def test_a_refused_range_asks_for_the_size_and_names_it():
    store = MemoryStore({"a": b"0123456789"})
    store.refuse_ranges = True
    with pytest.raises(StorageError, match=r"runs past the end of the object \(10 bytes\)") as info:
        store.get_range("a", 5, 20)
    assert not isinstance(info.value, ObjectNotFoundError)
    assert ("head", "a", None) in store.calls


def test_errors_name_the_url_and_chain_the_sdk_exception_unless_it_holds_a_secret():
    store = MemoryStore()
    with pytest.raises(ObjectNotFoundError, match="reading mem://root/nope failed") as missing:
        store.get_bytes("nope")
    assert isinstance(missing.value.__cause__, KeyError)
    refusal = pytest.raises(CredentialsError, match="Check the store's credentials")
    with refusal as refused, store._boundary("checking", "k"):
        raise PermissionError("no")
    assert isinstance(refused.value.__cause__, PermissionError)
    with pytest.raises(StorageError) as secret, store._boundary("reading", "k"):
        raise OSError("the server echoed hunter2-secret")
    assert "hunter2-secret" not in str(secret.value)
    assert secret.value.__cause__ is None
    with pytest.raises(ZeroDivisionError), store._boundary("reading", "k"):
        raise ZeroDivisionError  # a bug is no store error: raised as it is


def test_every_http_backend_chains_the_cause_of_a_network_failure():
    # The copies before the base disagreed: Databricks dropped the cause, S3 kept it.
    store = DatabricksVolumeStore(
        "dbfs:/Volumes/c/s/v/ds",
        host="http://127.0.0.1:9",
        token="t0k3n-never-shown",  # noqa: S106
    )
    with pytest.raises(StorageError, match=r"dbfs:/Volumes/c/s/v/ds/f failed at") as info:
        store.get_bytes("f")
    assert isinstance(info.value.__cause__, OSError)
    assert "t0k3n-never-shown" not in str(info.value)


def test_a_listing_follows_every_page_and_a_store_that_never_ends_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
):
    keys = {f"k{i:02}": b"x" * i for i in range(10)}
    store = MemoryStore(keys, page=3)
    assert list(store.list_info()) == sorted(keys)
    assert [call[0] for call in store.calls] == ["list"] * 4
    assert store.list("k0") == [f"k0{i}" for i in range(10)]

    class Endless(MemoryStore):
        def _list_page(
            self, prefix: str, start_after: str | None, token: str | None
        ) -> tuple[dict[str, ObjectInfo], str | None]:
            return {}, "again"

    monkeypatch.setattr(store_base, "MAX_PAGES", 5)
    with pytest.raises(StorageError, match="more than 5 pages"):
        Endless().list()


KEYS = st.lists(
    st.text(alphabet="ab/.0é", min_size=1, max_size=6).filter(
        lambda key: all(part not in ("", ".", "..") for part in key.split("/"))
    ),
    max_size=40,
    unique=True,
)


@settings(max_examples=150, deadline=None)
@given(keys=KEYS, splits=st.lists(st.text(alphabet="ab/.0é", max_size=6), max_size=8))
def test_a_split_listing_is_exactly_the_serial_one(keys: list[str], splits: list[str]):
    store_base_ranges = store_base.KEYS_PER_RANGE
    store_base.KEYS_PER_RANGE = 1  # split at every key given
    try:
        store = MemoryStore({key: key.encode() for key in keys}, page=2)
        serial = store.list_info()
        for prefix in ("", "a", "b/"):
            split = store.list_info(prefix, split_at=splits + keys[::3])
            expected = {k: v for k, v in serial.items() if k.startswith(prefix)}
            assert split == expected
            assert list(split) == sorted(expected)  # the same order too
    finally:
        store_base.KEYS_PER_RANGE = store_base_ranges


def test_a_split_listing_lists_its_ranges_from_their_first_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 4)
    keys = [f"shard.{i:05}.mds" for i in range(40)]
    store = MemoryStore(dict.fromkeys([*keys, "index.json"], b""), page=5)
    listing = store.list_info(split_at=keys)
    assert list(listing) == sorted([*keys, "index.json"])
    firsts = sorted((call[1] for call in store.calls if call[2] is None), key=lambda a: a or "")
    # Eleven ranges (40 keys, 4 a range, one more for the keys past the last): the first from
    # the start, the others after evenly spaced split keys.
    assert firsts == [None, *(keys[40 * i // 11] for i in range(1, 11))]
    # Each range stops at the page that crosses its end: one page each here.
    assert len(store.calls) == 11


def test_too_few_split_keys_or_a_store_without_start_after_list_serially():
    keys = {f"k{i:04}": b"" for i in range(50)}
    store = MemoryStore(keys, page=10)
    store.list_info(split_at=list(keys))  # 50 keys: less than two ranges' worth
    assert [call[1] for call in store.calls] == [None] * 5


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keys=KEYS, splits=st.lists(st.text(alphabet="ab/.0é", max_size=6), max_size=6))
def test_a_split_listing_of_a_local_folder_is_exactly_the_serial_one(
    tmp_path_factory: pytest.TempPathFactory, keys: list[str], splits: list[str]
):
    class SplitLocal(LocalStore):
        _lists_from_key = True  # force the split path on real files

    root = tmp_path_factory.mktemp("split")
    store = SplitLocal(str(root))
    written = []
    for key in keys:
        path = root / key
        if any(p.is_file() for p in path.parents) or path.is_dir():
            continue  # a key that is another key's folder cannot be a file too
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(key.encode())
        written.append(key)
    saved = store_base.KEYS_PER_RANGE
    store_base.KEYS_PER_RANGE = 1
    try:
        assert store.list_info(split_at=splits + written) == LocalStore(str(root)).list_info()
        assert store.list() == sorted(written)
    finally:
        store_base.KEYS_PER_RANGE = saved


def test_only_plain_keys_split_a_listing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 1)
    keys = {f"k{i}": b"" for i in range(9)}
    store = MemoryStore(keys, page=100)
    assert list(store.list_info(split_at=["/", "k1/", "a//b", "./k", "k2/../k3", "k4"])) == sorted(
        keys
    )
    assert sorted(call[1] or "" for call in store.calls) == ["", "k4"]


_TIMED = [
    (lambda t: S3Store("s3://b/p", read_timeout=t), "S3Store('s3://b/p'): connect_timeout=10.0"),
    (lambda t: GCSStore("gs://bkt/p", connect_timeout=t), "GCSStore('gs://bkt/p'): connect_"),
    (
        lambda t: AzureStore("az://data/p", account_name="acct", read_timeout=t),
        "AzureStore('az://data/p'): connect_timeout",
    ),
    (lambda t: OCIStore("oci://bkt@ns/p", read_timeout=t), "OCIStore('oci://bkt@ns/p'): connect"),
    (
        lambda t: DatabricksVolumeStore("dbfs:/Volumes/c/s/v", read_timeout=t),
        "DatabricksVolumeStore('dbfs:/Volumes/c/s/v'): read_timeout",
    ),
    (lambda t: HTTPStore("http://h/x", timeout=t), "HTTPStore('http://h/x'): timeout"),
    (lambda t: ObstoreClient.gcs("gs://bkt/p", read_timeout=t), "obstore client of"),
]


@pytest.mark.parametrize(("make", "named"), _TIMED)
@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_every_backend_refuses_a_timeout_that_is_not_positive_in_the_same_words(
    make: Callable[[float], object], named: str, bad: float
):
    with pytest.raises(ConfigurationError, match="timeouts must be positive numbers of s") as info:
        make(bad)
    assert named in str(info.value)


class ThroughStore(MemoryStore):
    """A store whose reads go to another store (as S3Store's go to obstore's), writes not."""

    def __init__(self, fast: BaseStore | None, refuse: bool = False) -> None:
        super().__init__()
        self.fast = fast
        self.refuse = refuse  # the fast reader cannot be settled (an SDK error)

    def _key(self, key: str) -> str:
        if "?" in key:  # a backend's own key rule (Azure's), checked before any reader
            raise ConfigurationError(f"{key!r}: no '?'")
        return super()._key(key)

    def _fast_reader(self) -> BaseStore | None:
        if self.refuse:
            raise OSError("the fast client could not be made")
        return self.fast


def test_reads_go_through_a_fast_reader_after_the_key_is_checked():
    fast = MemoryStore({"a": b"0123456789"})
    store = ThroughStore(fast)
    assert store.get_bytes("a") == b"0123456789"
    assert store.get_range("a", 2, 5) == b"234"
    assert store.info("a").size == 10
    assert store.exists("a")
    assert store.calls == []  # none of its own primitives read
    assert [call[0] for call in fast.calls] == ["read", "read", "head", "head"]
    with pytest.raises(ObjectNotFoundError, match="mem://root/b"):  # the reader's error, as is
        store.get_range("b", 0, 1)
    with pytest.raises(ConfigurationError, match="no '\\?'"):
        store.get_bytes("a?x")
    with pytest.raises(ConfigurationError):  # the range checked by the reader, before a request
        store.get_range("a", 5, 4)
    assert len(fast.calls) == 5
    assert ThroughStore(None, refuse=False).exists("a") is False  # no reader: its primitives


def test_a_fast_reader_that_cannot_be_made_fails_the_read_as_a_store_error():
    store = ThroughStore(None, refuse=True)
    with pytest.raises(StorageError, match="reading mem://root/a failed") as info:
        store.get_bytes("a")
    assert isinstance(info.value.__cause__, OSError)
