"""Databricks Unity Catalog volumes through the Files API, over plain HTTPS.

URLs look like ``dbfs:/Volumes/<catalog>/<schema>/<volume>/<path>``. On a Databricks cluster the
same volume is also mounted at ``/Volumes/...``; such a plain path is a local folder to
shardstream and needs no credentials.

Only Unity Catalog volumes are served: the Files API is documented for volume paths, and the
older DBFS root and mounts (``dbfs:/mnt/...``, ``dbfs:/FileStore/...``) are deprecated by
Databricks, so other ``dbfs:/`` URLs are refused with :class:`UnsupportedURLError`.

The REST calls used (``/api/2.0/fs``):

- ``PUT /files{path}?overwrite=true`` with the raw bytes (one request, up to 5 GiB: every MDS
  shard fits, and the file appears whole);
- ``GET /files{path}``, with a ``Range`` header for byte ranges;
- ``HEAD /files{path}`` for the size (``Content-Length``);
- ``PUT /directories{path}`` (create a folder and its parents, idempotent) before uploading
  into a folder for the first time;
- ``GET /directories{path}?page_token=...`` to list a folder, page by page.

Credentials: ``host=`` and ``token=`` (a personal access token), else the ``DATABRICKS_HOST``
and ``DATABRICKS_TOKEN`` variables (see :mod:`shardstream.config`). The token is sent only to
that host, only as a bearer header, never across a redirect, and never appears in a message or
a log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPResponse
from typing import IO, Any
from urllib.parse import quote, urlencode, urlsplit

from shardstream import config
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    ShardstreamError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage.answers import exists_by_info, info_from_headers
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key, check_range, url_for_message

__all__ = ["DatabricksVolumeStore", "parse_volume_url"]

logger = logging.getLogger(__name__)

_API = "/api/2.0/fs"
_MAX_UPLOAD = 5 * 1024**3  # the most one Files API upload takes

_CREDENTIALS_HELP = (
    "Databricks credentials come from host= and token= or the DATABRICKS_HOST (the workspace "
    "URL) and DATABRICKS_TOKEN (a personal access token with access to the volume) variables. "
    "TorchDistributor's worker processes and Spark executors need DATABRICKS_HOST and "
    "DATABRICKS_TOKEN in their environment too"
)


def parse_volume_url(url: str) -> str:
    """The volume path that a ``dbfs:/Volumes/<catalog>/<schema>/<volume>[/path]`` URL names.

    The result is ``/Volumes/<catalog>/<schema>/<volume>[/path]``, without a trailing slash.

    Raises:
        ConfigurationError: ``url`` is not a ``dbfs:`` URL, or names no volume.
        UnsupportedURLError: A ``dbfs:/`` path outside ``/Volumes`` (the DBFS root or a mount).
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "dbfs" or parts.query or parts.fragment:
        raise ConfigurationError(
            f"{url_for_message(url)!r} is not a Databricks volume URL: write "
            "dbfs:/Volumes/<catalog>/<schema>/<volume>[/path], with no query or fragment"
        )
    if parts.netloc:
        raise ConfigurationError(
            f"{url!r}: write dbfs:/Volumes/<catalog>/<schema>/<volume>/... with one slash after "
            "'dbfs:' (or three), not 'dbfs://'"
        )
    segments = [segment for segment in parts.path.split("/") if segment]
    if not segments or segments[0] != "Volumes":
        raise UnsupportedURLError(
            f"cannot use {url!r}: shardstream reaches Databricks through the Files API, which "
            "serves Unity Catalog volumes only (dbfs:/Volumes/<catalog>/<schema>/<volume>/...). "
            "Put the dataset in a volume, or on a cluster use the /dbfs/... FUSE path as a local "
            "folder."
        )
    if len(segments) < 4 or ".." in segments or "." in segments:
        raise ConfigurationError(
            f"{url!r} names no volume: write dbfs:/Volumes/<catalog>/<schema>/<volume>[/path]"
        )
    return "/" + "/".join(segments)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects, so the bearer token never follows one to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class DatabricksVolumeStore:
    """A folder in a Unity Catalog volume, used as a dataset root, through the Files API.

    The constructor only checks its arguments; credentials are looked up and checked on first
    use. ``put_file`` is a single upload request, atomic for readers.

    Args:
        url: ``dbfs:/Volumes/<catalog>/<schema>/<volume>[/path]``.
        host: The workspace URL, e.g. ``https://adb-123.4.azuredatabricks.net`` (default:
            ``DATABRICKS_HOST``).
        token: A personal access token (default: ``DATABRICKS_TOKEN``); never shown in messages
            or logs.
        read_timeout: Seconds to wait for the server, to connect and between two reads of a
            socket (urllib has one timeout for both).

    Raises:
        ConfigurationError: The URL names no volume, ``host`` is not an http(s) URL, or the
            timeout is not a positive number.
        UnsupportedURLError: A ``dbfs:/`` URL outside ``/Volumes``.
    """

    def __init__(
        self,
        url: str,
        *,
        host: str | None = None,
        token: str | None = None,
        read_timeout: float = 60.0,
    ) -> None:
        self.root = parse_volume_url(url)
        if not read_timeout > 0:
            raise ConfigurationError(
                f"DatabricksVolumeStore({url!r}): read_timeout={read_timeout} must be a positive "
                "number of seconds"
            )
        self._host_argument = host
        self._token_argument = token
        self.read_timeout = float(read_timeout)
        if host is not None:
            self._check_host(host)
        self._made_folders: set[str] = set()
        self._lock = threading.Lock()
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return f"DatabricksVolumeStore({self.url('')!r})"

    def url(self, key: str) -> str:
        """``dbfs:/Volumes/.../key`` (never with credentials)."""
        return "dbfs:" + self._path(key) if key else "dbfs:" + self.root

    # --- writing --------------------------------------------------------------------------------

    def put_file(self, local_path: str, key: str) -> None:
        """Upload the file at ``local_path`` to ``key`` in one request (atomic for readers).

        Raises:
            CredentialsError: No host or token, or the workspace refused the token.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        size = os.stat(local_path).st_size  # a missing local file is the caller's error
        if size > _MAX_UPLOAD:
            raise StorageError(
                f"uploading to {self.url(key)}: {local_path} holds {size} bytes, more than the "
                "5 GiB that one Files API upload takes (MDS shards are at most 4 GiB)"
            )
        with self._boundary("uploading to", key):
            self._make_folder(path.rsplit("/", 1)[0])
            with open(local_path, "rb") as body:
                headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
                query = {"overwrite": "true"}
                self._request("PUT", "files", path, query=query, headers=headers, body=body)

    def delete(self, key: str) -> None:
        """Delete the file under ``key`` (one DELETE; a missing file is already gone).

        Raises:
            CredentialsError: No host or token, or the workspace refused the token.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        with contextlib.suppress(ObjectNotFoundError), self._boundary("deleting", key):
            self._request("DELETE", "files", path)

    # --- reading --------------------------------------------------------------------------------

    def get_bytes(self, key: str) -> bytes:
        """The whole file under ``key``.

        Raises:
            ObjectNotFoundError: No file under ``key``.
            CredentialsError: No host or token, or the workspace refused the token.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        with self._boundary("reading", key):
            return self._request("GET", "files", path)[1]

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start .. end - 1`` of the file under ``key`` (one ranged GET).

        Raises:
            ConfigurationError: The range is negative or reversed.
            ObjectNotFoundError: No file under ``key``.
            StorageError: The range runs past the end of the file, or the request failed.
        """
        path = self._path(key)
        check_range(start, end, self.url(key))
        if start == end:
            size = self.info(key).size
            if end > size:
                raise self._past_the_end(key, start, end, size)
            return b""
        with self._boundary("reading", key):
            headers = {"Range": f"bytes={start}-{end - 1}"}
            try:
                status, data = self._request("GET", "files", path, headers=headers)
            except urllib.error.HTTPError as exc:
                if exc.code != 416:
                    raise
                exc.close()
                raise self._past_the_end(key, start, end, self.info(key).size) from None
        if status == 200:  # the server ignored the range and sent the whole file
            if end > len(data):
                raise self._past_the_end(key, start, end, len(data))
            return data[start:end]
        if len(data) != end - start:
            raise self._past_the_end(key, start, end, start + len(data))
        return data

    def info(self, key: str) -> ObjectInfo:
        """The size of the file under ``key``, and its ETag when the workspace sends one.

        Raises:
            ObjectNotFoundError: No file under ``key``.
        """
        path = self._path(key)
        with self._boundary("checking", key):
            response = self._send("HEAD", "files", path)
            with response:
                headers = response.headers
        return info_from_headers(headers, self.url(key))

    def exists(self, key: str) -> bool:
        """Whether a file exists under ``key``."""
        return exists_by_info(self.info, key)

    def list(self, prefix: str = "") -> list[str]:
        """The keys of the files under the root that start with ``prefix``, sorted.

        Walks the folders that can hold such keys, each listed page by page. A missing root
        lists nothing.
        """
        return sorted(self.list_info(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list`, with each file's size and a tag of its size and modification time.

        The Files API lists no ETag; a file rewritten in place gets a new modification time.
        """
        infos: dict[str, ObjectInfo] = {}
        with self._boundary("listing", prefix):
            pending = [""]  # folders relative to the root, "" or ending in "/"
            while pending:
                folder = pending.pop()
                for name, entry in self._folder_entries(folder):
                    relative = folder + name
                    if entry.get("is_directory"):
                        relative += "/"
                        if relative.startswith(prefix) or prefix.startswith(relative):
                            pending.append(relative)
                    elif relative.startswith(prefix):
                        size = int(entry.get("file_size") or 0)
                        modified = entry.get("last_modified")
                        tag = None if modified is None else f"{size:x}-{modified}"
                        infos[relative] = ObjectInfo(size=size, etag=tag)
        return infos

    # --- internals ------------------------------------------------------------------------------

    def _folder_entries(self, folder: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(name, entry)`` of each entry of ``folder`` (nothing if it does not exist)."""
        path = self.root + ("/" + folder.rstrip("/") if folder else "")
        token: str | None = None
        while True:
            query = {} if token is None else {"page_token": token}
            try:
                page = json.loads(
                    self._request("GET", "directories", path, query=query)[1] or b"{}"
                )
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
                exc.close()
                return
            for entry in page.get("contents") or ():
                name = entry.get("name") or str(entry["path"]).rstrip("/").rsplit("/", 1)[-1]
                yield name, entry
            token = page.get("next_page_token")
            if not token:
                return

    def _make_folder(self, path: str) -> None:
        """Create ``path`` and its parents once per store (the call is idempotent)."""
        if path in self._made_folders or path.count("/") <= 4:  # the volume itself exists
            return
        self._request("PUT", "directories", path)
        with self._lock:
            self._made_folders.add(path)

    def _path(self, key: str) -> str:
        check_key(key, "dbfs:" + self.root)
        return self.root + "/" + key if key else self.root

    def _past_the_end(self, key: str, start: int, end: int, size: int) -> StorageError:
        return StorageError(
            f"reading {self.url(key)}: byte range [{start}, {end}) runs past the end of the file "
            f"({size} bytes)"
        )

    def _check_host(self, host: str) -> str:
        parts = urlsplit(host)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise ConfigurationError(
                f"Databricks host for {self.url('')}: {host!r} is not a workspace URL such as "
                "https://adb-123.4.azuredatabricks.net"
            )
        return host.rstrip("/")

    def _credentials(self) -> tuple[str, str]:
        host = self._host_argument if self._host_argument is not None else config.databricks_host()
        token = self._token_argument
        if token is None:
            token = config.databricks_token()
        if not host or not token:
            missing = " and ".join(
                name for name, value in (("host", host), ("token", token)) if not value
            )
            raise CredentialsError(
                f"cannot reach {self.url('')}: no Databricks {missing} was given. "
                f"{_CREDENTIALS_HELP}."
            )
        return self._check_host(host), token

    def _send(
        self,
        method: str,
        api: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: IO[bytes] | None = None,
    ) -> HTTPResponse:
        """Send one request to ``/api/2.0/fs/{api}{path}``; HTTP errors raise ``HTTPError``."""
        host, token = self._credentials()
        address = f"{host}{_API}/{api}{quote(path, safe='/')}"
        if query:
            address += "?" + urlencode(query)
        request = urllib.request.Request(address, data=body, method=method)  # noqa: S310
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        request.add_header("Authorization", f"Bearer {token}")
        logger.debug("Databricks Files API: %s %s", method, address)
        response: HTTPResponse = self._opener.open(request, timeout=self.read_timeout)
        return response

    def _request(self, method: str, api: str, path: str, **kwargs: Any) -> tuple[int, bytes]:
        """:meth:`_send`, returning the status and the whole body."""
        with self._send(method, api, path, **kwargs) as response:
            return response.status, response.read()

    @contextlib.contextmanager
    def _boundary(self, action: str, key: str) -> Iterator[None]:
        """Turn urllib's errors into shardstream's, naming the URL and never the token."""
        try:
            yield
        except ShardstreamError:
            raise
        except urllib.error.HTTPError as exc:
            raise self._translate_http(exc, action, key) from None
        except (OSError, ValueError) as exc:  # URLError, refused connections, timeouts
            reason = getattr(exc, "reason", exc)
            detail = self._scrub(f"{type(exc).__name__}: {reason}")
            raise StorageError(
                f"{action} {self.url(key)} failed at {self._host_for_messages()}: {detail}"
            ) from None

    def _translate_http(self, exc: urllib.error.HTTPError, action: str, key: str) -> StorageError:
        where = f"{action} {self.url(key)}"
        try:
            payload = json.loads(exc.read() or b"{}")
        except (ValueError, OSError):
            payload = {}
        finally:
            exc.close()
        code = payload.get("error_code") if isinstance(payload, dict) else None
        message = payload.get("message") if isinstance(payload, dict) else None
        detail = self._scrub(f"HTTP {exc.code} {code or exc.reason}: {message or ''}".rstrip(": "))
        if exc.code in (401, 403):
            return CredentialsError(
                f"{where} failed: the workspace {self._host_for_messages()} refused the token "
                f"({detail}). {_CREDENTIALS_HELP}."
            )
        if exc.code == 404:
            return ObjectNotFoundError(f"{where} failed: no such file or volume ({detail})")
        return StorageError(f"{where} failed at {self._host_for_messages()}: {detail}")

    def _host_for_messages(self) -> str:
        host = self._host_argument if self._host_argument is not None else config.databricks_host()
        return self._scrub(host or "(no host)")

    def _scrub(self, text: str) -> str:
        """``text`` without the token, should a server or a URL ever echo it."""
        tokens = {self._token_argument, config.databricks_token()}
        for token in tokens:
            if token:
                text = text.replace(token, "***")
        return text
