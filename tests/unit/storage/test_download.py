"""download_file and fetch_bytes against in-memory stores that fail, stall and race on purpose."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    DownloadTimeoutError,
    ObjectNotFoundError,
    ShardFormatError,
    StorageError,
)
from shardstream.storage import (
    DownloadOptions,
    LocalStore,
    ObjectInfo,
    download_file,
    fetch_bytes,
    fetch_info,
    fetch_listing,
    timed_request,
)
from shardstream.storage import download as download_module
from shardstream.storage._memory_budget import ByteBudget
from shardstream.storage.local import is_temporary
from shardstream.storage.retry import is_transient

Hook = Callable[[str, int], bytes | None]


class MemoryStore:
    """Objects in a dict; ``hook(method, call_number)`` may raise, sleep or answer first."""

    def __init__(self, objects: dict[str, bytes], hook: Hook | None = None) -> None:
        self.objects = objects
        self.hook = hook
        self.calls: dict[str, int] = {"info": 0, "get_bytes": 0, "get_range": 0}
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def url(self, key: str) -> str:
        return f"mem://bucket/{key}"

    def put_file(self, local_path: str, key: str) -> None:
        with open(local_path, "rb") as handle:
            self.objects[key] = handle.read()

    def _enter(self, method: str) -> bytes | None:
        with self._lock:
            self.calls[method] += 1
            number = self.calls[method]
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return self.hook(method, number) if self.hook else None
        finally:
            with self._lock:
                self.in_flight -= 1

    def _object(self, key: str) -> bytes:
        if key not in self.objects:
            raise ObjectNotFoundError(f"reading {self.url(key)} failed: no such object")
        return self.objects[key]

    def get_bytes(self, key: str) -> bytes:
        answer = self._enter("get_bytes")
        return answer if answer is not None else self._object(key)

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        answer = self._enter("get_range")
        return answer if answer is not None else self._object(key)[start:end]

    def info(self, key: str) -> ObjectInfo:
        self._enter("info")
        return ObjectInfo(len(self._object(key)), "etag")

    def exists(self, key: str) -> bool:
        return key in self.objects

    def list(self, prefix: str = "") -> list[str]:
        return sorted(key for key in self.objects if key.startswith(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        return {key: ObjectInfo(len(self.objects[key])) for key in self.list(prefix)}


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Retry at once; record how many delays each request asked for."""
    asked: list[int] = []

    def delays(retries: int, rng: object) -> list[float]:
        asked.append(retries)
        return [0.0] * retries

    monkeypatch.setattr(download_module, "backoff_delays", delays)
    return asked


def failing(times: int, error: Callable[[], BaseException], method: str = "get_bytes") -> Hook:
    def hook(called: str, number: int) -> bytes | None:
        if called == method and number <= times:
            raise error()
        return None

    return hook


def stalling(seconds: float, times: int, method: str = "get_bytes") -> Hook:
    def hook(called: str, number: int) -> bytes | None:
        if called == method and number <= times:
            time.sleep(seconds)
        return None

    return hook


def gathering(store_of: Callable[[], MemoryStore], most: int, method: str = "get_range") -> Hook:
    """The first ``most`` calls each wait (30 s at most) until ``most`` calls are in flight.

    Proves by count, not by sleeps that happen to overlap, that ``most`` requests ran at once.
    They then stay a moment longer, so that a request past the cap, had it been started, would
    be in flight beside them (a busy machine can only hide it, never fail a correct cap).
    """

    def hook(called: str, number: int) -> bytes | None:
        if called == method and number <= most:
            deadline = time.monotonic() + 30  # a bound, not a measure
            while store_of().most_in_flight < most and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.05)
        return None

    return hook


def held(release: threading.Event, method: str = "get_bytes") -> Hook:
    """Every ``method`` call waits for ``release`` (a minute at most): a server that froze."""

    def hook(called: str, number: int) -> bytes | None:
        if called == method:
            release.wait(60)
        return None

    return hook


