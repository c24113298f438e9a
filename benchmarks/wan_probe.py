"""Probes of a link's own accuracy: a small GET's time, and bulk rates seen by the client.

A rate here is the bytes that arrived after the first chunk over the time from that chunk to
the last, so a request's first-byte latency does not count against the link's rate. The peak
is the most bytes that arrived within any 50 ms window, as a rate: a cap that lets bursts
through shows here. Used by ``wan_bench.py``'s ``link`` part and by the link's smoke test.
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any

import numpy as np

__all__ = ["WINDOW_S", "Arrivals", "bulk_rates", "probe_link"]

WINDOW_S = 0.050
CHUNK = 64 << 10
MB = 1e6


class Arrivals:
    """``(time, bytes)`` of every chunk read, over any number of threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.times: list[float] = []
        self.sizes: list[int] = []

    def add(self, size: int) -> None:
        """A chunk of ``size`` bytes arrived now."""
        now = time.perf_counter()
        with self._lock:
            self.times.append(now)
            self.sizes.append(size)

    def rates(self) -> dict[str, float]:
        """MB/s from the first chunk to the last, over the middle 80% of the bytes, and at most.

        ``middle_mb_per_s`` leaves out the start (staggered first bytes) and the tail (the
        last connection alone); ``peak_mb_per_s`` is the most within any 50 ms window.
        """
        order = np.argsort(self.times)
        times = np.asarray(self.times)[order]
        sizes = np.asarray(self.sizes, dtype=np.int64)[order]
        totals = np.concatenate([[0], np.cumsum(sizes)])
        span = float(times[-1] - times[0])
        mean = float(sizes[1:].sum()) / span if span > 0 else float("inf")
        low, high = np.searchsorted(totals[1:], [0.1 * totals[-1], 0.9 * totals[-1]])
        spent = max(float(times[high] - times[low]), 1e-9)
        middle = float(totals[high + 1] - totals[low + 1]) / spent
        ends = np.searchsorted(times, times + WINDOW_S, side="right")
        peak = float((totals[ends] - totals[np.arange(len(times))]).max()) / WINDOW_S
        return {"mb_per_s": mean / MB, "middle_mb_per_s": middle / MB,
                "peak_mb_per_s": peak / MB, "seconds": span}  # fmt: skip


def _client(endpoint: str, key: str, secret: str, connections: int) -> Any:
    session = importlib.import_module("botocore.session")  # untyped: reached as Any
    config = importlib.import_module("botocore.config").Config(
        s3={"addressing_style": "path"}, max_pool_connections=connections
    )
    return session.get_session().create_client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1", config=config,
    )  # fmt: skip


def _read(client: Any, bucket: str, key: str, arrivals: Arrivals, span: str | None) -> int:
    extra = {"Range": span} if span else {}
    body = client.get_object(Bucket=bucket, Key=key, **extra)["Body"]
    total = 0
    for chunk in body.iter_chunks(CHUNK):
        arrivals.add(len(chunk))
        total += len(chunk)
    return total


def bulk_rates(
    endpoint: str, key: str, secret: str, bucket: str, obj: str, size: int, connections: int
) -> dict[str, float]:
    """``connections`` warm connections read ``obj`` (``size`` bytes) as as many ranges at once."""
    client = _client(endpoint, key, secret, connections)
    part = -(-size // connections)
    spans = [f"bytes={k * part}-{min(size, (k + 1) * part) - 1}" for k in range(connections)]
    barrier = threading.Barrier(connections)
    warm = Arrivals()

    def one(span: str, arrivals: Arrivals) -> None:
        _read(client, bucket, obj, warm, "bytes=0-0")  # opens this thread's connection
        barrier.wait()
        _read(client, bucket, obj, arrivals, span)

    arrivals = Arrivals()
    threads = [threading.Thread(target=one, args=(span, arrivals)) for span in spans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return arrivals.rates()


def probe_link(
    endpoint: str, key: str, secret: str, bucket: str, small: str, big: str, size: int
) -> dict[str, float]:
    """A small GET's median time (warm connection), one connection's and eight's rates."""
    client = _client(endpoint, key, secret, 1)
    _read(client, bucket, small, Arrivals(), None)
    times = []
    for _ in range(20):
        started = time.perf_counter()
        _read(client, bucket, small, Arrivals(), None)
        times.append(time.perf_counter() - started)
    arrivals = Arrivals()
    _read(client, bucket, big, arrivals, None)
    one = arrivals.rates()
    many = bulk_rates(endpoint, key, secret, bucket, big, size, 8)
    return {
        "small_get_ms": float(np.median(times)) * 1e3,
        "one_connection_mb_per_s": one["mb_per_s"],
        "one_connection_middle_mb_per_s": one["middle_mb_per_s"],
        "one_connection_peak_mb_per_s": one["peak_mb_per_s"],
        "eight_connections_mb_per_s": many["mb_per_s"],
        "eight_connections_middle_mb_per_s": many["middle_mb_per_s"],
        "eight_connections_peak_mb_per_s": many["peak_mb_per_s"],
    }
