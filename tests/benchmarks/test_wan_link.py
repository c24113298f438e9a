"""Smoke test of the emulated WAN link (``benchmarks/wan_link.py``) in front of SeaweedFS.

The link must add its latency to each request, hold each connection and the whole link to
their caps, and carry a shardstream epoch unchanged. Only lower bounds on time are asserted,
which a busy machine cannot break; the pacer's arithmetic is tested on a virtual clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from benchmarks.wan_link import BURST_S, CHUNK, LinkSettings, Pacer, WanLink, run_link
from numpy.typing import NDArray

from shardstream import MDSWriter, StreamingDataset
from shardstream.storage import S3Store
from tests.integration.seaweedfs import S3Server, run_seaweedfs

pytestmark = pytest.mark.s3

MiB = 1 << 20
LATENCY = 0.040
CONNECTION = 16e6  # bytes/s
LINK = 24e6
SETTINGS = LinkSettings(latency_s=LATENCY, jitter_s=0.0, connection_rate=CONNECTION, link_rate=LINK)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with run_seaweedfs(tmp_path_factory.mktemp("wan-seaweedfs")) as found:
        yield found


@pytest.fixture(scope="module")
def link(server: S3Server) -> Iterator[WanLink]:
    port = int(server.endpoint.rsplit(":", 1)[1])
    with run_link(("127.0.0.1", port), SETTINGS, lifetime_s=120) as running:
        yield running


def store_at(server: S3Server, remote: str, endpoint: str) -> S3Store:
    return S3Store(remote, endpoint_url=endpoint, key=server.key, secret=server.secret)


def test_pacer_holds_a_rate_after_its_burst() -> None:
    pacer = Pacer(1e6, burst_s=0.002)
    assert pacer.delay(1000, now=10.0) == 0.0  # 1 ms of the rate: within the burst
    assert pacer.delay(2000, now=10.0) == pytest.approx(0.001)  # 3 ms booked, 2 ms free
    assert pacer.delay(1000, now=20.0) == 0.0  # idle since: the clock starts again
    assert Pacer(0).delay(1 << 30, now=0.0) == 0.0  # no cap


def _paced(pacer: Pacer, late_s: float, chunks: int = 4000) -> NDArray[np.float64]:
    """When each 64 KiB chunk leaves a sender that wakes up to ``late_s`` late from a sleep."""
    rng = np.random.default_rng(0)
    now, sent = 0.0, np.empty(chunks)
    for k in range(chunks):
        wait = pacer.delay(CHUNK, now)
        now += wait + (rng.uniform(0, late_s) if wait else 2e-5)  # a sleep overshoots
        sent[k] = now
    return sent


@pytest.mark.parametrize("late_s", [0.0005, 0.002, 0.004])
def test_pacer_delivers_its_cap_to_a_sender_that_wakes_late(late_s: float) -> None:
    rate = 80e6
    sent = _paced(Pacer(rate), late_s)
    delivered = CHUNK * len(sent) / sent[-1]
    assert 0.97 * rate < delivered <= 1.01 * rate, delivered / rate  # lost time made up
    # ... and never more than the cap over a 50 ms window, give or take the bucket's bytes.
    ends = np.searchsorted(sent, sent + 0.050, side="right")
    most = int((ends - np.arange(len(sent))).max()) * CHUNK
    assert most <= rate * (0.050 + BURST_S) + CHUNK, most / (rate * 0.050)


def _least_seconds(size: int, rate: float, connections: int = 1) -> float:
    """The least time a cap of ``rate`` takes to pass ``size`` bytes over ``connections``.

    All the bytes but the bucket's burst and the chunk each connection then has booked.
    """
    return (size - rate * BURST_S - connections * CHUNK) / rate


def test_link_adds_latency_and_caps_each_connection_and_the_link(
    server: S3Server, link: WanLink, tmp_path: Path
) -> None:
    remote = server.url("wan-smoke")
    direct = store_at(server, remote, server.endpoint)
    data = np.random.default_rng(0).bytes(4 * MiB)
    source = tmp_path / "blob"
    source.write_bytes(data)
    direct.put_file(str(source), "blob")
    source.write_bytes(b"tiny")
    direct.put_file(str(source), "tiny")
    shaped = store_at(server, remote, link.endpoint)
    shaped.get_bytes("tiny")  # the connection is open: what follows pays no handshake

    def timed(store: S3Store, key: str) -> float:
        started = time.perf_counter()
        store.get_bytes(key)
        return time.perf_counter() - started

    # Lower bounds only: a busy machine lengthens a transfer, it cannot shorten one, so these
    # hold however loaded the machine is. That the caps are delivered, not undershot, is the
    # pacer's arithmetic, tested above on a virtual clock.
    assert min(timed(shaped, "tiny") for _ in range(5)) >= LATENCY  # each request waits it
    assert shaped.get_bytes("blob") == data
    # Alone, a connection moves at most CONNECTION (give or take the bucket's burst and the
    # chunk then booked).
    assert timed(shaped, "blob") >= LATENCY + _least_seconds(len(data), CONNECTION)
    # Two connections at once could each move CONNECTION; the link holds both to LINK.
    barrier = threading.Barrier(2)
    starts: list[float] = []
    ends: list[float] = []

    def read_blob() -> None:
        store = store_at(server, remote, link.endpoint)
        store.get_bytes("tiny")  # its own warm connection
        barrier.wait(30)
        starts.append(time.perf_counter())
        assert store.get_bytes("blob") == data
        ends.append(time.perf_counter())

    threads = [threading.Thread(target=read_blob) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(ends) == 2
    both = _least_seconds(2 * len(data), LINK, connections=2)
    assert max(ends) - min(starts) >= LATENCY + both
    assert both > _least_seconds(len(data), CONNECTION)  # the link's cap, not each connection's
    assert link.stats.bytes_down >= 4 * len(data)  # every byte went through the link


def test_a_shardstream_epoch_through_the_link_is_exact(
    server: S3Server, link: WanLink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", server.key), ("AWS_SECRET_ACCESS_KEY", server.secret),
                        ("AWS_EC2_METADATA_DISABLED", "true"), ("S3_ENDPOINT_URL", server.endpoint),
                        ("AWS_CONFIG_FILE", str(tmp_path / "none"))):  # fmt: skip
        monkeypatch.setenv(name, value)
    remote = server.url("wan-epoch")
    samples = 600
    with MDSWriter(
        out=remote, columns={"data": "bytes", "label": "int"}, size_limit=1 << 11
    ) as writer:
        for label in range(samples):
            writer.write({"data": label.to_bytes(4, "little") * (label % 7 + 1), "label": label})
    monkeypatch.setenv("S3_ENDPOINT_URL", link.endpoint)  # the reader is far from the bucket
    dataset = StreamingDataset(
        remote=remote, local=str(tmp_path / "cache"), batch_size=32, shuffle=True
    )
    before = link.stats.requests
    labels = []
    for sample in dataset:
        label = int(sample["label"])
        assert sample["data"] == label.to_bytes(4, "little") * (label % 7 + 1)
        labels.append(label)
    assert sorted(labels) == list(range(samples))
    assert link.stats.requests > before + 5  # the index and the shards came through the link


def _side(seconds: float) -> dict[str, object]:
    link = {"proxy_cpu_seconds": 0.1, "wall_seconds": seconds, "bytes_down": 1000}
    return {"seconds": seconds, "checks_passed": True, "link": link}


def test_the_report_rates_each_row_against_the_link_and_the_peer(tmp_path: Path) -> None:
    from benchmarks.wan_report import (
        BEGIN,
        END,
        docs_section,
        replace_section,
        table_rows,
    )

    report = {
        "settings": {"latency_ms": 30, "jitter_ms": 5, "connection_mb_per_s": 80,
                     "link_mb_per_s": 125},
        "started": "2026-11-27T21:00:00+0000", "quick": False, "command": "wan_bench.py",
        "cold_epoch": {"small-1KiB": {"params": {"samples": 10}, "limit_seconds": 1.0, "runs": {
            "workers=0": {"shardstream": _side(1.1), "reference": _side(3.0)},
            "workers=2": {"shardstream": _side(2.0), "reference": _side(3.0)},
            "workers=4": {"shardstream": _side(1.1), "litdata": _side(1.0)},
        }}},
        "first_batch": {"100 shards": {"shards": 100, "limit_seconds": 0.2, "runs": {
            "workers=0": {"shardstream": _side(0.15), "reference": _side(2.0)},
            "workers=2": {"shardstream": _side(0.15), "reference": _side(2.0),
                          "litdata": _side(0.25)},
            "workers=4": {"shardstream": _side(0.15), "reference": _side(1.0)},
        }}},
    }  # fmt: skip
    rows = table_rows(report)["rows"]
    assert [(row["met"], round(row["ratio"], 3)) for row in rows] == [
        (True, 2.727),  # 91% of the link, 2.7x the peer
        (False, 1.5),  # 50% of the link
        (False, 0.909),  # 91% of the link, but slower than litdata
        (True, 0.075),  # 0.075x the reference's time
        (False, 0.6),  # 0.6x litdata's: more than half
        (False, 0.15),  # 0.15x the reference's: more than a tenth
    ]
    section = docs_section(report)
    assert section.startswith(BEGIN)
    assert section.endswith(END)
    from benchmarks.suite import NOTES_MARKER, kept_notes

    page = replace_section(f"# Benchmarks\n\n{NOTES_MARKER}\n", section)
    assert replace_section(page, section) == page  # replaced in place, not appended again
    docs = tmp_path / "benchmarks.md"
    docs.write_text(page)
    assert section in kept_notes(docs)  # among the notes the suite keeps when it rewrites