DATA = bytes(range(256)) * 40  # 10,240 bytes


# --- options --------------------------------------------------------------------------------------


def test_default_options():
    assert DownloadOptions() == DownloadOptions(
        retry=2, timeout=60.0, part_size=16 << 20, concurrency=8
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"retry": -1}, "retry"),
        ({"retry": 1.5}, "retry"),
        ({"retry": True}, "retry"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -2.0}, "timeout"),
        ({"part_size": 0}, "part_size"),
        ({"concurrency": 0}, "concurrency"),
    ],
)
def test_bad_options_are_refused_naming_the_field(kwargs: dict[str, object], field: str):
    with pytest.raises(ConfigurationError, match=rf"{field}="):
        DownloadOptions(**kwargs)  # type: ignore[arg-type]


def test_retry_zero_is_allowed():
    assert DownloadOptions(retry=0).retry == 0


# --- retries --------------------------------------------------------------------------------------


@pytest.mark.parametrize("retry", [0, 1, 2, 5])
def test_transient_failures_are_retried_exactly_retry_times(tmp_path: Path, retry: int):
    store = MemoryStore({"k": DATA}, failing(retry, lambda: StorageError("HTTP 503")))
    dest = tmp_path / "k"
    assert download_file(store, "k", str(dest), DownloadOptions(retry=retry)) == len(DATA)
    assert dest.read_bytes() == DATA
    assert store.calls["get_bytes"] == retry + 1

    store = MemoryStore({"k": DATA}, failing(retry + 1, lambda: StorageError("HTTP 503")))
    with pytest.raises(StorageError, match=r"mem://bucket/k.*after \d+ attempt") as info:
        download_file(store, "k", str(tmp_path / "other"), DownloadOptions(retry=retry))
    assert store.calls["get_bytes"] == retry + 1
    assert f"after {retry + 1} attempt" in str(info.value)
    assert "HTTP 503" in str(info.value)  # the last cause
    assert isinstance(info.value.__cause__, StorageError)
    assert os.listdir(tmp_path) == ["k"]


@pytest.mark.parametrize(
    "error",
    [
        lambda: ObjectNotFoundError("mem://bucket/k: no such object"),
        lambda: CredentialsError("mem://bucket/k: refused"),
        lambda: ConfigurationError("mem://bucket/k: bad key"),
        lambda: RuntimeError("a bug, not the network"),
    ],
)
@pytest.mark.parametrize("method", ["info", "get_bytes"])
def test_errors_that_do_not_change_are_raised_after_one_attempt(
    tmp_path: Path, error: Callable[[], BaseException], method: str
):
    store = MemoryStore({"k": DATA}, failing(10, error, method))
    expected = type(error())
    with pytest.raises(expected) as info:
        download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=5))
    assert type(info.value) is expected  # as raised, not wrapped
    assert store.calls[method] == 1
    assert os.listdir(tmp_path) == []


def test_plain_oserrors_are_transient(tmp_path: Path):
    store = MemoryStore({"k": DATA}, failing(2, lambda: ConnectionResetError("reset")))
    download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=2))
    assert store.calls["get_bytes"] == 3


def test_is_transient():
    assert is_transient(StorageError("503"))
    assert is_transient(TimeoutError())
    assert is_transient(ConnectionError())
    assert not is_transient(ObjectNotFoundError("404"))
    assert not is_transient(CredentialsError("403"))
    assert not is_transient(ConfigurationError("bad"))
    assert not is_transient(ValueError("bug"))


def test_each_range_has_its_own_retries(tmp_path: Path, no_backoff: list[int]):
    # Ranges 1 to 3 fail once each: with retry=1 every range still succeeds.
    store = MemoryStore({"k": DATA}, failing(3, lambda: StorageError("503"), "get_range"))
    options = DownloadOptions(retry=1, part_size=1024, concurrency=1)
    download_file(store, "k", str(tmp_path / "k"), options)
    assert (tmp_path / "k").read_bytes() == DATA
    assert store.calls["get_range"] == 10 + 3
    # A backoff plan is drawn for each request that failed, on its first failure, and for no
    # other (the HEAD and the seven ranges that succeeded at once draw none).
    assert no_backoff == [1] * 3


