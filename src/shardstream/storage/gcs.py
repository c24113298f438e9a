"""Google Cloud Storage (``gs://bucket/prefix``) through gcsfs.

Credentials, in order: the ``token=`` argument (a service-account key file, its contents as a
dict, a ``google.auth`` credentials object, or ``"anon"``); else, with an emulator endpoint,
anonymous requests; else Application Default Credentials (the ``GOOGLE_APPLICATION_CREDENTIALS``
variable naming a service-account key file, the file ``gcloud auth application-default login``
writes, or the metadata server when running on Google Cloud). The endpoint comes from
``endpoint_url=`` or the ``STORAGE_EMULATOR_HOST`` variable (see :mod:`shardstream.config`).

gcsfs chooses at import time between its plain filesystem and an experimental one for zonal and
hierarchical-namespace buckets; the experimental one makes every bucket call wait about a minute
where those bucket types are not available (emulators, most projects). Before importing gcsfs,
shardstream therefore sets ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` unless the variable is
already set: set it to ``true`` yourself to get the experimental filesystem.

Uploads are atomic for readers: gcsfs sends a small file in one request and a large one as a
resumable upload, and GCS shows neither until it is complete. Object versions are reported by
their generation number. gcsfs's own retries (up to six attempts, with sleeps in between) are
switched off: shardstream retries in one place (uploads in the writer, downloads in
:mod:`shardstream.storage.download`), so that ``retry=N`` means exactly N retries. Refused
credentials are reported at once.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from shardstream import config
from shardstream._optional import require
from shardstream.errors import ConfigurationError, ObjectChangedError
from shardstream.storage._fsspec_store import FsspecStore
from shardstream.storage.answers import range_info
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import split_store_url
from shardstream.storage.store_base import Failure, Kind

__all__ = ["GCSStore", "parse_gcs_url"]

_PURPOSE = "Reading and writing gs:// URLs"
_SCHEMES = ("gs", "gcs")
_PAGE_KEYS = 1000  # the JSON API's largest listing page
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
# token= values that name a way of finding credentials rather than holding one.
_METHODS = frozenset({"anon", "google_default", "cache", "cloud", "browser"})
_SECRET_FIELDS = ("private_key", "refresh_token", "client_secret", "access_token", "token")

_CREDENTIALS_HELP = (
    "GCS credentials come from token= (a service-account key file or dict, or google.auth "
    "credentials), else from Application Default Credentials: the GOOGLE_APPLICATION_CREDENTIALS "
    "variable naming a service-account key file, or `gcloud auth application-default login`, or "
    "the metadata server on Google Cloud; an emulator (endpoint_url= or STORAGE_EMULATOR_HOST) "
    "gets anonymous requests"
)


def parse_gcs_url(url: str) -> tuple[str, str, str]:
    """``(scheme, bucket, prefix)`` of ``gs://bucket/prefix`` or ``gcs://bucket/prefix``.

    The prefix may be empty and loses surrounding slashes.

    Raises:
        ConfigurationError: The URL is not of that form, or the bucket name is not valid.
    """
    parts = split_store_url(url, _SCHEMES, "a GCS URL", "gs://bucket[/prefix]")
    if not _BUCKET.match(parts.netloc):
        raise ConfigurationError(
            f"{url!r}: {parts.netloc!r} is not a GCS bucket name (3 to 222 characters: lowercase "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
        )
    return parts.scheme.lower(), parts.netloc, parts.path.strip("/")


def _import_gcsfs(module: str = "gcsfs") -> ModuleType:
    """Import gcsfs, or one of its modules, with gcsfs's experimental bucket types off.

    Off unless the user chose otherwise; whichever module is imported first imports the package
    and fixes the choice, so every import goes through here.
    """
    config.prepare_gcsfs_import()
    return require(module, extra="gcs", purpose=_PURPOSE)


@functools.cache
def _single_attempt(filesystem_class: type) -> type:
    """``filesystem_class`` whose requests make one attempt each, where gcsfs allows it.

    gcsfs wraps its request method in a retry loop with a fixed number of attempts and offers no
    setting for it; the same loop with one attempt replaces it. Should a gcsfs version lack the
    pieces, its own class (with its retries) is used as it is.
    """
    retry = _import_gcsfs("gcsfs.retry")
    owner = next((cls for cls in filesystem_class.__mro__ if "_request" in cls.__dict__), None)
    inner = getattr(owner.__dict__["_request"], "__wrapped__", None) if owner else None
    loop = getattr(retry, "retry_request", None)
    if inner is None or loop is None:
        return filesystem_class
    request = loop(retries=1)(inner)
    return type(
        f"SingleAttempt{filesystem_class.__name__}", (filesystem_class,), {"_request": request}
    )


class GCSStore(FsspecStore):
    """A bucket and prefix on Google Cloud Storage (or an emulator), used as a dataset root.

    The constructor only checks its arguments; credentials are looked up and checked on first
    use.

    Args:
        url: ``gs://bucket`` or ``gs://bucket/prefix`` (``gcs://`` is accepted too).
        token: Credentials: the path of a service-account key file, its parsed contents, a
            ``google.auth.credentials.Credentials`` object, or ``"anon"`` for anonymous requests
            (default: anonymous with an emulator endpoint, else Application Default
            Credentials). Never shown in messages or logs.
        project: The Google Cloud project, needed only to create or list buckets.
        endpoint_url: The server, e.g. ``http://127.0.0.1:4443`` for an emulator (default:
            ``STORAGE_EMULATOR_HOST``, else Google itself).
        connect_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for the server between two reads of a socket.
        storage_options: More keyword arguments for ``gcsfs.GCSFileSystem``.

    Raises:
        ConfigurationError: The URL is not a ``gs://`` URL with a valid bucket name, or a
            timeout is not positive.
    """

    _lists_from_key = True  # the JSON API's startOffset
    _identifies_reads = True  # a media GET's x-goog-generation
    _ties_ranges = True  # a media GET's ifGenerationMatch
    _default_endpoint = "Google Cloud Storage (no STORAGE_EMULATOR_HOST)"
    _credentials_text = _CREDENTIALS_HELP

    def __init__(
        self,
        url: str,
        *,
        token: Any = None,
        project: str | None = None,
        endpoint_url: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.scheme, self.bucket, self.prefix = parse_gcs_url(url)
        self._netloc = self.bucket
        self.endpoint_url = (
            config.normalize_gcs_endpoint(endpoint_url)
            if endpoint_url is not None
            else config.gcs_emulator_host()
        )
        self.project = project
        self._token = token
        self._storage_options = dict(storage_options or {})
        self._init_store(connect_timeout, read_timeout)

    def __repr__(self) -> str:
        return f"GCSStore({self.url('')!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def credential_method(self) -> str:
        """How credentials are found: ``"token"``, ``"anon"`` or ``"google_default"``."""
        if self._token is None:
            return "anon" if self.endpoint_url is not None else "google_default"
        if isinstance(self._token, str) and self._token in _METHODS:
            return self._token
        return "token"

    # --- the primitives' hooks -----------------------------------------------------------------

    def _create_filesystem(self) -> Any:
        gcsfs = _import_gcsfs()
        aiohttp = require("aiohttp", extra="gcs", purpose=_PURPOSE)
        token = self._token
        if token is None:
            token = self.credential_method
        options: dict[str, Any] = {
            "token": token,
            "skip_instance_cache": True,  # a store's credentials are its own
            "use_listings_cache": False,  # others may write the same bucket
            "requests_timeout": aiohttp.ClientTimeout(
                sock_connect=self.connect_timeout, sock_read=self.read_timeout
            ),
        }
        if self.endpoint_url is not None:
            options["endpoint_url"] = self.endpoint_url
        if self.project is not None:
            options["project"] = self.project
        options.update(self._storage_options)
        filesystem = _single_attempt(gcsfs.GCSFileSystem)(**options)
        # Get a token now, once: gcsfs would retry a refused one with backoff for half a minute.
        filesystem.credentials.maybe_refresh()
        return filesystem

    def _classify(self, exc: Exception) -> Failure | None:
        auth = require("google.auth.exceptions", extra="gcs", purpose=_PURPOSE)
        retry = _import_gcsfs("gcsfs.retry")
        detail = f"{type(exc).__name__}: {exc}".strip()
        if exc.__cause__ is not None:  # gcsfs wraps a refused token refresh in an HttpError
            detail += f" (from {type(exc.__cause__).__name__}: {exc.__cause__})"
        code = _status(exc)
        refused = (auth.GoogleAuthError, retry.NonRetryableError, PermissionError)
        forbidden = type(exc) is OSError and str(exc).startswith("Forbidden")
        if isinstance(exc, refused) or code in (401, 403) or forbidden:
            return Failure(Kind.CREDENTIALS, detail)
        if isinstance(exc, FileNotFoundError) or code == 404:
            return Failure(Kind.NOT_FOUND, detail)
        if code == 416:  # a range past the end: the base then names the size
            return Failure(Kind.PAST_END, detail)
        return Failure(Kind.OTHER, detail)

    def _secrets(self) -> Sequence[str]:
        found: list[str] = []
        token = self._token
        if isinstance(token, str) and token not in _METHODS and not os.path.exists(token):
            found.append(token)  # a raw access token
        elif isinstance(token, Mapping):
            found.extend(str(token[name]) for name in _SECRET_FIELDS if token.get(name))
        for holder in (token, getattr(getattr(self._fs, "credentials", None), "credentials", None)):
            # A credentials object's current access token, ours or the one gcsfs holds now.
            access = getattr(holder, "token", None)
            if isinstance(access, str):
                found.append(access)
        return found

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One page of the JSON API's object listing, from ``startOffset`` on.

        GCS lists in key order, so key ranges can be listed in parallel.
        """
        root = self._path("").partition("/")[2]
        root = f"{root}/" if root else ""
        query: dict[str, Any] = {"prefix": root + prefix, "maxResults": _PAGE_KEYS}
        if token is not None:
            query["pageToken"] = token
        elif start_after is not None:
            query["startOffset"] = root + start_after  # inclusive: the key itself is dropped
        page = self._filesystem().call("GET", "b/{}/o", self.bucket, json_out=True, **query)
        infos: dict[str, ObjectInfo] = {}
        for item in page.get("items") or ():
            key = str(item["name"])[len(root) :]
            if key and not key.endswith("/") and key != start_after:  # no "folder" markers
                infos[key] = ObjectInfo(size=int(item["size"]), etag=self._etag(item))
        return infos, page.get("nextPageToken") or None

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        """One media GET, with the generation and size its headers gave (as a listing does)."""
        filesystem = self._filesystem()
        headers, data = filesystem.call("GET", filesystem.url(self._path(key)))
        generation = headers.get("x-goog-generation")
        length = str(headers.get("Content-Length", "")).strip()
        if length.isdigit() and int(length) != len(data):
            generation = None  # decoded on the way (gzip): the body is not the stored object
        return bytes(data), ObjectInfo(size=len(data), etag=str(generation) if generation else None)

    def _read_range_info(
        self, key: str, start: int, end: int, etag: str | None
    ) -> tuple[bytes, ObjectInfo | None]:
        """One ranged media GET, the size and generation it answered (``ifGenerationMatch``).

        ``etag`` is the object's generation, as a listing or an earlier answer gives it.
        """
        filesystem = self._filesystem()
        condition = {} if etag is None else {"ifGenerationMatch": etag}
        try:
            headers, data = filesystem.call(
                "GET", filesystem.url(self._path(key)),
                headers={"Range": f"bytes={start}-{end - 1}"}, **condition,
            )  # fmt: skip
        except Exception as exc:
            if etag is not None and _status(exc) == 412:
                raise ObjectChangedError(self.url(key)) from None
            raise
        generation = str(headers.get("x-goog-generation", "")) or None
        if etag is not None and generation != etag:  # a server that ignored it
            raise ObjectChangedError(self.url(key))
        return bytes(data), range_info(headers.get("Content-Range"), generation)

    def _etag(self, details: dict[str, Any]) -> str | None:
        generation = details.get("generation")
        if generation:
            return str(generation)
        return super()._etag(details)


def _status(exc: Exception) -> int | None:
    """The HTTP status of a gcsfs ``HttpError`` (or anything with a numeric ``code``)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    if isinstance(code, str) and code.isdigit():
        return int(code)
    return None
