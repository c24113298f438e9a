"""Read-only datasets served over plain HTTP(S): any web server that answers GET and HEAD.

Byte ranges use the ``Range`` header; a server that ignores it (answering ``200`` with the whole
body) still gives correct bytes, only slower. HTTP has no listing and no upload, so ``list`` and
``put_file`` raise :class:`~shardstream.errors.UnsupportedURLError`: name the keys (from an
``index.json``) and read them.
"""

from __future__ import annotations

import contextlib
import http.client
import urllib.error
import urllib.request
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from shardstream.errors import ConfigurationError, StorageError, UnsupportedURLError
from shardstream.storage.answers import info_from_headers, range_header, ranged_body
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import url_for_message
from shardstream.storage.store_base import BaseStore, Failure, Kind

__all__ = ["HTTPStore"]

_NOT_FOUND = frozenset({404, 410})
_REFUSED = frozenset({401, 403})
_RANGE_NOT_SATISFIABLE = 416


class HTTPStore(BaseStore):
    """A dataset root on a web server, read with GET, ranged GET and HEAD.

    The constructor only checks its arguments; nothing is requested until a method is called.

    Args:
        url: ``http://host[:port]/path`` or ``https://...``; no user name, password, query or
            fragment (pass secrets as ``headers``, which never appear in messages or logs).
        headers: Headers sent with every request, e.g. ``{"Authorization": "Bearer ..."}``.
        timeout: Seconds to wait for the server at each socket operation.

    Raises:
        ConfigurationError: The URL is not a plain ``http(s)://`` URL, or the timeout is not
            positive.
    """

    _credentials_text = "Pass the credentials it expects as HTTPStore(headers=...)"

    def __init__(
        self, url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"{url_for_message(url)!r} is not an HTTP URL: write http(s)://host/path"
            )
        if parts.username is not None or parts.password is not None:
            raise ConfigurationError(
                "an http(s):// dataset URL must not hold a user name or password; pass "
                "credentials as headers= (they never appear in messages)"
            )
        if parts.query or parts.fragment:
            raise ConfigurationError(
                f"{url_for_message(url)!r}: an http(s):// dataset URL takes no query or "
                "fragment; drop it and pass credentials as headers="
            )
        self.base = url.rstrip("/")
        self._check_timeouts(timeout=timeout)
        self.timeout = timeout
        self._headers = dict(headers or {})
        self._opener = urllib.request.build_opener()
        super().__init__()

    def __repr__(self) -> str:
        return f"HTTPStore({self.base!r})"

    def url(self, key: str) -> str:
        """``<base>/<key>``, with the key percent-encoded."""
        return f"{self.base}/{quote(key)}" if key else self.base

    def put_file(self, local_path: str, key: str) -> None:
        """Always raises: HTTP datasets are read-only.

        Raises:
            UnsupportedURLError: Always.
        """
        raise UnsupportedURLError(
            f"cannot publish to {self.url(key)}: http(s):// datasets are read-only in "
            f"shardstream. Write to a local folder or an object store and serve that."
        )

    # --- the primitives -------------------------------------------------------------------------

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        """One GET (ranged unless the whole object is asked for); a short body is an error."""
        url = self.url(key)
        wanted = range_header(start, end)
        with self._open(url, "GET", {"Range": wanted} if wanted else {}) as response:
            body = response.read()
            status = int(response.status)
            length = response.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) != len(body):
            raise StorageError(f"reading {url}: got {len(body)} of {int(length)} bytes")
        return ranged_body(body, status, start, end)

    def _head(self, key: str) -> ObjectInfo:
        """Size (``Content-Length``) and ``ETag`` from one HEAD request."""
        url = self.url(key)
        with self._open(url, "HEAD", {}) as response:
            headers = response.headers
        return info_from_headers(headers, url)

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """Always raises: HTTP has no way to list a folder.

        Raises:
            UnsupportedURLError: Always.
        """
        raise UnsupportedURLError(
            f"cannot list {self.url(prefix)}: HTTP has no listing. Read the keys you need by "
            f"name (a dataset's index.json names its shards)."
        )

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, urllib.error.HTTPError):
            with contextlib.suppress(Exception):
                exc.close()
            detail = f"the server answered {exc.code} {exc.reason}"
            if exc.code in _NOT_FOUND:
                return Failure(Kind.NOT_FOUND, detail)
            if exc.code in _REFUSED:
                return Failure(Kind.CREDENTIALS, detail)
            if exc.code == _RANGE_NOT_SATISFIABLE:
                return Failure(Kind.PAST_END, detail)
            return Failure(Kind.OTHER, detail)
        if isinstance(exc, urllib.error.URLError):
            return Failure(Kind.OTHER, str(exc.reason))
        if isinstance(exc, (OSError, http.client.HTTPException)):
            return Failure(Kind.OTHER, f"{type(exc).__name__}: {exc}")
        return None

    # --- internals ------------------------------------------------------------------------------

    def _open(self, url: str, method: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        request = urllib.request.Request(  # noqa: S310 - the scheme was checked to be http(s)
            url, method=method, headers={**self._headers, **headers}
        )
        response: http.client.HTTPResponse = self._opener.open(request, timeout=self.timeout)
        return response
