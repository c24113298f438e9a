"""A small Databricks Files API server on 127.0.0.1 for the tests, and its fixtures.

No emulator of the Databricks Files API exists, so this module implements the documented calls
that :class:`shardstream.storage.DatabricksVolumeStore` makes, holding files in memory under
Unity Catalog volume paths (``/Volumes/<catalog>/<schema>/<volume>/...``):

- ``PUT /api/2.0/fs/files{path}?overwrite=true``: upload raw bytes (``overwrite=false`` and an
  existing file: 409 ``ALREADY_EXISTS``). This fake also insists that the parent folder exists
  (404 otherwise), which is stricter than needed and exercises the store's folder creation;
- ``GET /api/2.0/fs/files{path}``: download, with ``Range: bytes=a-b`` answered by 206 and
  ``Content-Range``, or 416 when unsatisfiable;
- ``HEAD /api/2.0/fs/files{path}``: ``Content-Length``, ``Content-Type`` and ``Last-Modified``,
  no body;
- ``DELETE /api/2.0/fs/files{path}``: delete a file (204), 404 ``NOT_FOUND`` when missing;
- ``PUT /api/2.0/fs/directories{path}``: create a folder and its parents (idempotent);
- ``GET /api/2.0/fs/directories{path}?page_size=&page_token=``: entries (``path``,
  ``is_directory``, ``file_size``, ``last_modified``, ``name``) in name order, at most
  ``page_size`` (3 here) per page, with an opaque ``next_page_token`` while more remain; 404 for
  a missing folder.

Every request needs ``Authorization: Bearer <token>``. A missing or unknown token is answered
401 ``UNAUTHENTICATED``; the read-only token may read but a write is 403 ``PERMISSION_DENIED``,
as the service answers. Errors carry the documented ``{"error_code", "message"}`` body.
"""

from __future__ import annotations

import base64
import email.utils
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from shardstream.storage.base import ObjectStore

from .loopback import HOST

__all__ = [
    "DatabricksWorkspace",
    "FakeDatabricks",
    "databricks_env",
    "databricks_workspace",
    "store_factory_databricks",
]

