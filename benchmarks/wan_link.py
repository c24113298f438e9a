"""An emulated WAN link: a TCP proxy on 127.0.0.1 that adds latency and caps bandwidth.

The kernel of the project's machines has no ``netem`` (``tc qdisc ... netem`` fails), so the
link is a userspace proxy of our own, in front of one upstream port (SeaweedFS's S3 port in the
benchmarks). It shapes traffic three ways, each configurable and each off at ``0``:

* **first-byte latency per request** (default 30 ms, +- 5 ms of uniform jitter): each new burst
  of client bytes, i.e. the first chunk of a connection and every chunk that follows bytes from
  the server, is held that long before it goes upstream, so the first byte of each response on
  a keep-alive HTTP connection comes one "round trip" later. A new connection also waits that
  long before its upstream connection opens (TCP's handshake; TLS is not emulated), so the
  first request of a connection costs two round trips, as over a real network without TLS;
* **a cap per connection** (default 80 MB/s) in each direction;
* **a cap on the whole link** (default 1 Gbit/s = 125 MB/s) in each direction, shared by every
  connection in arrival order (a virtual clock: a chunk waits until the link has sent the bytes
  queued before it).

Limits, measured on the project's 2-core machine (docs/benchmarks.md, "Over an emulated WAN
link"): the proxy is one Python thread of asyncio; it moves chunks of at most 64 KiB, so a cap
is met on average over a few milliseconds, never per packet; a cap is a token bucket of 5 ms of
its rate (late wake-ups of the proxy are made up within it, and after an idle spell that much
passes at once); latency is added to requests only, not to each TCP segment, and there is no loss,
reordering or TCP slow start. Its own ceiling is its CPU: with no shaping it moves a few hundred
MB/s on the machine it shares with the server and the client, so the benchmarks keep the caps
well below that and record the proxy's CPU seconds beside every row.

Run it alone (it stops by itself after ``--lifetime`` seconds, or on SIGINT / SIGTERM)::

    .venv/bin/python benchmarks/wan_link.py --upstream 127.0.0.1:8333 --port 0 \
        --latency-ms 30 --connection-mbps 80 --link-mbps 125 --stats stats.json

It prints ``listening on 127.0.0.1:PORT`` once it accepts connections, and writes its counters
(bytes each way, connections, requests, CPU seconds) to ``--stats`` when it stops, and at each
SIGUSR1. In Python,
:func:`run_link` runs the same proxy in a thread of the calling process for a ``with`` block.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LinkSettings", "LinkStats", "Pacer", "WanLink", "run_link"]

HOST = "127.0.0.1"  # loopback only: the proxy listens here and connects nowhere else
CHUNK = 64 << 10
BURST_S = 0.005  # a cap's bucket: lateness up to 5 ms of its rate is made up, no more
MB = 1e6


@dataclass(frozen=True)
class LinkSettings:
    """How the link shapes traffic; every value ``0`` turns its shaping off.

    Attributes:
        latency_s: First-byte latency added to each request (and to each new connection).
        jitter_s: The latency varies uniformly by +- this much.
        connection_rate: Bytes/s a connection moves at most, each direction.
        link_rate: Bytes/s the whole link moves at most, each direction.
        seed: Seed of the jitter (the same run of requests gets the same delays).
    """

    latency_s: float = 0.030
    jitter_s: float = 0.005
    connection_rate: float = 80 * MB
    link_rate: float = 125 * MB
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("latency_s", "jitter_s", "connection_rate", "link_rate"):
            if getattr(self, name) < 0:
                raise ValueError(f"LinkSettings.{name} must be >= 0, not {getattr(self, name)}")
        if self.jitter_s > self.latency_s:
            raise ValueError("LinkSettings.jitter_s must not exceed latency_s")

    @classmethod
    def unshaped(cls) -> LinkSettings:
        """No latency and no caps: the proxy's own overhead alone."""
        return cls(latency_s=0.0, jitter_s=0.0, connection_rate=0.0, link_rate=0.0)

    def describe(self) -> str:
        """One line for reports, e.g. ``30+-5 ms, 80 MB/s a connection, 125 MB/s the link``."""

        def rate(value: float) -> str:
            return f"{value / MB:g} MB/s" if value else "no cap"

        return (
            f"{self.latency_s * 1e3:g}+-{self.jitter_s * 1e3:g} ms first byte, "
            f"{rate(self.connection_rate)} a connection, {rate(self.link_rate)} the link"
        )


