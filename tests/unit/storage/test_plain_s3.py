"""The standard library's S3 client: when it may serve a store, and its connections' faults.

Against small servers of raw sockets on 127.0.0.1 (SeaweedFS runs the contract in
``tests/integration``): one that closes each kept-alive connection after its answer, and one
that never answers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shardstream.errors import StorageError
from shardstream.storage import S3Store
from shardstream.storage.plain_s3 import PlainS3Client, unsupported

_ANSWER = (
    b'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: "v1"\r\n'
    b"Content-Type: application/octet-stream\r\n\r\nhello"
)


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy",
                 "all_proxy", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_S3", "AWS_CREDENTIAL_EXPIRATION"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-of-the-test")


def test_static_keys_or_unsigned_are_served_and_the_rest_goes_to_botocore(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = "http://127.0.0.1:9"
    assert unsupported(S3Store("s3://b/p", endpoint_url=endpoint)) is None  # AWS_* keys
    keyed = S3Store("s3://b", endpoint_url=endpoint, key="k", secret="s")  # noqa: S106
    assert unsupported(keyed) is None
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    assert unsupported(S3Store("s3://b", endpoint_url=endpoint, anon=True)) is None
    lacking = unsupported(S3Store("s3://b", endpoint_url=endpoint))
    assert lacking is not None
    assert "credentials" in lacking
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_PROFILE", "someone")  # a profile may say more than the variables
    assert unsupported(S3Store("s3://b", endpoint_url=endpoint)) is not None
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:3128")
    lacking = unsupported(keyed)
    assert lacking is not None
    assert "proxy" in lacking


@contextmanager
def _server(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on 127.0.0.1 running ``handle(connection)`` for each connection, its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            threading.Thread(target=handle, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        for connection in accepted:
            connection.close()


def _read_request(connection: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = connection.recv(65536)
        if not chunk:
            return head
        head += chunk
    return head


def test_a_kept_connection_the_server_closed_is_replaced_once() -> None:
    """Each answer says keep-alive, then the server hangs up: the next read reconnects."""
    requests: list[bytes] = []

    def answer_once(connection: socket.socket) -> None:
        requests.append(_read_request(connection))
        connection.sendall(_ANSWER)
        connection.close()

    with _server(answer_once) as endpoint:
        client = PlainS3Client.of_s3_store(S3Store("s3://bucket/p", endpoint_url=endpoint))
        for _ in range(3):
            assert client.get_bytes_info("k.bin")[0] == b"hello"
    assert len(requests) == 3
    assert all(r.startswith(b"GET /bucket/p/k.bin HTTP/1.1") for r in requests)
    assert all(b"x-amz-date" in r and b"AWS4-HMAC-SHA256" in r for r in requests)


def test_a_server_that_never_answers_is_given_up_at_the_read_timeout() -> None:
    held = threading.Event()

    def never(connection: socket.socket) -> None:
        _read_request(connection)
        held.wait(30)

    with _server(never) as endpoint:
        store = S3Store("s3://bucket", endpoint_url=endpoint, read_timeout=0.5)
        client = PlainS3Client.of_s3_store(store)
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"s3://bucket/k\.bin") as caught:
            client.get_bytes("k.bin")
        assert time.monotonic() - started < 10  # the timeout, not the server's 30 s
        held.set()
    assert "secret-of-the-test" not in str(caught.value)


def test_an_error_answer_names_the_code_and_never_the_secret() -> None:
    body = (b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>")  # fmt: skip

    def refuse(connection: socket.socket) -> None:
        _read_request(connection)
        connection.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body))  # fmt: skip
        connection.close()

    with _server(refuse) as endpoint:
        secret = "s3cr3t-key-value"  # noqa: S105 (a test's, never to be shown)
        store = S3Store("s3://bucket", endpoint_url=endpoint, key="AKID", secret=secret)
        client = PlainS3Client.of_s3_store(store)
        with pytest.raises(StorageError, match=r"503 SlowDown.*reduce") as caught:
            client.get_range("k.bin", 0, 3)
    assert secret not in str(caught.value)