def test_short_bodies_are_retried(tmp_path: Path):
    def short_once(called: str, number: int) -> bytes | None:
        return DATA[:100] if called == "get_bytes" and number == 1 else None

    store = MemoryStore({"k": DATA}, short_once)
    download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=1))
    assert (tmp_path / "k").read_bytes() == DATA
    assert store.calls["get_bytes"] == 2


def test_retries_wait_the_backoff_delays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(download_module, "backoff_delays", lambda n, rng: [0.3] * n)
    store = MemoryStore({"k": DATA}, failing(1, lambda: StorageError("503")))
    started = time.monotonic()
    download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=1))
    assert time.monotonic() - started >= 0.3


def test_retries_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    store = MemoryStore({"k": DATA}, failing(2, lambda: StorageError("HTTP 503 from the store")))
    with caplog.at_level("WARNING", logger="shardstream.storage.download"):
        download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=3))
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "retry 1 of 3" in messages[0]
    assert "retry 2 of 3" in messages[1]
    assert all("mem://bucket/k" in m and "HTTP 503" in m for m in messages)


# --- timeouts -------------------------------------------------------------------------------------


def test_a_backend_without_timeouts_of_its_own_still_times_out(tmp_path: Path):
    release = threading.Event()
    store = MemoryStore({"k": DATA}, held(release))
    options = DownloadOptions(retry=2, timeout=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(DownloadTimeoutError, match=r"mem://bucket/k.*after 3 att") as info:
            download_file(store, "k", str(tmp_path / "k"), options)
        # All three attempts still hang at the store: each was abandoned at its deadline.
        assert store.in_flight == 3
    finally:
        release.set()
    # A lower bound only (load lengthens it): each attempt waited out its timeout.
    assert time.monotonic() - started >= 3 * 0.2
    assert isinstance(info.value, TimeoutError)
    assert store.calls["get_bytes"] == 3
    assert os.listdir(tmp_path) == []


def test_fetch_bytes_times_out_too():
    store = MemoryStore({"k": DATA}, stalling(3.0, times=10))
    with pytest.raises(DownloadTimeoutError):
        fetch_bytes(store, "k", DownloadOptions(retry=0, timeout=0.1))
    assert store.calls["get_bytes"] == 1


def test_fetch_info_times_out_and_retries_like_a_download():
    release = threading.Event()
    store = MemoryStore({"k": DATA}, held(release, method="info"))
    started = time.monotonic()
    try:
        with pytest.raises(DownloadTimeoutError, match=r"checking mem://bucket/k.*after 2 att"):
            fetch_info(store, "k", DownloadOptions(retry=1, timeout=0.2))
        assert store.in_flight == 2  # both attempts abandoned, neither waited for
    finally:
        release.set()
    assert time.monotonic() - started >= 2 * 0.2  # a lower bound: each waited its timeout
    assert store.calls["info"] == 2


def test_fetch_info_answers_and_raises_a_missing_object_at_once():
    store = MemoryStore({"k": DATA})
    assert fetch_info(store, "k", DownloadOptions(retry=3)) == ObjectInfo(len(DATA), "etag")
    with pytest.raises(ObjectNotFoundError):
        fetch_info(store, "missing", DownloadOptions(retry=3))
    assert store.calls["info"] == 2


def test_timed_request_bounds_any_call():
    calls = threading.Event()

    def silent() -> int:
        calls.set()
        time.sleep(3.0)
        return 1

    with pytest.raises(DownloadTimeoutError, match="listing mem://bucket/ failed after 1 attempt"):
        timed_request(silent, DownloadOptions(retry=0, timeout=0.1), "listing mem://bucket/")
    assert calls.is_set()
    assert timed_request(lambda: 7, DownloadOptions(), "asking") == 7


class PagedStore(MemoryStore):
    """A store whose listing comes in pages, each taking ``page_seconds``."""

    def __init__(self, objects: dict[str, bytes], pages: int, page_seconds: float) -> None:
        super().__init__(objects)
        self.pages = pages
        self.page_seconds = page_seconds
        self.listings = 0
        self.listed = 0  # listings that ran to their last page

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        self.listings += 1
        for _ in range(self.pages):
            time.sleep(self.page_seconds)  # each page well within any per-request timeout
        self.listed += 1
        return super().list_info(prefix)


def test_a_listing_is_bounded_as_a_whole_not_per_page():
    store = PagedStore({"a": b"x"}, pages=40, page_seconds=0.05)  # two seconds in all
    options = DownloadOptions(retry=1, timeout=0.3)
    with pytest.raises(DownloadTimeoutError, match=r"listing mem://bucket/ failed after 2 att"):
        fetch_listing(store, "", options)
    assert store.listings == 2
    # Neither listing had ended: each was abandoned at its deadline, not waited for.
    assert store.listed == 0
    # Within the timeout, it is a listing as before.
    quick = PagedStore({"a": b"x", "b": b"yy"}, pages=3, page_seconds=0.01)
    assert fetch_listing(quick, "", options) == {"a": ObjectInfo(1), "b": ObjectInfo(2)}


GATEWAY_PAGE = b"<!DOCTYPE html><html><body>Please sign in</body></html>"


def wrong_bodies(times: int) -> Hook:
    """The first ``times`` GETs answer with a gateway's page instead of the object."""

    def hook(called: str, number: int) -> bytes | None:
        if called == "get_bytes" and number <= times:
            return GATEWAY_PAGE
        return None

    return hook


def test_a_wrong_body_is_a_transfer_error_retried_then_reported(tmp_path: Path):
    store = MemoryStore({"k": DATA}, wrong_bodies(2))
    size = len(DATA)
    download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=2), expected_size=size)
    assert (tmp_path / "k").read_bytes() == DATA
    assert store.calls["get_bytes"] == 3
    store = MemoryStore({"k": DATA}, wrong_bodies(3))
    with pytest.raises(StorageError) as info:
        download_file(store, "k", str(tmp_path / "j"), DownloadOptions(retry=2), expected_size=size)
    message = str(info.value)
    assert type(info.value) is StorageError, message  # neither ShardFormatError nor not found
    assert "mem://bucket/k" in message
    assert "after 3 attempts" in message
    assert "transfer error" in message
    assert "dataset changed" not in message
    assert store.calls == {"info": 1, "get_bytes": 3, "get_range": 0}  # the HEAD: same size
    assert os.listdir(tmp_path) == ["k"]