@dataclass
class LinkStats:
    """What the link moved, for reports; CPU seconds are the proxy's own process's."""

    connections: int = 0
    requests: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The counters as a JSON object."""
        return asdict(self)


class Pacer:
    """A rate cap as a token bucket of ``burst_s`` of the rate (a virtual clock).

    ``delay(n)`` books ``n`` bytes and says how long the caller waits before sending them: a
    chunk leaves when the bytes booked before it have gone at ``rate``. A caller that comes
    back late (a sleep that overshot, a slow read) is credited the lost time up to
    ``burst_s``, so the cap is delivered, not undershot; after an idle spell the same credit
    lets ``burst_s`` of the rate pass at once. Over any window of ``w`` seconds at most
    ``rate * (w + burst_s)`` bytes leave, plus the chunk then booked. ``rate <= 0``: no cap.
    """

    def __init__(self, rate: float, burst_s: float = BURST_S) -> None:
        self.rate = rate
        self.burst_s = burst_s
        self._free_at = 0.0

    def delay(self, size: int, now: float) -> float:
        """Book ``size`` bytes at time ``now``; the seconds to wait before sending them."""
        if self.rate <= 0:
            return 0.0
        self._free_at = max(self._free_at, now - self.burst_s) + size / self.rate
        return max(0.0, self._free_at - now)


class _Connection:
    """One client connection and its upstream: two pumps, shaped."""

    def __init__(self, link: WanLink) -> None:
        self.link = link
        settings = link.settings
        self.pacers = (Pacer(settings.connection_rate), Pacer(settings.connection_rate))
        self.answered = True  # the server spoke since the client's last bytes: next is new

    async def run(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        link = self.link
        _no_delay(client_w)
        await link.wait_latency()  # TCP's handshake over the emulated network
        try:
            server_r, server_w = await asyncio.open_connection(*link.upstream)
        except OSError as exc:
            link.stats.errors.append(f"upstream {link.upstream}: {exc}")
            client_w.close()
            return
        _no_delay(server_w)
        up = asyncio.ensure_future(self._pump(client_r, server_w, 0))
        down = asyncio.ensure_future(self._pump(server_r, client_w, 1))
        try:  # each pump ends at its side's end of stream, passed on to the other side
            await asyncio.gather(up, down)
        finally:
            for task in (up, down):
                task.cancel()
            for writer in (client_w, server_w):
                writer.close()
            with contextlib.suppress(BaseException):
                await asyncio.gather(up, down, return_exceptions=True)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: int
    ) -> None:
        link, pacer, shared = self.link, self.pacers[direction], self.link.pacers[direction]
        loop = asyncio.get_running_loop()
        stats = link.stats
        while True:
            try:
                data = await reader.read(CHUNK)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            if direction == 0:
                if self.answered:  # a new request: its response starts one round trip later
                    self.answered = False
                    stats.requests += 1
                    await link.wait_latency()
                stats.bytes_up += len(data)
            else:
                self.answered = True
                stats.bytes_down += len(data)
            # One sleep for both caps: the link's slot is booked for when the connection's
            # cap lets the chunk go, so a late wake-up is paid once, not twice.
            now = loop.time()
            wait = pacer.delay(len(data), now)
            wait += shared.delay(len(data), now + wait)
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                return


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class WanLink:
    """The proxy: listens on ``127.0.0.1:port`` (0: any free port), forwards to ``upstream``.

    Args:
        upstream: ``(host, port)`` of the server; the host must be a loopback address.
        settings: The shaping.
        port: The port to listen on (0: a free one, see :attr:`port` once started).
        lifetime_s: The proxy stops by itself this many seconds after it starts.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        settings: LinkSettings | None = None,
        port: int = 0,
        lifetime_s: float = 3600.0,
    ) -> None:
        if upstream[0] not in (HOST, "localhost"):
            raise ValueError(f"upstream {upstream[0]!r}: the link forwards to 127.0.0.1 only")
        self.upstream = (HOST, int(upstream[1]))
        self.settings = settings or LinkSettings()
        self.port = port
        self.lifetime_s = lifetime_s
        self.stats = LinkStats()
        self.pacers = (Pacer(self.settings.link_rate), Pacer(self.settings.link_rate))
        self._random = random.Random(self.settings.seed)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``, for a client's ``endpoint_url``."""
        return f"http://{HOST}:{self.port}"

    async def wait_latency(self) -> None:
        """Sleep one first-byte latency, jittered."""
        settings = self.settings
        if settings.latency_s <= 0:
            return
        jitter = self._random.uniform(-settings.jitter_s, settings.jitter_s)
        await asyncio.sleep(settings.latency_s + jitter)

    async def serve(self, started: threading.Event | None = None) -> LinkStats:
        """Serve until :meth:`stop` or the lifetime ends; the counters."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        cpu, wall = time.process_time(), time.monotonic()
        tasks: set[asyncio.Task[None]] = set()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.stats.connections += 1
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                await _Connection(self).run(reader, writer)
            except asyncio.CancelledError:  # the link stops: its connections end with it
                pass
            finally:
                tasks.discard(task)

        server = await asyncio.start_server(accept, HOST, self.port, limit=4 * CHUNK)
        self.port = server.sockets[0].getsockname()[1]
        if started is not None:
            started.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=self.lifetime_s)
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.stats.wall_seconds = time.monotonic() - wall
        self.stats.cpu_seconds = time.process_time() - cpu
        return self.stats

    def stop(self) -> None:
        """Stop serving (thread-safe)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


