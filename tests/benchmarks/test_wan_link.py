"""Smoke test of the emulated WAN link (``benchmarks/wan_link.py``) in front of SeaweedFS.

The link must add its latency to each request, hold each connection and the whole link to
their caps (within the tolerance of a proxy that moves 64 KiB chunks on a busy 2-core
machine), and carry a shardstream epoch unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from benchmarks.wan_link import BURST_S, CHUNK, LinkSettings, Pacer, WanLink, run_link
from benchmarks.wan_probe import bulk_rates
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

    small = sorted(timed(shaped, "tiny") for _ in range(5))
    assert small[0] >= LATENCY, small  # every request waits its latency
    assert small[2] < LATENCY + 0.060, small  # and not much more (a busy machine's slack)
    assert min(timed(direct, "tiny") for _ in range(3)) < small[0] - 0.020

    assert shaped.get_bytes("blob") == data
    # The caps, as the client sees them after each response's first byte: a token bucket
    # makes up the proxy's late wake-ups, so each cap is delivered, not undershot.
    key = remote.split("/", 3)[3] + "/blob"
    alone = bulk_rates(link.endpoint, server.key, server.secret, server.bucket, key, len(data), 1)
    assert 0.85 * CONNECTION < alone["middle_mb_per_s"] * 1e6 < 1.1 * CONNECTION, alone
    # Two connections at once: each could move CONNECTION, the link holds both to LINK.
    both = bulk_rates(link.endpoint, server.key, server.secret, server.bucket, key, len(data), 2)
    assert 0.85 * LINK < both["middle_mb_per_s"] * 1e6 < 1.1 * LINK, both
    assert link.stats.bytes_down >= 3 * len(data)  # every byte went through the link


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
        }}},
        "first_batch": {"100 shards": {"shards": 100, "limit_seconds": 0.2, "runs": {
            "workers=0": {"shardstream": _side(0.15), "reference": _side(1.0)},
        }}},
    }  # fmt: skip
    rows = table_rows(report)["rows"]
    assert [(row["met"], round(row["ratio"], 2)) for row in rows] == [
        (True, 2.73),  # 91% of the link, 2.7x the peer
        (False, 1.5),  # 50% of the link
        (True, 0.15),  # within the link's limit, 0.15x the peer's time
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