def test_a_wrong_body_and_no_answer_to_the_head_is_still_a_transfer_error(tmp_path: Path):
    def hook(called: str, number: int) -> bytes | None:
        if called == "info":
            raise ConnectionResetError("reset")
        return GATEWAY_PAGE

    store = MemoryStore({"k": DATA}, hook)
    with pytest.raises(StorageError, match="reading mem://bucket/k failed after 1 attempt") as info:
        download_file(store, "k", str(tmp_path / "k"), DownloadOptions(retry=0), expected_size=5)
    assert type(info.value) is StorageError
    assert "came back as" in str(info.value)


def test_a_late_answer_of_an_abandoned_attempt_is_never_written(tmp_path: Path):
    finished = threading.Event()

    release = threading.Event()

    def first_range_late_and_wrong(called: str, number: int) -> bytes | None:
        if called == "get_range" and number == 1:
            release.wait(60)
            finished.set()
            return b"X" * 1024  # wrong bytes, after the deadline
        return None

    store = MemoryStore({"k": DATA}, first_range_late_and_wrong)
    options = DownloadOptions(retry=1, timeout=0.15, part_size=1024, concurrency=2)
    try:
        download_file(store, "k", str(tmp_path / "k"), options)
    finally:
        release.set()  # the abandoned attempt answers only after the download has ended
    assert finished.wait(30)
    deadline = time.monotonic() + 30  # a bound, not a measure
    while store.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.in_flight == 0
    assert (tmp_path / "k").read_bytes() == DATA
    assert os.listdir(tmp_path) == ["k"]


