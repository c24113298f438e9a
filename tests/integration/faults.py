"""A fault-injecting HTTP proxy on 127.0.0.1, for any HTTP server (SeaweedFS's S3, http.server).

Every request is recorded; the next requests matching a rule get its fault instead of (or on top
of) the real answer::

    with FaultProxy(upstream_port) as proxy:
        proxy.inject("status503", count=2, method="GET", path_contains="shard.00000.mds")
        ...                                  # point the client at proxy.endpoint
        assert proxy.count("GET", "shard.00000.mds") == 3

Faults: ``status500`` / ``status503`` (an S3-style XML error), ``reset`` (a TCP reset before any
answer), ``stall`` (hold the connection silent for ``stall_seconds``), ``truncate`` (the real
answer's head and half of its body, then the connection closes), ``trickle`` (the real answer,
its body a byte every ``trickle_seconds``), ``html200`` (``200 OK`` with a gateway's HTML page
instead of the object), ``short200`` (``200 OK`` with the first half of the real body, its
``Content-Length`` saying so: a short body no client can tell from its headers), ``hold``
(the real answer, once :meth:`FaultProxy.release` is called; :attr:`FaultProxy.holding` counts
the requests held now). A rule may match ranged requests only (``Range`` header), or only
requests for whole objects (``ranged=``).

Each client connection carries one request: the proxy asks the server to close, and says so to
the client, so no keep-alive connection outlives a fault.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from dataclasses import dataclass
from typing import Literal

__all__ = ["HOST", "Fault", "FaultProxy", "Seen"]

HOST = "127.0.0.1"
Fault = Literal[
    "status500", "status503", "reset", "stall", "truncate", "trickle", "html200", "short200", "hold"
]
_REASONS = {
    500: ("Internal Server Error", "InternalError"),
    503: ("Service Unavailable", "SlowDown"),
}
_MAX_HEAD = 64 << 10


@dataclass(frozen=True)
class Seen:
    """One request the proxy received, and the fault it got (``None``: passed through)."""

    method: str
    path: str
    fault: Fault | None
    ranged: bool = False  # the request had a Range header


@dataclass
class _Rule:
    fault: Fault
    remaining: int
    method: str | None
    path_contains: str | None
    stall_seconds: float
    trickle_seconds: float
    ranged: bool | None = None

    def matches(self, method: str, path: str, ranged: bool = False) -> bool:
        if self.remaining <= 0:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.ranged is not None and ranged != self.ranged:
            return False
        return self.path_contains is None or self.path_contains in path


class FaultProxy:
    """An HTTP/1.1 proxy from ``127.0.0.1:<port>`` to ``127.0.0.1:<upstream_port>``.

    Args:
        upstream_port: The server's port on 127.0.0.1.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = (HOST, upstream_port)
        self.seen: list[Seen] = []
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._released = threading.Event()
        #: Requests held by a ``hold`` rule now; notified through :attr:`changed`.
        self.holding = 0
        self.changed = threading.Condition()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        self._server = socketserver.ThreadingTCPServer((HOST, 0), Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: where clients connect."""
        return f"http://{HOST}:{self._server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()  # ends stalls
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def inject(
        self,
        fault: Fault,
        count: int = 1,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        stall_seconds: float = 30.0,
        trickle_seconds: float = 0.2,
        ranged: bool | None = None,
    ) -> None:
        """Give the next ``count`` requests that match ``fault`` (rules apply in order).

        ``ranged``: match only requests with a ``Range`` header (``True``) or without one.
        """
        with self._lock:
            rule = _Rule(
                fault, count, method, path_contains, stall_seconds, trickle_seconds, ranged
            )
            self._rules.append(rule)

    def release(self) -> None:
        """Let every request held by a ``hold`` rule go on, now and from now on."""
        self._released.set()

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        """How many requests matched ``method`` and ``path_contains`` so far."""
        with self._lock:
            return sum(
                1
                for seen in self.seen
                if (method is None or seen.method == method)
                and (path_contains is None or path_contains in seen.path)
            )

    def clear(self) -> None:
        """Drop every rule not used up yet: the server recovers (stalls under way go on)."""
        with self._lock:
            self._rules.clear()

    def reset_counts(self) -> None:
        """Forget the requests seen so far (the rules stay)."""
        with self._lock:
            self.seen.clear()

    # --- one connection -------------------------------------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        reader = _Reader(client)
        try:
            head = reader.head()
        except OSError:
            return
        if head is None:
            return
        request_line, headers = _parse_head(head)
        method, path = request_line.split(" ")[:2]
        if headers.get("expect", "").lower() == "100-continue":  # the client waits for a go
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = reader.body(headers)
        ranged = "range" in headers
        with self._lock:
            rule = next((r for r in self._rules if r.matches(method, path, ranged)), None)
            if rule is not None:
                rule.remaining -= 1
            self.seen.append(Seen(method, path, rule.fault if rule else None, ranged))
        if rule is not None and rule.fault == "hold":
            with self.changed:
                self.holding += 1
                self.changed.notify_all()
            self._released.wait(120)
            with self.changed:
                self.holding -= 1
        if rule is not None and rule.fault == "reset":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return
        if rule is not None and rule.fault == "stall":
            self._stop.wait(rule.stall_seconds)
            return
        if rule is not None and rule.fault in ("status500", "status503"):
            client.sendall(_error_response(500 if rule.fault == "status500" else 503, method))
            return
        if rule is not None and rule.fault == "html200":
            client.sendall(_gateway_page(method))
            return
        response = self._forward(head, body)
        split = response.index(b"\r\n\r\n") + 4
        if rule is not None and rule.fault == "truncate":
            client.sendall(response[: split + (len(response) - split) // 2])
            return
        if rule is not None and rule.fault == "short200":
            client.sendall(_short_ok(response[:split], response[split:]))
            return
        if rule is not None and rule.fault == "trickle":
            client.sendall(response[:split])
            for offset in range(split, len(response)):
                if self._stop.wait(rule.trickle_seconds):
                    return
                try:
                    client.sendall(response[offset : offset + 1])
                except OSError:  # the client gave up on it
                    return
            return
        client.sendall(response)

    def _forward(self, head: bytes, body: bytes) -> bytes:
        """Send the request upstream (asking it to close) and return its whole answer."""
        lines = head.split(b"\r\n")
        kept = [
            line
            for line in lines[1:]
            if line and not _is_header(line, b"connection") and not _is_header(line, b"expect")
        ]
        request = b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]) + body
        with socket.create_connection(self.upstream, timeout=60) as upstream:
            upstream.sendall(request)
            chunks = []
            while chunk := upstream.recv(1 << 20):
                chunks.append(chunk)
        response = b"".join(chunks)
        split = response.index(b"\r\n\r\n")
        response_lines = response[:split].split(b"\r\n")
        kept = [line for line in response_lines if not _is_header(line, b"connection")]
        return b"\r\n".join([*kept, b"Connection: close"]) + response[split:]


def _is_header(line: bytes, name: bytes) -> bool:
    return line.split(b":", 1)[0].strip().lower() == name


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _error_response(status: int, method: str) -> bytes:
    reason, code = _REASONS[status]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected by the test proxy</Message></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head if method == "HEAD" else head + body


def _gateway_page(method: str) -> bytes:
    """``200 OK`` with an HTML page, as a captive portal or a misrouted gateway answers."""
    body = b"<!DOCTYPE html><html><body><h1>Gateway</h1><p>Please sign in.</p></body></html>"
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head if method == "HEAD" else head + body


def _short_ok(head: bytes, body: bytes) -> bytes:
    """The answer as ``200 OK`` with half its body, its headers made to agree with that."""
    short = body[: len(body) // 2]
    lines = head.rstrip(b"\r\n").split(b"\r\n")
    kept = [
        line
        for line in lines[1:]
        if not _is_header(line, b"content-length")
        and not _is_header(line, b"content-range")
        and not _is_header(line, b"transfer-encoding")
    ]
    status = b"HTTP/1.1 200 OK"
    return b"\r\n".join([status, *kept, f"Content-Length: {len(short)}".encode(), b"", b""]) + short


class _Reader:
    """Reads one HTTP request (head, then a Content-Length or chunked body) from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 16)
        self.buffer += chunk
        return bool(chunk)

    def head(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > _MAX_HEAD or not self._fill():
                return None
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        return head

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise ConnectionError("the client closed mid-body")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError("the client closed mid-body")
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line + b"\r\n"

    def body(self, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                line = self._line()
                size = int(line.split(b";")[0], 16)
                if size == 0:  # the last chunk, then trailers up to an empty line
                    parts.append(line)
                    while (trailer := self._line()) != b"\r\n":
                        parts.append(trailer)
                    parts.append(b"\r\n")
                    return b"".join(parts)
                parts.append(line + self._exactly(size + 2))
        return self._exactly(int(headers.get("content-length", "0") or 0))
