"""Fetches follow the read order: shards are asked for as the epoch first needs them, many at once.

A cold epoch over a distant store is as fast as its requests keep the link full, and its first
batches come soonest when the shards they need go out first. These tests read an HTTP remote
through a small server that records every request in the order it arrives and can hold the
shards' answers back, and check what cannot flake: the order of the requests, how many are in
flight at once, and that each shard is fetched once.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.dataset.prepared import MAX_FETCH_THREADS
from shardstream.pipeline.policy import ReadPolicy

SAMPLES = 1200
PER_SHARD = 10  # ten samples of about 125 bytes fill a shard of the size limit below
SHARDS = SAMPLES // PER_SHARD
BATCH = 10
_SHARD = re.compile(r"shard\.(\d+)\.mds$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class RecordingServer:
    """Serves a folder on 127.0.0.1; records each request; holds shard answers while gated."""

    def __init__(self, root: str) -> None:
        # (method, path, whether ranged), in order of arrival
        self.requests: list[tuple[str, str, bool]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = 0  # shard requests held at the gate now
        self.free: set[int] = set()  # shards whose answers never wait at the gate
        self.changed = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, *, body: bool) -> None:
                path = unquote(urlsplit(self.path).path).lstrip("/")
                with owner.changed:
                    owner.requests.append((self.command, path, "Range" in self.headers))
                shard = _SHARD.search(path)
                if shard is not None and int(shard.group(1)) not in owner.free:
                    owner.hold()
                file = os.path.join(root, *path.split("/"))
                if ".." in path.split("/") or not os.path.isfile(file):
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                with open(file, "rb") as handle:
                    data = handle.read()
                match = _RANGE.fullmatch(self.headers.get("Range", ""))
                status = HTTPStatus.OK
                if match:
                    start = int(match.group(1))
                    last = min(int(match.group(2) or len(data) - 1), len(data) - 1)
                    self.send_response(HTTPStatus.PARTIAL_CONTENT)
                    self.send_header("Content-Range", f"bytes {start}-{last}/{len(data)}")
                    data, status = data[start : last + 1], HTTPStatus.PARTIAL_CONTENT
                else:
                    self.send_response(status)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            # Room for every connection a reader opens at once: a connection beyond the
            # backlog is dropped, its client's SYN sent again a second later, out of order.
            request_queue_size = 256

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def hold(self) -> None:
        """Wait at the gate, counted in :attr:`waiting` meanwhile."""
        with self.changed:
            self.waiting += 1
            self.changed.notify_all()
        try:
            self.gate.wait(60)
        finally:
            with self.changed:
                self.waiting -= 1

    def shard_gets(self) -> list[int]:
        """The shard numbers of the GETs of whole shards, in the order they arrived.

        A cold first batch read by range first (``test_first_batch_ranges.py``, on stores
        that tie a range to a version) would not be counted.
        """
        with self.changed:
            found = [
                _SHARD.search(path)
                for method, path, ranged in self.requests
                if method == "GET" and not ranged
            ]
        return [int(match.group(1)) for match in found if match is not None]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingServer]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # urllib would send requests through it
    root = tmp_path / "served"
    with MDSWriter(out=str(root / "data"), columns={"id": "int", "pad": "bytes"},
                   size_limit=1400) as writer:  # fmt: skip
        for i in range(SAMPLES):
            writer.write({"id": i, "pad": bytes([i % 251]) * 100})
    assert len(list((root / "data").glob("*.mds"))) == SHARDS
    with RecordingServer(str(root)) as running:
        yield running


def _epoch(server: RecordingServer, cache: Path, policy: ReadPolicy | None = None) -> list[int]:
    dataset = StreamingDataset(
        remote=f"{server.url}/data", local=str(cache), batch_size=BATCH, shuffle=True,
        shuffle_seed=7, predownload=SAMPLES, read_policy=policy,
    )  # fmt: skip
    return [int(sample["id"]) for sample in dataset]


def _first_need(ids: list[int]) -> list[int]:
    """Each shard once, in the order the epoch first reads a sample of it."""
    return list(dict.fromkeys(i // PER_SHARD for i in ids))


def test_shards_are_requested_in_the_order_the_epoch_first_needs_them(server, tmp_path):
    ids = _epoch(server, tmp_path / "cache", ReadPolicy(fetch_threads=1))

    assert sorted(ids) == list(range(SAMPLES))
    # A plain HTTP server cannot tie a range to a version (no If-Match), so even the first
    # batch's shards are fetched whole: every shard, as the epoch first needs it.
    order = _first_need(ids)
    assert order != sorted(order)  # shuffled: the order is the plan's, not the files'
    assert server.shard_gets() == order  # one thread: exactly the plan's order, each once
    assert not [path for method, path, ranged in server.requests if method == "GET" and ranged]
    policy = ReadPolicy(fetch_threads=1, first_batch_ranges=False)
    whole = _epoch(server, tmp_path / "whole", policy)
    assert whole == ids
    assert server.shard_gets()[len(order) :] == _first_need(ids)  # without ranges: every shard


@pytest.mark.parametrize("threads", [4, 16])
def test_parallel_fetches_stray_from_the_plan_order_by_about_the_threads_at_most(
    server, tmp_path, threads
):
    ids = _epoch(server, tmp_path / "cache", ReadPolicy(fetch_threads=threads))

    order = _first_need(ids)  # no ranges over plain HTTP: the first batch's shards too
    gets = server.shard_gets()
    assert sorted(gets) == sorted(order)  # each shard the rest needs fetched once
    rank = {shard: k for k, shard in enumerate(order)}
    displaced = [abs(rank[shard] - k) for k, shard in enumerate(gets)]
    # Threads take the tasks in the plan's order; which of those running sends first is the
    # scheduler's choice, so a request strays from its place by about the threads at most.
    assert max(displaced) < 2 * threads
    assert sum(displaced) / len(displaced) < threads / 2


def test_the_look_ahead_fills_every_fetch_thread_once_the_first_batch_is_out(server, tmp_path):
    # The first batch's shards are fetched alone (time to first batch); then every shard the
    # look-ahead may fetch goes out at once, up to the reader's fetch threads. Tiny shards share
    # a download slot eight to one (DownloadOptions.slot_share): with the default eight slots,
    # every fetch thread has a request in flight, none waits for a slot.
    expected = _epoch(server, tmp_path / "first")  # same seed: the order to expect
    first_shards = {i // PER_SHARD for i in expected[:BATCH]}
    server.free = first_shards
    server.gate.clear()
    ids: list[int] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            dataset = StreamingDataset(
                remote=f"{server.url}/data", local=str(tmp_path / "cache"), batch_size=BATCH,
                shuffle=True, shuffle_seed=7, predownload=SAMPLES,
            )  # fmt: skip
            for sample in dataset:  # one by one: the test reads what came out so far
                ids.append(int(sample["id"]))  # noqa: PERF401
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failed.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with server.changed:  # a generous bound: the count is what is asserted, not the time
            filled = server.changed.wait_for(lambda: server.waiting >= MAX_FETCH_THREADS, 60)
            held = server.waiting
        assert filled, f"only {held} shard requests in flight at once"
        so_far = list(ids)  # the look-ahead starts once the first batch has been taken
        assert so_far[:BATCH] == expected[:BATCH]
        assert {i // PER_SHARD for i in so_far} <= first_shards  # nothing held came out
    finally:
        server.gate.set()
        reader.join(120)
    assert not failed, failed
    assert ids == expected  # the fetches' timing changes nothing in the epoch
    assert sorted(server.shard_gets()) == sorted([*range(SHARDS), *range(SHARDS)])
