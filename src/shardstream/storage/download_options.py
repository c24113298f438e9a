"""How hard and how wide to try when downloading: retries, deadline, part size, concurrency.

And how wide a start's listing goes: key ranges listed at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardstream.errors import ConfigurationError

__all__ = ["DownloadOptions"]


@dataclass(frozen=True)
class DownloadOptions:
    """How hard and how wide to try when downloading.

    Attributes:
        retry: Retries after a failed first attempt, for each request (``retry=2``: up to three
            attempts); ``0`` tries once.
        timeout: Seconds allowed for each request (a whole small object, one byte range, an
            object's size and tag, a whole listing with all its pages), from its start to its
            last byte, enforced for every backend that answers requests (a folder on a disk
            of this machine is copied, not requested). A store opened with
            ``open_store(url, timeout=...)`` waits no longer than that at its sockets either,
            so listings, uploads and abandoned requests end as soon. A server that stops
            answering stalls a request at most ``timeout * (retry + 1)`` seconds, plus the
            backoff between attempts (at most ``0.5 * (2**retry - 1)`` seconds).
        part_size: Objects larger than this download as parallel byte ranges of this size.
        concurrency: Byte ranges of one object in flight at once.
        list_ranges: Key ranges of one listing in flight at once, where the store lists from
            a key (S3, GCS, OCI): a start lists its remote in ranges cut at the names it
            knows, each about a page, so that a distant store's listing waits about one
            round trip for each ``list_ranges`` pages, and a shard read before the listing
            ends waits for its own range alone.

    A node's shard cache bounds its downloads with download slots (``download_concurrency``
    of them, over every process of the node), and :meth:`slot_share` decides how many
    downloads one slot carries: a slot is ``concurrency`` requests. An object larger than
    ``part_size`` uses them all, as parallel byte ranges, and holds its slot alone; an
    object of at most ``part_size`` bytes is one request and holds one of them, so a slot
    carries ``concurrency`` such downloads at once. Either way a slot has at most
    ``concurrency`` requests and ``concurrency * part_size`` bytes in flight; small shards
    are bound by round trips, not bytes, and a shuffled first batch over thousands of them
    waits one round trip per ``slots * concurrency`` shards instead of per ``slots``.

    Raises:
        ConfigurationError: A value is out of range.
    """

    retry: int = 2
    timeout: float = 60.0
    part_size: int = 16 << 20
    concurrency: int = 8
    list_ranges: int = 16

    def __post_init__(self) -> None:
        problems = [
            f"{name}={value!r} must be an integer >= {minimum}"
            for name, value, minimum in (
                ("retry", self.retry, 0),
                ("part_size", self.part_size, 1),
                ("concurrency", self.concurrency, 1),
                ("list_ranges", self.list_ranges, 1),
            )
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum
        ]
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            problems.append(f"timeout={timeout!r} must be a positive number of seconds")
        if problems:
            raise ConfigurationError("DownloadOptions: " + "; ".join(problems))

    def slot_share(self, size: int) -> int:
        """How many downloads of objects of ``size`` bytes one download slot carries at once.

        ``concurrency`` for an object fetched in one request (at most ``part_size`` bytes),
        1 for one fetched as parallel byte ranges (it holds the slot alone).
        """
        return self.concurrency if size <= self.part_size else 1
