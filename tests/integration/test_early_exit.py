"""Leaving a loop early returns at once, whatever the fetches ahead are waiting for.

A ``StreamingDataset`` fetches shards ahead of the reader. When the reader leaves (a ``break``,
an iterator dropped after ``next``) while the server has stopped answering those fetches, the
iterator gives them up instead of waiting for them, and the next iteration, once the server
answers again, reads every sample as written. SeaweedFS (S3) and a static HTTP server, each
behind :class:`tests.integration.faults.FaultProxy`, which stalls the shards ahead.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shardstream import MDSWriter, StreamingDataset

from .conftest import S3Server
from .faults import FaultProxy
from .http_server import StaticServer

SAMPLES = 400
PER_SHARD = 10
STALL_S = 60.0  # far past the bound asserted, and past download_timeout * attempts
TIMEOUT = 20.0  # each stalled fetch would hold a joining reader this long


@dataclass
class Served:
    """A dataset's remote URL, reached through a fault proxy."""

    url: str
    proxy: FaultProxy


def _sample(i: int) -> dict[str, object]:
    return {"id": i, "pad": bytes([i % 251]) * 100}


def _write(out: str) -> None:
    # Ten samples of about 125 bytes fill a shard of this limit: shard k holds 10k .. 10k+9.
    with MDSWriter(out=out, columns={"id": "int", "pad": "bytes"}, size_limit=1400) as writer:
        for i in range(SAMPLES):
            writer.write(_sample(i))


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.s3), "http"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Served]:
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_env")
        url = server.url("early-exit")
        _write(url)
        with FaultProxy(int(server.endpoint.rsplit(":", 1)[1])) as proxy:
            monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
            yield Served(url, proxy)
        return
    for name in ("http_proxy", "HTTP_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    web: StaticServer = request.getfixturevalue("http_server")
    folder = f"early-exit-{uuid.uuid4().hex[:8]}"
    _write(os.path.join(web.root, folder))
    with FaultProxy(web.port) as proxy:
        yield Served(f"{proxy.endpoint}/{folder}", proxy)


@pytest.mark.parametrize("leave", ["break", "drop"])
def test_leaving_early_gives_up_on_stalled_fetches_and_leaks_nothing(
    served: Served, tmp_path: Path, leave: str
):
    dataset = StreamingDataset(
        remote=served.url,
        local=str(tmp_path / "cache"),
        batch_size=PER_SHARD,
        predownload=4 * PER_SHARD,
        download_timeout=TIMEOUT,
        download_retry=0,
    )
    # Shards 0 to 2 answer; every later one stalls, so the fetches ahead of the reader hang.
    for shard in range(3, SAMPLES // PER_SHARD):
        served.proxy.inject(
            "stall", count=1000, method="GET", path_contains=f".{shard:05d}.mds",
            stall_seconds=STALL_S,
        )  # fmt: skip

    def stalled_ahead() -> bool:
        """Wait until a fetch ahead of the reader is stalled at the server."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if served.proxy.count("GET", ".00003.mds"):
                return True
            time.sleep(0.01)
        return False

    read = []
    started = time.monotonic()
    if leave == "break":
        for sample in dataset:
            read.append(sample["id"])
            if len(read) == 3 * PER_SHARD:
                assert stalled_ahead()
                started = time.monotonic()
                break
    else:
        samples = iter(dataset)
        read = [next(samples)["id"] for _ in range(3 * PER_SHARD)]
        assert stalled_ahead()
        started = time.monotonic()
        del samples
    left = time.monotonic() - started
    assert sorted(read) == list(range(3 * PER_SHARD))
    # A loose bound: a stalled fetch would hold the reader TIMEOUT s, the stall STALL_S.
    assert left < TIMEOUT / 2, f"leaving took {left:.1f} s: the stalled fetches were waited for"
    # The server recovers: the next iteration reads every sample, nothing left over from the
    # fetches given up (no lock held, no slot taken, no half-written file).
    served.proxy.clear()
    started = time.monotonic()
    again = list(dataset)
    assert time.monotonic() - started < TIMEOUT
    assert sorted(sample["id"] for sample in again) == list(range(SAMPLES))
    for sample in again:
        assert sample["pad"] == _sample(sample["id"])["pad"]
    leftovers = [name for name in os.listdir(tmp_path / "cache") if ".tmp-" in name]
    assert leftovers == []