@contextlib.contextmanager
def run_link(
    upstream: tuple[str, int], settings: LinkSettings | None = None, lifetime_s: float = 600.0
) -> Iterator[WanLink]:
    """The link in a daemon thread of this process for the ``with`` block (tests, drivers).

    Its CPU seconds then count the whole process: run it with :func:`main` in a process of
    its own to measure the proxy alone.
    """
    link = WanLink(upstream, settings, lifetime_s=lifetime_s)
    started = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(link.serve(started)), name="wan-link", daemon=True
    )
    thread.start()
    if not started.wait(10.0):
        raise RuntimeError("the WAN link did not start within 10 s")
    try:
        yield link
    finally:
        link.stop()
        thread.join(10.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="127.0.0.1:PORT of the server")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--connection-mbps", type=float, default=80.0, help="MB/s (0: no cap)")
    parser.add_argument("--link-mbps", type=float, default=125.0, help="MB/s (0: no cap)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lifetime", type=float, default=3600.0, help="stop after S seconds")
    parser.add_argument("--stats", help="write the counters here as JSON on exit")
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    settings = LinkSettings(
        latency_s=args.latency_ms / 1e3,
        jitter_s=args.jitter_ms / 1e3,
        connection_rate=args.connection_mbps * MB,
        link_rate=args.link_mbps * MB,
        seed=args.seed,
    )
    link = WanLink((host, int(port)), settings, port=args.port, lifetime_s=args.lifetime)

    cpu_started = time.process_time()

    def dump() -> None:
        if args.stats:  # written whole, then renamed: a reader never sees half a file
            counters = {**link.stats.to_json(), "cpu_seconds": time.process_time() - cpu_started}
            with open(args.stats + ".tmp", "w", encoding="utf-8") as handle:
                json.dump({"settings": asdict(settings), **counters}, handle, indent=1)
            os.replace(args.stats + ".tmp", args.stats)

    async def serve() -> LinkStats:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, link.stop)
        loop.add_signal_handler(signal.SIGUSR1, dump)  # the counters so far, for a driver
        started = threading.Event()
        task = asyncio.ensure_future(link.serve(started))
        while not started.is_set() and not task.done():
            await asyncio.sleep(0.01)
        print(f"listening on {HOST}:{link.port}", flush=True)
        return await task

    asyncio.run(serve())
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