VOLUME = "/Volumes/main/default/shardstream_test"
PAGE_SIZE = 3
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass
class FakeDatabricks:
    """The in-memory workspace; ``start()`` serves it on 127.0.0.1 at a free port."""

    token: str
    read_only_token: str
    volumes: tuple[str, ...] = (VOLUME,)
    page_size: int = PAGE_SIZE
    files: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def __post_init__(self) -> None:
        self.folders.update(self.volumes)

    @property
    def host(self) -> str:
        assert self._server is not None
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self) -> None:
        service = self

        class Handler(_Handler):
            fake = service

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def volume_of(self, path: str) -> str | None:
        return next((v for v in self.volumes if path == v or path.startswith(v + "/")), None)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeDatabricks
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        fake = self.fake
        body = b""
        if method == "PUT":
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        fake.requests.append((method, self.path, dict(self.headers.items())))
        authorization = self.headers.get("Authorization", "")
        token = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else None
        if token not in (fake.token, fake.read_only_token):
            self._error(401, "UNAUTHENTICATED", "Invalid access token.")
            return
        if method in ("PUT", "DELETE") and token != fake.token:
            self._error(403, "PERMISSION_DENIED", "User does not have WRITE VOLUME on Volume.")
            return
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        for api in ("files", "directories"):
            base = f"/api/2.0/fs/{api}/"
            if parts.path.startswith(base):
                path = "/" + unquote(parts.path[len(base) :]).rstrip("/")
                break
        else:
            self._error(404, "ENDPOINT_NOT_FOUND", f"No API found for '{method} {parts.path}'")
            return
        if fake.volume_of(path) is None:
            self._error(404, "NOT_FOUND", f"The volume of '{path}' does not exist.")
            return
        with fake.lock:
            if api == "directories" and method == "PUT":
                self._make_folders(path)
            elif api == "directories" and method == "GET":
                self._list(path, query)
            elif api == "files" and method == "PUT":
                self._upload(path, body, query)
            elif api == "files" and method == "DELETE" and path in fake.files:
                del fake.files[path]
                self._reply(204, b"", {})
            elif api == "files" and path in fake.files:
                self._download(method, *fake.files[path])
            elif api == "files":
                self._error(404, "NOT_FOUND", f"The file '{path}' does not exist.")
            else:
                self._error(405, "BAD_REQUEST", f"{method} is not supported on directories")

    def _make_folders(self, path: str) -> None:
        if path in self.fake.files:
            self._error(409, "ALREADY_EXISTS", f"A file exists at '{path}'.")
            return
        volume = self.fake.volume_of(path)
        assert volume is not None
        while path != volume:
            self.fake.folders.add(path)
            path = path.rsplit("/", 1)[0]
        self._reply(200, b"{}", {"Content-Type": "application/json"})

    def _upload(self, path: str, body: bytes, query: dict[str, list[str]]) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent not in self.fake.folders:
            self._error(404, "NOT_FOUND", f"The parent directory '{parent}' does not exist.")
        elif path in self.fake.folders:
            self._error(409, "ALREADY_EXISTS", f"A directory exists at '{path}'.")
        elif path in self.fake.files and query.get("overwrite", ["true"])[0] == "false":
            self._error(409, "ALREADY_EXISTS", f"The file '{path}' already exists.")
        else:
            self.fake.files[path] = (body, time.time())
            self._reply(204, b"", {})

    def _download(self, method: str, data: bytes, modified: float) -> None:
        headers = {
            "Content-Type": "application/octet-stream",
            "Last-Modified": email.utils.formatdate(modified, usegmt=True),
            "Accept-Ranges": "bytes",
        }
        wanted = self.headers.get("Range")
        if wanted is None or method == "HEAD":
            self._reply(200, data, headers, send_body=method == "GET")
            return
        match = _RANGE.fullmatch(wanted.strip())
        if match is None or int(match.group(1)) >= len(data):
            headers["Content-Range"] = f"bytes */{len(data)}"
            self._error(416, "INVALID_PARAMETER_VALUE", "Range not satisfiable.", headers)
            return
        first = int(match.group(1))
        last = min(int(match.group(2)) if match.group(2) else len(data) - 1, len(data) - 1)
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        self._reply(206, data[first : last + 1], headers)

    def _list(self, path: str, query: dict[str, list[str]]) -> None:
        fake = self.fake
        if path not in fake.folders:
            self._error(404, "NOT_FOUND", f"The directory '{path}' does not exist.")
            return
        children = {p for p in fake.folders | fake.files.keys() if p.rsplit("/", 1)[0] == path}
        names = sorted(p.rsplit("/", 1)[1] for p in children)
        token = query.get("page_token", [""])[0]
        after = base64.urlsafe_b64decode(token.encode()).decode() if token else ""
        names = [name for name in names if name > after]
        size = min(int(query.get("page_size", ["1000"])[0]), fake.page_size)
        contents = []
        for name in names[:size]:
            child = f"{path}/{name}"
            is_folder = child in fake.folders
            entry: dict[str, Any] = {"path": child, "is_directory": is_folder, "name": name}
            if not is_folder:
                entry["file_size"] = len(fake.files[child][0])
                entry["last_modified"] = int(fake.files[child][1] * 1000)
            contents.append(entry)
        result: dict[str, Any] = {"contents": contents}
        if len(names) > size:
            result["next_page_token"] = base64.urlsafe_b64encode(names[size - 1].encode()).decode()
        self._reply(200, json.dumps(result).encode(), {"Content-Type": "application/json"})

    def _error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps({"error_code": code, "message": message}).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
        self._reply(status, body, headers, send_body=self.command != "HEAD")

    def _reply(
        self, status: int, body: bytes, headers: dict[str, str], *, send_body: bool = True
    ) -> None:
        self.send_response(status)
        self.send_header("x-request-id", uuid.uuid4().hex)
        for name, value in headers.items():
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body and status != 204:
            self.wfile.write(body)


@dataclass(frozen=True)
class DatabricksWorkspace:
    """The running fake and its tokens (a writer's and a reader's)."""

    server: FakeDatabricks

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def read_only_token(self) -> str:
        return self.server.read_only_token

    def url(self, name: str) -> str:
        """A fresh ``dbfs:/Volumes/...`` URL in the test volume, unique to one test."""
        return f"dbfs:{VOLUME}/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def databricks_workspace() -> Iterator[DatabricksWorkspace]:
    server = FakeDatabricks(
        token=f"dapi{uuid.uuid4().hex}", read_only_token=f"dapi{uuid.uuid4().hex}"
    )
    server.start()
    try:
        yield DatabricksWorkspace(server)
    finally:
        server.stop()


@pytest.fixture
def databricks_env(
    monkeypatch: pytest.MonkeyPatch, databricks_workspace: DatabricksWorkspace, loopback_only: None
) -> DatabricksWorkspace:
    """The fake's host and token in the environment, as a user (or a Spark worker) sets them."""
    monkeypatch.setenv("DATABRICKS_HOST", databricks_workspace.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", databricks_workspace.token)
    return databricks_workspace


@pytest.fixture
def store_factory_databricks(databricks_env: DatabricksWorkspace) -> Callable[[], ObjectStore]:
    """A callable giving a :class:`DatabricksVolumeStore` on a fresh, empty folder."""
    from shardstream.storage import DatabricksVolumeStore

    def make() -> ObjectStore:
        return DatabricksVolumeStore(databricks_env.url("conformance"))

    return make
