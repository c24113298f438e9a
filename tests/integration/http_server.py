"""A static file server on 127.0.0.1 with ``Range`` and ``ETag``, for HTTPStore's tests.

The standard library's ``http.server`` ignores ``Range``; this one answers ranged GETs with 206
(or 416 past the end), sends an ``ETag`` made of the file's inode, size and modification time,
and serves one folder read-only.
"""

from __future__ import annotations

import os
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

__all__ = ["HOST", "StaticServer"]

HOST = "127.0.0.1"
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class StaticServer:
    """Serves ``root`` at ``http://127.0.0.1:<port>/`` until closed (a context manager).

    ``ranges=False`` answers every GET with the whole file, as servers that ignore ``Range`` do.
    """

    def __init__(self, root: str, *, ranges: bool = True) -> None:
        self.root = root
        served = root

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, *, body: bool) -> None:
                relative = unquote(urlsplit(self.path).path).lstrip("/")
                parts = relative.split("/")
                path = os.path.join(served, *parts)
                if ".." in parts or not os.path.isfile(path):
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                with open(path, "rb") as handle:
                    status = os.fstat(handle.fileno())
                    data = handle.read()
                size = len(data)
                etag = f'"{status.st_ino:x}-{status.st_size:x}-{status.st_mtime_ns:x}"'
                # ranges=False: a server that ignores Range and sends the whole file (200).
                match = _RANGE.fullmatch(self.headers.get("Range", "")) if ranges else None
                code = HTTPStatus.OK
                if match:
                    start = int(match.group(1))
                    last = int(match.group(2)) if match.group(2) else size - 1
                    if start >= size:
                        self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    last = min(last, size - 1)
                    data = data[start : last + 1]
                    code = HTTPStatus.PARTIAL_CONTENT
                self.send_response(code)
                self.send_header("ETag", etag)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data)))
                if code == HTTPStatus.PARTIAL_CONTENT:
                    self.send_header("Content-Range", f"bytes {start}-{last}/{size}")
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> StaticServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