# --- parallel ranges and the file -----------------------------------------------------------------


def test_ranges_run_concurrency_at_a_time(tmp_path: Path):
    store = MemoryStore({"k": DATA})
    store.hook = gathering(lambda: store, 3)
    options = DownloadOptions(part_size=1000, concurrency=3)
    assert download_file(store, "k", str(tmp_path / "k"), options) == len(DATA)
    assert (tmp_path / "k").read_bytes() == DATA
    assert store.calls["get_range"] == 11
    assert store.most_in_flight == 3


def test_objects_up_to_part_size_download_in_one_request(tmp_path: Path):
    store = MemoryStore({"k": DATA})
    download_file(store, "k", str(tmp_path / "k"), DownloadOptions(part_size=len(DATA)))
    assert store.calls == {"info": 1, "get_bytes": 1, "get_range": 0}


def test_a_known_size_skips_the_size_request(tmp_path: Path):
    store = MemoryStore({"k": DATA})
    download_file(store, "k", str(tmp_path / "k"), expected_size=len(DATA))
    assert store.calls == {"info": 0, "get_bytes": 1, "get_range": 0}
    # A body of another length is a transfer error, retried; when every body is, the
    # store's own size (one HEAD) says that the dataset changed.
    with pytest.raises(ShardFormatError, match=r"mem://bucket/k holds 10240 bytes where 10 were"):
        download_file(store, "k", str(tmp_path / "j"), DownloadOptions(retry=3), expected_size=10)
    assert store.calls["get_bytes"] == 1 + 4
    assert store.calls["info"] == 1
    # Larger than one part: the size is asked beside the byte ranges (no round trip before
    # them), and a mismatch fails the download and leaves no file.
    with pytest.raises(ShardFormatError, match="holds 10240 bytes where 99 were"):
        download_file(
            store, "k", str(tmp_path / "j"), DownloadOptions(part_size=9), expected_size=99
        )
    assert store.calls["info"] == 2
    assert store.calls["get_bytes"] == 5
    assert os.listdir(tmp_path) == ["k"]


def test_a_known_size_in_ranges_asks_its_size_beside_them(tmp_path: Path):
    # Over a distant link a HEAD before the ranges costs a round trip: it goes with them.
    range_started = threading.Event()
    head_saw_a_range = []
    gather = gathering(lambda: store, 4)

    def hook(method: str, number: int) -> None:
        if method == "info":
            # The HEAD answers only once a range has started (before it or while it waits):
            # a download that waited for the HEAD's answer would leave this wait to time out.
            head_saw_a_range.append(range_started.wait(30))
        elif method == "get_range":
            range_started.set()
            gather(method, number)

    store = MemoryStore({"k": DATA}, hook)
    options = DownloadOptions(part_size=1000, concurrency=4)
    assert download_file(store, "k", str(tmp_path / "k"), options, expected_size=len(DATA)) == len(
        DATA
    )
    assert (tmp_path / "k").read_bytes() == DATA
    assert store.calls == {"info": 1, "get_bytes": 0, "get_range": 11}
    assert store.most_in_flight == 4
    assert head_saw_a_range == [True]


def test_an_empty_object_with_a_known_size_is_still_checked(tmp_path: Path):
    store = MemoryStore({"empty": b""})
    assert download_file(store, "empty", str(tmp_path / "e"), expected_size=0) == 0
    assert (tmp_path / "e").read_bytes() == b""
    with pytest.raises(ObjectNotFoundError):
        download_file(store, "missing", str(tmp_path / "m"), expected_size=0)
    assert os.listdir(tmp_path) == ["e"]


