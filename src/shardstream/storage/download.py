"""Downloading objects from any store: deadlines, retries, parallel byte ranges, atomic files.

Every request runs in a worker thread (a daemon, reused from request to request) and the caller
waits for it with a deadline, so the timeout holds for every backend, whatever its SDK does with
its sockets; one waiting thread serves many requests (:func:`run_requests`), each with its own
deadline, and starts no thread of its own. A request past its deadline counts as a failed
attempt; its thread is abandoned (it returns to the pool when its socket gives up) and whatever
it returns later is ignored. Workers only return bytes: the calling thread alone writes into
the file, with ``os.pwrite``, so no thread ever writes into a file descriptor that may already
be closed. The bytes held by requests in flight are capped process-wide
(:data:`IN_FLIGHT_BYTES`, see :mod:`~shardstream.storage._memory_budget`).

Retries follow :func:`~shardstream.storage.retry.is_transient`: a missing object, refused
credentials and bad arguments fail at once; network errors, server errors, short bodies and
timeouts are tried again after an exponential, jittered delay. A body of another length than
asked for is such a transfer error, never "the dataset changed" (see :class:`_WrongBody`).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import queue
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from shardstream.errors import (
    DownloadTimeoutError,
    ShardFormatError,
    StorageError,
)
from shardstream.storage import cancel
from shardstream.storage._attempt import Attempt as _Attempt
from shardstream.storage._memory_budget import ByteBudget
from shardstream.storage.base import ObjectInfo, ObjectStore
from shardstream.storage.download_options import DownloadOptions
from shardstream.storage.filesystems import is_local_disk
from shardstream.storage.local import LocalStore, pwrite_all, temporary_sibling
from shardstream.storage.retry import backoff_delays, is_transient
from shardstream.storage.store_base import BaseStore

__all__ = [
    "DownloadOptions",
    "Request",
    "download_file",
    "fetch_bytes",
    "fetch_info",
    "fetch_listing",
    "run_requests",
    "timed_request",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Bytes of response bodies one process holds at once over all its downloads: eight 16 MiB
#: parts. Without it, eight 64 MiB shards fetched at once would hold 512 MiB.
IN_FLIGHT_BYTES = 128 << 20
_BUDGET = ByteBudget(IN_FLIGHT_BYTES)
#: How often a download that waits for room in the budget looks again.
_BUDGET_POLL_S = 0.05


_DEFAULT = DownloadOptions()


def fetch_bytes(
    store: ObjectStore,
    key: str,
    options: DownloadOptions = _DEFAULT,
    *,
    expected_size: int | None = None,
) -> bytes:
    """The whole object under ``key``, in one request, with the timeout and retries of ``options``.

    Meant for small objects such as ``index.json``; use :func:`download_file` for shards.
    ``expected_size``: the size the caller knows the object has (from a listing); a body of
    another length is a transfer error (:class:`_WrongBody`), retried.

    Raises:
        ObjectNotFoundError: No object under ``key`` (not retried).
        CredentialsError: The store refused the credentials (not retried).
        DownloadTimeoutError: The last attempt ran past ``options.timeout``.
        StorageError: The last attempt failed otherwise; the message names the URL, the attempts
            made and the last cause.
    """
    url = store.url(key)
    if expected_size is None:
        return timed_request(lambda: store.get_bytes(key), options, f"reading {url}")
    size = expected_size

    def read_checked() -> bytes:
        data = store.get_bytes(key)
        if len(data) != size:
            raise _wrong_body(url, 0, size, len(data), size)
        return data

    return timed_request(read_checked, options, f"reading {url}")


def fetch_info(store: ObjectStore, key: str, options: DownloadOptions = _DEFAULT) -> ObjectInfo:
    """The size and version tag of the object under ``key``, with the timeout and retries.

    Raises:
        ObjectNotFoundError: No object under ``key`` (not retried).
        CredentialsError: The store refused the credentials (not retried).
        DownloadTimeoutError: The last attempt ran past ``options.timeout``.
        StorageError: The last attempt failed otherwise, as in :func:`fetch_bytes`.
    """
    return timed_request(lambda: store.info(key), options, f"checking {store.url(key)}")


def fetch_listing(
    store: ObjectStore,
    prefix: str = "",
    options: DownloadOptions = _DEFAULT,
    *,
    split_at: Sequence[str] = (),
) -> dict[str, ObjectInfo]:
    """``store.list_info(prefix)``, as one request: the deadline and retries of ``options``.

    ``split_at``: keys (a cached index's shard names) at which a store built on
    :class:`~shardstream.storage.store_base.BaseStore` lists key ranges in parallel
    (``options.list_ranges`` at once, see its ``list_info``); the listing is the same, and
    other stores list serially.

    A listing is bounded as a whole, as :func:`timed_request` bounds any request: each attempt,
    every page of it, must end within ``options.timeout``, and a late or failed attempt is
    tried again from its start, so the listing ends within ``timeout * (retry + 1)`` seconds
    plus the backoff, however many pages it has and however slowly a server sends them. A
    prefix too large to list within ``timeout`` needs a larger ``timeout``.

    Raises:
        UnsupportedURLError: The store has no listing (not retried).
        DownloadTimeoutError: The last attempt ran past ``options.timeout``.
        StorageError: The last attempt failed otherwise.
    """

    def listing() -> dict[str, ObjectInfo]:
        if split_at and isinstance(store, BaseStore):
            return store.list_info(prefix, split_at=split_at, in_flight=options.list_ranges)
        return store.list_info(prefix)

    return timed_request(listing, options, f"listing {store.url(prefix)}")


def timed_request(call: Callable[[], T], options: DownloadOptions, action: str) -> T:
    """``call()``, one request to a store, with the deadline and retries of ``options``.

    ``call`` runs in a worker thread and is abandoned at the deadline, so a silent server
    cannot hold the caller longer than ``options`` allow, whatever the backend's SDK does.
    The deadline counts from the attempt's start to its last byte, so a body trickled slowly
    is late too, and a call of many requests (a listing's pages) is bounded as a whole.

    Args:
        call: The request, e.g. ``lambda: store.info(key)``.
        options: Retries and timeout.
        action: What the request does, naming the URL, for messages (``"checking s3://..."``).

    Raises:
        DownloadTimeoutError: The last attempt ran past ``options.timeout``.
        StorageError: The last attempt failed otherwise (non-transient errors such as
            :class:`~shardstream.errors.ObjectNotFoundError` are raised at once, as they are).
    """
    found: list[T] = []
    _gather([call], lambda _, value: found.append(value), options, action)
    return found[0]


def download_file(
    store: ObjectStore,
    key: str,
    dest: str,
    options: DownloadOptions = _DEFAULT,
    *,
    expected_size: int | None = None,
) -> int:
    """Download the object under ``key`` to the local file ``dest``, atomically.

    The bytes go to a temporary sibling of ``dest`` (see
    :func:`~shardstream.storage.local.temporary_sibling`), sized up front, which is renamed over
    ``dest`` only once every byte has arrived and the size is right. On any failure the
    temporary file is removed and ``dest`` is left as it was. ``dest``'s folder is created if
    needed. Objects larger than ``options.part_size`` download as parallel byte ranges after a
    request for the object's size; an object whose ``expected_size`` fits one part downloads
    in a single GET, its length checked against ``expected_size``. A folder on a disk of this
    machine (:func:`~shardstream.storage.filesystems.is_local_disk`) is copied in the kernel
    instead, with neither threads nor retries.

    Args:
        store: Where the object lives.
        key: The object's key in ``store``.
        dest: The local path to create or replace.
        options: Retries, timeout, part size and concurrency.
        expected_size: The size the caller knows the object has (e.g. from ``index.json``).

    Returns:
        The number of bytes written.

    Raises:
        ShardFormatError: The store says the object's size differs from ``expected_size``
            (not retried; a body of the wrong length alone is a transfer error, see
            :class:`_WrongBody`).
        ObjectNotFoundError: No object under ``key`` (not retried).
        CredentialsError: The store refused the credentials (not retried).
        DownloadTimeoutError: A request's last attempt ran past ``options.timeout``.
        StorageError: A request's last attempt failed otherwise (a body of the wrong length
            included); the message names the URL, the attempts made and the last cause.
        OSError: ``dest`` could not be written.
    """
    url = store.url(key)
    if isinstance(store, LocalStore) and is_local_disk(store):
        # A file on a disk of this machine: one copy in the kernel, no threads and no buffers
        # (no request can hang, so there is nothing to time out or retry).
        local = store

        def copy(fd: int) -> int:
            copied = local.copy_into(key, fd)
            if expected_size is not None and copied != expected_size:
                raise _size_error(url, copied, expected_size)
            return copied

        return _atomically(dest, copy)
    # An object of a known size needs no HEAD before its GETs: one that fits one request has
    # its GET's length checked against the size, and a larger one asks for its size beside
    # its byte ranges (a round trip to a distant store saved either way).
    known = expected_size is not None and expected_size <= options.part_size
    size = expected_size if expected_size is not None else fetch_info(store, key, options).size

    def fill(fd: int) -> int:
        os.ftruncate(fd, size)
        _fetch_into(fd, store, key, size, options, known=known, check=expected_size is not None)
        return size

    return _atomically(dest, fill)


def _atomically(dest: str, fill: Callable[[int], int]) -> int:
    """Create ``dest`` whole or not at all: ``fill`` writes a temporary sibling, then renamed.

    ``fill(fd)`` returns the bytes it wrote, checked against the file's size. On any failure
    the temporary file is removed and ``dest`` is left as it was; ``dest``'s folder is created
    if needed.
    """
    temporary = temporary_sibling(dest)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(temporary, flags, 0o644)
    except FileNotFoundError:  # the folder is missing: the first file into it (asked once)
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        fd = os.open(temporary, flags, 0o644)
    try:
        try:
            size = fill(fd)
            written = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if written != size:  # pragma: no cover - every byte was written; a last sanity check
            raise StorageError(f"writing {dest}: wrote {written} of {size} bytes")
        os.replace(temporary, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise
    return size


def _size_error(url: str, size: int, expected_size: int) -> ShardFormatError:
    return ShardFormatError(
        f"{url} holds {size} bytes where {expected_size} were expected: the dataset changed "
        f"or its index is wrong. Check that the index.json and the shards come from the same "
        f"writer run, and clear the local cache."
    )


class _WrongBody(StorageError):
    """An answer whose body is not the bytes asked for: a transfer error, tried again.

    The one rule for what a body says: a ``200 OK`` whose body has another length than the
    bytes asked for (a gateway's HTML page, a body cut short with headers that agree) proves
    nothing about the object, only about this transfer, so it is retried as any transfer
    error is and, after the last retry, reported as one. Only the store's own word on the
    object (its size, asked with a HEAD) can say the dataset changed.
    """


def _wrong_body(url: str, start: int, end: int, got: int, size: int) -> _WrongBody:
    return _WrongBody(
        f"bytes [{start}, {end}) of {url} came back as {got} bytes (the object is {size} "
        f"bytes): a body cut short, or an answer that is not the object (a proxy's or "
        f"gateway's page)"
    )


def _fetch_into(
    fd: int,
    store: ObjectStore,
    key: str,
    size: int,
    options: DownloadOptions,
    *,
    known: bool,
    check: bool = False,
) -> None:
    """Fill the first ``size`` bytes of ``fd`` with the object, in one request or in ranges.

    ``known``: ``size`` comes from the caller, not from the store, and the object's whole body
    (one GET) is checked against it; a body of another length is a transfer error
    (:class:`_WrongBody`), and if every attempt gets one, the store is asked the object's
    size: :class:`ShardFormatError` if that differs too, else the transfer error.
    ``check``: ``size`` comes from the caller and an object read in ranges is asked for its
    size beside them (a HEAD in flight with the GETs); a different size is a
    :class:`ShardFormatError`.
    """
    url = store.url(key)
    if size == 0 and not known:
        return
    if size <= options.part_size:
        spans = [(0, size)]
        requests: list[Callable[[], bytes | ObjectInfo]] = [lambda: store.get_bytes(key)]
        action = f"reading {url}"
    else:
        starts = range(0, size, options.part_size)
        spans = [(start, min(start + options.part_size, size)) for start in starts]
        requests = [_range_reader(store, key, start, end) for start, end in spans]
        action = f"reading {url} in {len(spans)} byte ranges"
        if check:  # first, so that a wrong size stops the download early; it holds no bytes
            spans.insert(0, (0, 0))
            requests.insert(0, lambda: store.info(key))

    def deliver(index: int, data: bytes | ObjectInfo) -> None:
        if isinstance(data, ObjectInfo):
            if data.size != size:
                raise _size_error(url, data.size, size)
            return
        start, end = spans[index]
        if len(data) != end - start:
            raise _wrong_body(url, start, end, len(data), size)
        pwrite_all(fd, data, start)

    costs = [end - start for start, end in spans]
    try:
        _gather(requests, deliver, options, action, costs=costs)
    except StorageError as exc:
        if not (known and isinstance(exc.__cause__, _WrongBody)):
            raise
        try:  # every body was wrong: the store says whether the object is what the index says
            actual = timed_request(lambda: store.info(key), options, f"checking {url}").size
        except StorageError:
            raise exc from exc.__cause__
        if actual != size:
            raise _size_error(url, actual, size) from exc
        raise


def _range_reader(store: ObjectStore, key: str, start: int, end: int) -> Callable[[], bytes]:
    return lambda: store.get_range(key, start, end)


def _gather(
    requests: Sequence[Callable[[], T]],
    deliver: Callable[[int, T], None],
    options: DownloadOptions,
    action: str,
    costs: Sequence[int] | None = None,
) -> None:
    """Run every request (``options.concurrency`` at a time), each with deadline and retries.

    ``deliver(index, value)`` runs in the calling thread as each request succeeds; if it raises,
    that counts as a failed attempt of the request (e.g. a body of the wrong length).
    ``costs[index]``: the bytes request ``index`` returns, taken from the process's budget
    while it is in flight (none when ``costs`` is ``None``).

    Raises:
        The first non-transient error as it is; after the last retry of a request,
        DownloadTimeoutError when that attempt timed out, else StorageError.
    """
    listed = [
        Request(call, options, action, 0 if costs is None else costs[index])
        for index, call in enumerate(requests)
    ]
    run_requests(listed, deliver, options.concurrency)


@dataclass(frozen=True)
class Request(Generic[T]):
    """One request for :func:`run_requests`: the call, its deadline and retries, its name.

    Attributes:
        call: The request, e.g. ``lambda: store.info(key)``; run in a worker thread.
        options: Its retries and timeout (``concurrency`` is :func:`run_requests`'s).
        action: What it does, naming the URL, for messages.
        cost: The bytes it returns, taken from the process's budget while it is in flight.
    """

    call: Callable[[], T]
    options: DownloadOptions
    action: str
    cost: int = 0


def run_requests(
    requests: Sequence[Request[T]],
    deliver: Callable[[int, T], Sequence[Request[T]] | None],
    concurrency: int,
) -> None:
    """Run many requests, ``concurrency`` at a time, each with its own deadline and retries.

    One loop in the calling thread waits for them all: each request crosses one hand-off to
    a reused worker thread (see :func:`timed_request`), and no thread waits per request.
    ``deliver(index, value)`` runs in the calling thread as request ``index`` succeeds and
    may return more requests, which run too (numbered after those before them); if it
    raises a :class:`~shardstream.errors.StorageError`, that counts as a failed attempt of
    the request, any other error ends the run. When the run ends on an error, the requests
    in flight are abandoned and those not started never are.

    Raises:
        The first non-transient error as it is; after the last retry of a request,
        DownloadTimeoutError when that attempt timed out, else StorageError.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency!r} must be at least 1")
    listed = list(requests)
    outcomes: queue.SimpleQueue[_Attempt[T] | None] = queue.SimpleQueue()
    budget = _BUDGET
    ready: deque[int] = deque(range(len(listed)))
    waiting: list[tuple[float, int]] = []  # (when, index): retries sleeping off their backoff
    in_flight: dict[_Attempt[T], float] = {}  # attempt -> deadline
    failures: dict[int, int] = {}
    # Each request's backoff is drawn on its first failure: fresh entropy costs more than a
    # download of a tiny shard that never fails should pay.
    delays: dict[int, list[float]] = {}

    def failed(index: int, error: BaseException) -> None:
        failures[index] = count = failures.get(index, 0) + 1
        request = listed[index]
        if not is_transient(error):
            raise error
        if count > request.options.retry:
            raise _final_error(request.action, count, error, request.options) from error
        if index not in delays:
            delays[index] = backoff_delays(request.options.retry, _rng())
        delay = delays[index][count - 1]
        logger.warning(
            "%s failed (%s); retry %d of %d in %.2f s",
            request.action,
            _describe(error),
            count,
            request.options.retry,
            delay,
        )
        heapq.heappush(waiting, (time.monotonic() + delay, index))

    scope = cancel.current()
    watching = scope.watch(outcomes) if scope is not None else contextlib.nullcontext()
    with watching:
        try:
            while ready or waiting or in_flight:
                cancel.check()  # the reader that wanted this stopped: abandon it all (below)
                now = time.monotonic()
                while waiting and waiting[0][0] <= now:
                    ready.append(heapq.heappop(waiting)[1])
                short = False  # a ready request waits for room in the memory budget
                while ready and len(in_flight) < concurrency:
                    index = ready[0]
                    request = listed[index]
                    if request.cost and not budget.try_take(request.cost):
                        short = True
                        break
                    ready.popleft()
                    attempt = _Attempt(index, request.call, outcomes, request.cost, budget)
                    in_flight[attempt] = time.monotonic() + request.options.timeout
                    attempt.start()
                if short and not in_flight:  # only others' requests hold the budget
                    budget.wait(_BUDGET_POLL_S)
                    continue
                wake = min([*in_flight.values(), *(when for when, _ in waiting[:1])], default=now)
                if short:
                    wake = min(wake, now + _BUDGET_POLL_S)
                done = _next_outcome(outcomes, wake)
                if done is None:
                    now = time.monotonic()
                    for attempt, deadline in list(in_flight.items()):
                        if deadline <= now:
                            del in_flight[attempt]  # its late outcome is ignored below
                            attempt.abandon()
                            timeout = listed[attempt.index].options.timeout
                            failed(
                                attempt.index,
                                TimeoutError(f"no answer within the {timeout:g} s timeout"),
                            )
                    continue
                if done not in in_flight:
                    continue
                del in_flight[done]
                try:
                    if done.error is not None:
                        failed(done.index, done.error)
                        continue
                    try:
                        more = deliver(done.index, done.value)  # type: ignore[arg-type]
                    except StorageError as exc:
                        failed(done.index, exc)
                        continue
                    if more:
                        ready.extend(range(len(listed), len(listed) + len(more)))
                        listed.extend(more)
                finally:
                    done.settle()
        finally:
            for attempt in in_flight:  # a failure ended the download: nobody waits for these
                attempt.abandon()


def _next_outcome(
    outcomes: queue.SimpleQueue[_Attempt[T] | None], wake: float
) -> _Attempt[T] | None:
    """The next finished attempt, or ``None`` once the clock reaches ``wake`` (or on a cancel)."""
    try:
        return outcomes.get(timeout=max(0.0, wake - time.monotonic()))
    except queue.Empty:
        return None


def _final_error(
    action: str, attempts: int, error: BaseException, options: DownloadOptions
) -> StorageError:
    """The error of a request whose every attempt failed in transfer (only those are retried)."""
    message = (
        f"{action} failed after {attempts} attempt{'s' if attempts > 1 else ''} "
        f"(retry={options.retry}, timeout={options.timeout:g} s), a transfer error each time; "
        f"the last: {_describe(error)}"
    )
    if isinstance(error, TimeoutError):
        return DownloadTimeoutError(
            message + ". Raise DownloadOptions.timeout or retry for a slow store."
        )
    return StorageError(
        message + ". Check the store and the network to it, or raise DownloadOptions.retry."
    )


def _describe(error: BaseException) -> str:
    public = next(kind for kind in type(error).__mro__ if not kind.__name__.startswith("_"))
    return f"{public.__name__}: {error}"


def _rng() -> np.random.Generator:
    # Retry jitter only: fresh OS entropy on purpose, so that many readers that fail together
    # do not retry together. No data depends on it.
    return np.random.default_rng()
