"""Loopback only: the address the fake servers bind, and a guard against any other address.

The guard fails a test whose code tries to connect anywhere else (a cloud endpoint, a metadata
service).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["HOST", "loopback_only"]

HOST = "127.0.0.1"


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuse (and afterwards report) every IP connection to an address other than 127.0.0.1."""
    attempts: list[Any] = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def allowed(sock: socket.socket, address: Any) -> bool:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return True
        if address[0] == HOST:
            return True
        attempts.append(address)
        return False

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        if not allowed(sock, address):
            raise ConnectionRefusedError(f"test guard: no connections outside {HOST}: {address}")
        connect(sock, address)

    def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
        return connect_ex(sock, address) if allowed(sock, address) else 111

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    yield
    assert not attempts, f"the test tried to reach {attempts}: tests touch {HOST} only"
