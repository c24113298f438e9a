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
from collections.abc import Iterator, Mapping
from urllib.parse import quote, urlsplit

from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage.answers import exists_by_info, info_from_headers
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key, check_range, url_for_message

__all__ = ["HTTPStore"]

_NOT_FOUND = frozenset({404, 410})
_REFUSED = frozenset({401, 403})
_RANGE_NOT_SATISFIABLE = 416


class HTTPStore:
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
        if not timeout > 0:
            raise ConfigurationError(f"HTTPStore({url!r}): timeout={timeout} must be positive")
        self.base = url.rstrip("/")
        self.timeout = timeout
        self._headers = dict(headers or {})
        self._opener = urllib.request.build_opener()

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

    def get_bytes(self, key: str) -> bytes:
        """The whole object under ``key``, in one GET.

        Raises:
            ObjectNotFoundError: The server answered 404 or 410.
            CredentialsError: The server answered 401 or 403.
            StorageError: Any other failure, including a body shorter than announced.
        """
        body, _ = self._get(key, {})
        return body

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start .. end - 1`` of the object under ``key``, in one ranged GET.

        Raises:
            ConfigurationError: The range is negative or reversed.
            ObjectNotFoundError: The server answered 404 or 410.
            CredentialsError: The server answered 401 or 403.
            StorageError: The range runs past the end of the object, or the request failed.
        """
        check_key(key, self.base)
        check_range(start, end, self.url(key))
        if start == end:
            return b""
        body, status = self._get(key, {"Range": f"bytes={start}-{end - 1}"})
        if status == http.HTTPStatus.OK:  # the server ignored the Range header
            body = body[start:end]
        if len(body) != end - start:
            raise StorageError(
                f"reading {self.url(key)}: byte range [{start}, {end}) runs past the end of the "
                f"object (the server sent {len(body)} bytes)"
            )
        return body

    def info(self, key: str) -> ObjectInfo:
        """Size (``Content-Length``) and ``ETag`` from one HEAD request.

        Raises:
            ObjectNotFoundError: The server answered 404 or 410.
            CredentialsError: The server answered 401 or 403.
            StorageError: Any other failure, or no ``Content-Length`` in the answer.
        """
        url = self.url(check_key(key, self.base))
        with self._boundary("checking", url), self._open(url, "HEAD", {}) as response:
            headers = response.headers
        return info_from_headers(headers, url)

    def exists(self, key: str) -> bool:
        """Whether a HEAD request for ``key`` succeeds."""
        return exists_by_info(self.info, key)

    def list(self, prefix: str = "") -> list[str]:
        """Always raises: HTTP has no way to list a folder.

        Raises:
            UnsupportedURLError: Always.
        """
        raise UnsupportedURLError(
            f"cannot list {self.url(prefix)}: HTTP has no listing. Read the keys you need by "
            f"name (a dataset's index.json names its shards)."
        )

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """Always raises, as :meth:`list` does.

        Raises:
            UnsupportedURLError: Always.
        """
        return {key: self.info(key) for key in self.list(prefix)}

    # --- internals ------------------------------------------------------------------------------

    def _get(self, key: str, headers: dict[str, str]) -> tuple[bytes, int]:
        url = self.url(check_key(key, self.base))
        with self._boundary("reading", url), self._open(url, "GET", headers) as response:
            body = response.read()
            status = int(response.status)
            length = response.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) != len(body):
            raise StorageError(f"reading {url}: got {len(body)} of {int(length)} bytes")
        return body, status

    def _open(self, url: str, method: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        request = urllib.request.Request(  # noqa: S310 - the scheme was checked to be http(s)
            url, method=method, headers={**self._headers, **headers}
        )
        response: http.client.HTTPResponse = self._opener.open(request, timeout=self.timeout)
        return response

    @contextlib.contextmanager
    def _boundary(self, action: str, url: str) -> Iterator[None]:
        """Turn urllib's and http.client's errors into shardstream's, naming the URL."""
        try:
            yield
        except StorageError:
            raise
        except urllib.error.HTTPError as exc:
            with contextlib.suppress(Exception):
                exc.close()
            where = f"{action} {url} failed: the server answered {exc.code} {exc.reason}"
            if exc.code in _NOT_FOUND:
                raise ObjectNotFoundError(f"{where} (no such object)") from None
            if exc.code in _REFUSED:
                raise CredentialsError(
                    f"{where}. Pass the credentials it expects as HTTPStore(headers=...)"
                ) from None
            if exc.code == _RANGE_NOT_SATISFIABLE:
                raise StorageError(f"{where}: the byte range runs past the end") from None
            raise StorageError(where) from None
        except urllib.error.URLError as exc:
            raise StorageError(f"{action} {url} failed: {exc.reason}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise StorageError(f"{action} {url} failed: {type(exc).__name__}: {exc}") from exc