def test_the_temporary_file_is_a_sized_hidden_sibling(tmp_path: Path):
    seen: list[tuple[str, int]] = []

    def look(called: str, number: int) -> bytes | None:
        seen.extend((name, os.path.getsize(tmp_path / name)) for name in os.listdir(tmp_path))
        return None

    store = MemoryStore({"k": DATA}, look)
    download_file(store, "k", str(tmp_path / "shard.mds"), DownloadOptions(part_size=4096))
    assert seen
    for name, size in seen:
        assert name.startswith(".shard.mds.tmp-")
        assert is_temporary(name)
        assert size == len(DATA)  # sized up front with ftruncate
    assert os.listdir(tmp_path) == ["shard.mds"]


def test_a_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path):
    store = MemoryStore({"k": DATA}, failing(100, lambda: StorageError("503"), "get_range"))
    dest = tmp_path / "k"
    dest.write_bytes(b"the old copy")
    with pytest.raises(StorageError):
        download_file(store, "k", str(dest), DownloadOptions(retry=1, part_size=2048))
    assert dest.read_bytes() == b"the old copy"
    assert os.listdir(tmp_path) == ["k"]


def test_dest_folders_are_created(tmp_path: Path):
    store = MemoryStore({"k": DATA})
    download_file(store, "k", str(tmp_path / "a" / "b" / "k"))
    assert (tmp_path / "a" / "b" / "k").read_bytes() == DATA


def test_fetch_bytes_retries():
    store = MemoryStore({"index.json": b"{}"}, failing(1, lambda: StorageError("503")))
    assert fetch_bytes(store, "index.json", DownloadOptions(retry=1)) == b"{}"
    assert store.calls["get_bytes"] == 2


# --- the process-wide budget of bytes in flight ---------------------------------------------------


class CountingStore(MemoryStore):
    """A MemoryStore that records the most bytes its range requests held at once.

    Each range waits (30 s at most) until ``gather`` bytes have been in flight at once: the
    most the budget allows is then seen by count, not by sleeps that happen to overlap.
    """

    def __init__(self, objects: dict[str, bytes], gather: int) -> None:
        super().__init__(objects)
        self.gather = gather
        self.bytes_in_flight = 0
        self.most_bytes_in_flight = 0
        self._gathered = threading.Condition(self._lock)

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        with self._lock:
            self.bytes_in_flight += end - start
            self.most_bytes_in_flight = max(self.most_bytes_in_flight, self.bytes_in_flight)
            self._gathered.notify_all()
            gathering = self.most_bytes_in_flight < self.gather
            self._gathered.wait_for(lambda: self.most_bytes_in_flight >= self.gather, 30)
        try:
            if gathering:  # a moment beside the others: a request past the budget would show
                time.sleep(0.05)
            return super().get_range(key, start, end, if_match=if_match)
        finally:
            with self._lock:
                self.bytes_in_flight -= end - start


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> ByteBudget:
    budget = ByteBudget(3000)
    monkeypatch.setattr(download_module, "_BUDGET", budget)
    return budget


def test_the_budget_takes_what_fits_and_one_oversize_request_alone():
    budget = ByteBudget(100)
    assert budget.try_take(5000)  # nothing held: a request larger than the cap still starts
    assert not budget.try_take(1)
    budget.give_back(5000)
    assert budget.try_take(60)
    assert budget.try_take(40)
    assert not budget.try_take(1)
    budget.give_back(60)
    budget.give_back(40)
    assert budget.used == 0


