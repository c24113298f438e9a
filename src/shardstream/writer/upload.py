"""Background, parallel, retried publication of a writer's files to an object store."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from shardstream.errors import CredentialsError, UploadError
from shardstream.storage.base import Publisher
from shardstream.storage.retry import backoff_delays

__all__ = ["Uploader", "backoff_delays", "retried"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def retried(what: str, action: Callable[[], T], retry: int, rng: np.random.Generator) -> T:
    """``action()``, retried ``retry`` times after an ``OSError``, with backoff between tries.

    What a writer does to its store goes through here. Refused credentials do not get better by
    retrying: they fail at once.

    Raises:
        UploadError: Every attempt failed; it names ``what`` (e.g. ``"uploading x to s3://..."``)
            and comes from the last attempt's error.
    """
    delays = backoff_delays(retry, rng)
    for attempt in range(retry + 1):
        try:
            return action()
        except OSError as exc:  # noqa: PERF203 - one try per attempt is the point
            if attempt == retry or isinstance(exc, CredentialsError):
                raise UploadError(f"{what} failed after {attempt + 1} attempts: {exc}") from exc
            logger.warning("%s failed (%s); retry %d of %d", what, exc, attempt + 1, retry)
            time.sleep(delays[attempt])
    raise AssertionError("unreachable: the last attempt returns or raises")


class Uploader:
    """Publishes files from ``local_root`` to ``store`` in worker threads, with retries.

    Args:
        store: The destination.
        local_root: The folder holding the files to publish.
        max_workers: Upload threads (default: ``min(32, cpus + 4)``).
        retry: Retries after a failed attempt (so ``retry + 1`` attempts in all).
        progress: A tqdm-like bar counting bytes: each submitted file adds its size to
            ``total``, each published one advances it; ``None`` for none.
        remove_uploaded: Delete each submitted file from ``local_root`` once it is published
            (a writer's ``keep_local=False``), so that the local copy never holds more than
            the shards still in flight.
    """

    def __init__(
        self,
        store: Publisher,
        local_root: str,
        *,
        max_workers: int | None,
        retry: int,
        progress: Any = None,
        remove_uploaded: bool = False,
    ) -> None:
        self.store = store
        self._remove_uploaded = remove_uploaded
        self.local_root = local_root
        self.retry = retry
        self._progress = progress
        self._progress_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="shardstream-upload")
        self._futures: list[tuple[str, Future[None]]] = []
        self._failed = threading.Event()
        # Retry jitter only: fresh OS entropy on purpose, so that many writers that fail together
        # do not retry together. No data depends on it.
        self._rng = np.random.default_rng()

    def submit(self, key: str) -> None:
        """Start publishing ``<local_root>/<key>`` in the background."""
        self.raise_if_failed()
        size = 0
        if self._progress is not None:
            size = os.path.getsize(os.path.join(self.local_root, key))
            with self._progress_lock:
                self._progress.total = (self._progress.total or 0) + size
                self._progress.refresh()
        future = self._executor.submit(self._upload_submitted, key, size)
        future.add_done_callback(self._note_failure)
        self._futures.append((key, future))

    def _note_failure(self, future: Future[None]) -> None:
        # A cancelled upload (a failure elsewhere stopped the writer) has no exception to ask for.
        if not future.cancelled() and future.exception() is not None:
            self._failed.set()

    def _upload_submitted(self, key: str, size: int) -> None:
        self.upload(key)
        if self._remove_uploaded:
            os.remove(os.path.join(self.local_root, key))
        if self._progress is not None:
            with self._progress_lock:
                self._progress.update(size)

    def upload(self, key: str) -> None:
        """Publish ``<local_root>/<key>`` now, retrying; raise :class:`UploadError` at the end."""
        path = os.path.join(self.local_root, key)
        retried(
            f"uploading {key} to {self.store.url(key)}",
            lambda: self.store.put_file(path, key),
            self.retry,
            self._rng,
        )

    def raise_if_failed(self) -> None:
        """Raise the first upload error seen so far, if any."""
        if self._failed.is_set():
            self.wait()

    def wait(self) -> None:
        """Block until every submitted upload is done; raise the first failure, naming its file.

        Raises:
            UploadError: An upload failed after every retry.
        """
        for key, future in self._futures:
            exc = future.exception()
            if exc is not None:
                self.close(cancel=True)
                if isinstance(exc, UploadError):
                    raise exc
                raise UploadError(
                    f"uploading {key} to {self.store.url(key)} failed: {type(exc).__name__}: {exc}"
                ) from exc

    def close(self, *, cancel: bool = False) -> None:
        """Stop the worker threads; with ``cancel``, drop uploads not yet started."""
        self._executor.shutdown(wait=True, cancel_futures=cancel)
