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

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from http.client import HTTPResponse
from typing import IO, Any
from urllib.parse import quote, urlencode, urlsplit

from shardstream import config
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage.answers import info_from_headers, range_header, ranged_body
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import url_for_message
from shardstream.storage.store_base import Failure, Kind, WritableStore

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


class DatabricksVolumeStore(WritableStore):
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

    _noun = "file"
    # An empty range past the end is refused as a ranged GET would refuse it.
    _empty_range_asks = True
    _credentials_text = _CREDENTIALS_HELP

    def __init__(
        self,
        url: str,
        *,
        host: str | None = None,
        token: str | None = None,
        read_timeout: float = 60.0,
    ) -> None:
        self.root = parse_volume_url(url)
        self._check_timeouts(read_timeout=read_timeout)
        self._host_argument = host
        self._token_argument = token
        self.read_timeout = float(read_timeout)
        if host is not None:
            self._check_host(host)
        self._made_folders: set[str] = set()
        self._opener = urllib.request.build_opener(_NoRedirect())
        super().__init__()

    def __repr__(self) -> str:
        return f"DatabricksVolumeStore({self.url('')!r})"

    def url(self, key: str) -> str:
        """``dbfs:/Volumes/.../key`` (never with credentials)."""
        return "dbfs:" + self._path(key) if key else "dbfs:" + self.root

    def put_file(self, local_path: str, key: str) -> None:
        """Upload the file at ``local_path`` to ``key`` in one request (atomic for readers).

        Raises:
            CredentialsError: No host or token, or the workspace refused the token.
            StorageError: The file holds more than one upload takes, or the request failed.
        """
        size = os.stat(local_path).st_size  # a missing local file is the caller's error
        if size > _MAX_UPLOAD:
            raise StorageError(
                f"uploading to {self.url(key)}: {local_path} holds {size} bytes, more than the "
                "5 GiB that one Files API upload takes (MDS shards are at most 4 GiB)"
            )
        super().put_file(local_path, key)

    # --- the primitives -------------------------------------------------------------------------

    def _write(self, local_path: str, key: str) -> None:
        path = self._path(key)
        self._make_folder(path.rsplit("/", 1)[0])
        with open(local_path, "rb") as body:
            size = os.fstat(body.fileno()).st_size
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
            query = {"overwrite": "true"}
            self._request("PUT", "files", path, query=query, headers=headers, body=body)

    def _remove(self, key: str) -> None:
        self._request("DELETE", "files", self._path(key))

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        wanted = range_header(start, end)
        headers = {"Range": wanted} if wanted else {}
        status, data = self._request("GET", "files", self._path(key), headers=headers)
        return ranged_body(data, status, start, end)

    def _head(self, key: str) -> ObjectInfo:
        with self._send("HEAD", "files", self._path(key)) as response:
            headers = response.headers
        return info_from_headers(headers, self.url(key))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One page of one folder of the walk; the token holds the folders still to walk.

        The Files API lists no ETag: the tag is the size and modification time (a file
        rewritten in place gets a new modification time). A missing root lists nothing.
        """
        state: dict[str, Any] = json.loads(token) if token else {"pending": [""], "page": None}
        pending: list[str] = list(state["pending"])
        folder = pending.pop()
        infos: dict[str, ObjectInfo] = {}
        entries, page_token = self._folder_page(folder, state["page"])
        for name, entry in entries:
            relative = folder + name
            if entry.get("is_directory"):
                relative += "/"
                if relative.startswith(prefix) or prefix.startswith(relative):
                    pending.append(relative)
            elif relative.startswith(prefix) and (start_after is None or relative > start_after):
                size = int(entry.get("file_size") or 0)
                modified = entry.get("last_modified")
                tag = None if modified is None else f"{size:x}-{modified}"
                infos[relative] = ObjectInfo(size=size, etag=tag)
        if page_token:
            pending.append(folder)  # this folder's next page comes first
        if not pending:
            return infos, None
        return infos, json.dumps({"pending": pending, "page": page_token})

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, urllib.error.HTTPError):
            try:
                payload = json.loads(exc.read() or b"{}")
            except (ValueError, OSError):
                payload = {}
            finally:
                exc.close()
            code = payload.get("error_code") if isinstance(payload, dict) else None
            message = payload.get("message") if isinstance(payload, dict) else None
            detail = f"HTTP {exc.code} {code or exc.reason}: {message or ''}".rstrip(": ")
            kinds = {401: Kind.CREDENTIALS, 403: Kind.CREDENTIALS, 404: Kind.NOT_FOUND}
            kinds[416] = Kind.PAST_END
            return Failure(kinds.get(exc.code, Kind.OTHER), detail)
        if isinstance(exc, (OSError, ValueError)):  # URLError, refused connections, timeouts
            return Failure(Kind.OTHER, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
        return None

    def _endpoint(self) -> str:
        host = self._host_argument if self._host_argument is not None else config.databricks_host()
        return self._scrub(host or "(no host)")

    def _secrets(self) -> Sequence[str]:
        """The token, should a server or a URL ever echo it."""
        return [token for token in (self._token_argument, config.databricks_token()) if token]

    # --- internals ------------------------------------------------------------------------------

    def _folder_page(
        self, folder: str, token: str | None
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """``(name, entry)`` of the entries of one page of ``folder``, and the next page's token.

        A missing folder has no entries.
        """
        path = self.root + ("/" + folder.rstrip("/") if folder else "")
        query = {} if token is None else {"page_token": token}
        try:
            page = json.loads(self._request("GET", "directories", path, query=query)[1] or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            exc.close()
            return [], None
        entries = []
        for entry in page.get("contents") or ():
            name = entry.get("name") or str(entry["path"]).rstrip("/").rsplit("/", 1)[-1]
            entries.append((name, entry))
        return entries, page.get("next_page_token") or None

    def _make_folder(self, path: str) -> None:
        """Create ``path`` and its parents once per store (the call is idempotent)."""
        if path in self._made_folders or path.count("/") <= 4:  # the volume itself exists
            return
        self._request("PUT", "directories", path)
        with self._lock:
            self._made_folders.add(path)

    def _path(self, key: str) -> str:
        self._key(key)
        return self.root + "/" + key if key else self.root

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
