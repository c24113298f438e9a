"""A proxy that answers as AWS answers for a bucket in another region, in front of SeaweedFS.

AWS refuses a request signed for the wrong region: ``301 PermanentRedirect`` with no
``Location`` and the bucket's region in ``x-amz-bucket-region`` (a HEAD gets the status and the
header alone), and an unsigned HeadBucket with ``403`` and the same header: that is how a
client learns a bucket's region. :class:`RegionProxy` does the same for every request whose
signature's scope names another region than its own, and for an unsigned HEAD of the bucket;
it forwards the rest (other unsigned requests too) to the server. SeaweedFS checks a
signature with the region the request names, so a request signed for the proxy's region is
served as usual.
"""

from __future__ import annotations

import re
import socket
import time

from .faults import FaultProxy, Seen

__all__ = ["RegionProxy"]

_AGENT = re.compile(rb"(?im)^user-agent:\s*([^\r\n]*)")
_SCOPE = re.compile(rb"(?i)authorization:[^\r\n]*Credential=[^/\r\n]+/\d{8}/([a-z0-9-]+)/s3/")


class RegionProxy(FaultProxy):
    """A :class:`~tests.integration.faults.FaultProxy` whose bucket lives in ``region``.

    ``redirected`` counts the requests it refused for the wrong region; ``seen`` records every
    request, as the fault proxy's does, and ``agents`` each request's method, path and
    ``User-Agent`` (which client sent it).
    """

    def __init__(self, upstream_port: int, region: str) -> None:
        super().__init__(upstream_port)
        self.region = region
        self.redirected = 0
        self.agents: list[tuple[str, str, str]] = []

    def _serve(self, client: socket.socket) -> None:
        head = _peek_head(client)
        scope = _SCOPE.search(head)
        method, path = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
        agent = _AGENT.search(head)
        with self._lock:
            self.agents.append((method, path, agent.group(1).decode() if agent else ""))
        asks_region = scope is None and method == "HEAD" and path.strip("/").count("/") == 0
        if asks_region:  # an unsigned HeadBucket: refused, with the region, as AWS does
            with self._lock:
                self.seen.append(Seen(method, path, None))
            _drain(client, head)
            client.sendall(
                f"HTTP/1.1 403 Forbidden\r\nx-amz-bucket-region: {self.region}\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            return
        if scope is None or scope.group(1).decode() == self.region:
            super()._serve(client)
            return
        with self._lock:
            self.redirected += 1
            self.seen.append(Seen(method, path, None))
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PermanentRedirect</Code>'
            b"<Message>The bucket you are attempting to access must be addressed using the "
            b"specified endpoint.</Message></Error>"
        )
        answer = (
            f"HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: {self.region}\r\n"
            f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        _drain(client, head)
        client.sendall(answer if method == "HEAD" else answer + body)


def _peek_head(client: socket.socket) -> bytes:
    """The request's head, left in the socket for the proxy to read again."""
    seen = b""
    for _ in range(400):  # bounded: a head that never completes is forwarded as it is
        seen = client.recv(1 << 16, socket.MSG_PEEK)
        if b"\r\n\r\n" in seen or not seen:
            break
        time.sleep(0.005)
    return seen.split(b"\r\n\r\n", 1)[0]


def _drain(client: socket.socket, head: bytes) -> None:
    """Read the refused request (its head and body) so that the answer is not a reset."""
    match = re.search(rb"(?i)content-length:\s*(\d+)", head)
    remaining = len(head) + 4 + (int(match.group(1)) if match else 0)
    while remaining > 0:
        chunk = client.recv(min(remaining, 1 << 16))
        if not chunk:
            return
        remaining -= len(chunk)