def test_downloads_of_many_threads_hold_at_most_the_budget(
    tmp_path: Path, small_budget: ByteBudget
):
    objects = {f"k{i}": bytes([i]) * len(DATA) for i in range(4)}
    store = CountingStore(objects, gather=3000)
    options = DownloadOptions(part_size=1000, concurrency=8)
    threads = [
        threading.Thread(target=download_file, args=(store, key, str(tmp_path / key), options))
        for key in objects
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for key, data in objects.items():
        assert (tmp_path / key).read_bytes() == data
    assert store.calls["get_range"] == 4 * 11
    # Without the budget: 4 x 8 parts of 1,000 bytes; and the budget is used, not left idle.
    assert store.most_bytes_in_flight == 3000
    assert small_budget.used == 0


def test_the_budget_is_given_back_after_failures_and_timeouts(
    tmp_path: Path, small_budget: ByteBudget
):
    missing = MemoryStore({"k": DATA}, failing(1, lambda: ObjectNotFoundError("gone"), "get_range"))
    with pytest.raises(ObjectNotFoundError):
        download_file(missing, "k", str(tmp_path / "a"), DownloadOptions(part_size=1000))
    stalled = MemoryStore({"k": DATA}, stalling(0.3, times=100, method="get_range"))
    with pytest.raises(DownloadTimeoutError):
        download_file(
            stalled,
            "k",
            str(tmp_path / "b"),
            DownloadOptions(retry=0, timeout=0.05, part_size=1000),
        )
    deadline = time.monotonic() + 30  # a bound, not a measure: each stall ends in 0.3 s
    while small_budget.used and time.monotonic() < deadline:
        time.sleep(0.01)  # abandoned attempts end on their own, then free their share
    assert small_budget.used == 0
    assert missing.in_flight == stalled.in_flight == 0
    assert os.listdir(tmp_path) == []


class CopyCountingStore(LocalStore):
    """A folder on a local disk that counts the ways its files are read."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls = {"copy_into": 0, "get_bytes": 0, "get_range": 0}

    def copy_into(self, key: str, fd: int) -> int:
        self.calls["copy_into"] += 1
        return super().copy_into(key, fd)

    def get_bytes(self, key: str) -> bytes:
        self.calls["get_bytes"] += 1
        return super().get_bytes(key)

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        self.calls["get_range"] += 1
        return super().get_range(key, start, end, if_match=if_match)


def test_a_folder_on_a_local_disk_is_copied_not_requested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "k").write_bytes(DATA)
    store = CopyCountingStore(str(tmp_path / "remote"))
    monkeypatch.setattr(download_module, "is_local_disk", lambda _: True)
    small = DownloadOptions(part_size=1024)  # would be 10 ranges if requested
    assert download_file(store, "k", str(tmp_path / "a" / "k"), small) == len(DATA)
    assert download_file(store, "k", str(tmp_path / "b"), expected_size=len(DATA)) == len(DATA)
    assert (tmp_path / "a" / "k").read_bytes() == (tmp_path / "b").read_bytes() == DATA
    assert store.calls == {"copy_into": 2, "get_bytes": 0, "get_range": 0}
    # A wrong size is an error, as from any store, and the old file stays.
    (tmp_path / "b").write_bytes(b"the old copy")
    with pytest.raises(ShardFormatError, match=r"remote/k holds 10240 bytes where 99 were"):
        download_file(store, "k", str(tmp_path / "b"), expected_size=99)
    assert (tmp_path / "b").read_bytes() == b"the old copy"
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "remote"]
    with pytest.raises(ObjectNotFoundError):
        download_file(store, "missing", str(tmp_path / "m"))
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "remote"]


def test_a_folder_on_a_network_mount_is_requested_with_deadlines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "k").write_bytes(DATA)
    store = CopyCountingStore(str(tmp_path))
    monkeypatch.setattr(download_module, "is_local_disk", lambda _: False)  # as over NFS
    download_file(store, "k", str(tmp_path / "copy"), DownloadOptions(part_size=1024))
    assert (tmp_path / "copy").read_bytes() == DATA
    assert store.calls == {"copy_into": 0, "get_bytes": 0, "get_range": 10}
