"""Oracle Cloud Infrastructure (OCI) Object Storage through the ``oci`` SDK.

URLs look like ``oci://bucket@namespace/prefix``: the bucket, the tenancy's Object Storage
namespace, then the dataset's prefix inside the bucket.

Credentials come from an OCI config file: ``config_file=`` or the ``OCI_CONFIG_FILE`` variable,
else ``~/.oci/config``; the profile from ``profile=`` or ``OCI_CLI_PROFILE``, else ``DEFAULT``
(see :mod:`shardstream.config`). The SDK signs each request with the profile's API key. Only the
config file is used: shardstream never asks an instance's metadata service for credentials.
The endpoint is ``endpoint_url=`` or ``OCI_ENDPOINT_URL``, else the SDK's endpoint for the
profile's region.

The REST calls used are GetObject (with a ``Range`` header), HeadObject, PutObject and
ListObjects (paged with ``start`` / ``nextStartWith``). A single PutObject takes up to 50 GiB
and is atomic for readers, which covers every MDS shard (at most 4 GiB), so multipart uploads
are not needed.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from shardstream import config
from shardstream._optional import require
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    ShardstreamError,
    StorageError,
)
from shardstream.storage.answers import exists_by_info, info_from_headers
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key, check_range, url_for_message

__all__ = ["OCIStore", "parse_oci_url"]

_PURPOSE = "Reading and writing oci:// URLs"

# Error codes of Object Storage that are about who is asking, not what was asked for.
_AUTH_STATUSES = frozenset({401, 403})
_PAGE_LIMIT = 1000  # the most ListObjects returns per page

_CREDENTIALS_HELP = (
    "OCI credentials come from an OCI config file: config_file= or the OCI_CONFIG_FILE variable, "
    "else ~/.oci/config, with the profile from profile= or OCI_CLI_PROFILE (default DEFAULT); the "
    "profile needs user, fingerprint, key_file, tenancy and region. The endpoint comes from "
    "endpoint_url= or OCI_ENDPOINT_URL, else the profile's region"
)


def parse_oci_url(url: str) -> tuple[str, str, str]:
    """Split ``oci://bucket@namespace/prefix`` into bucket, namespace and prefix.

    Args:
        url: The URL; the prefix may be empty and loses surrounding slashes.

    Raises:
        ConfigurationError: The URL is not of that form.
    """
    scheme, sep, rest = url.partition("://")
    if scheme.lower() != "oci" or not sep:
        raise ConfigurationError(
            f"{url_for_message(url)!r} is not an OCI URL: write oci://bucket@namespace[/prefix]"
        )
    if "?" in rest or "#" in rest:
        raise ConfigurationError(
            f"{url_for_message(url)!r}: an oci:// URL takes no query or fragment; drop it"
        )
    authority, _, prefix = rest.partition("/")
    bucket, at, namespace = authority.partition("@")
    if not at or not bucket or not namespace or "@" in namespace:
        raise ConfigurationError(
            f"{url!r} is not an oci://bucket@namespace[/prefix] URL: it needs both the bucket and "
            "the Object Storage namespace (shown by `oci os ns get`)"
        )
    return bucket, namespace, prefix.strip("/")


class OCIStore:
    """A bucket and prefix on OCI Object Storage, used as a dataset root.

    The constructor only checks its arguments; the config file is read and the client made on
    first use. Each ``put_file`` is one PutObject, atomic for readers.

    Args:
        url: ``oci://bucket@namespace`` or ``oci://bucket@namespace/prefix``.
        endpoint_url: The Object Storage endpoint, e.g. ``https://objectstorage.us-ashburn-1.
            oraclecloud.com`` (default: ``OCI_ENDPOINT_URL``, else the profile's region).
        config_file: The OCI config file (default: ``OCI_CONFIG_FILE``, else ``~/.oci/config``).
        profile: The profile in that file (default: ``OCI_CLI_PROFILE``, else ``DEFAULT``).
        connect_timeout: Seconds to wait for a connection to the endpoint.
        read_timeout: Seconds to wait for the server between two reads of a socket.

    Raises:
        ConfigurationError: The URL is not an ``oci://bucket@namespace[/prefix]`` URL, or a
            timeout is not a positive number.
    """

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        config_file: str | None = None,
        profile: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
    ) -> None:
        self.bucket, self.namespace, self.prefix = parse_oci_url(url)
        if not (connect_timeout > 0 and read_timeout > 0):
            raise ConfigurationError(
                f"OCIStore({url!r}): connect_timeout={connect_timeout} and "
                f"read_timeout={read_timeout} must be positive numbers of seconds"
            )
        self.timeouts = (float(connect_timeout), float(read_timeout))
        self.endpoint_url = endpoint_url if endpoint_url is not None else config.oci_endpoint_url()
        self.config_file = os.path.expanduser(
            config_file if config_file is not None else config.oci_config_file()
        )
        self.profile = profile if profile is not None else config.oci_profile()
        self._profile: dict[str, Any] | None = None
        self._secrets: tuple[str, ...] = ()
        self._local = threading.local()  # one SDK client per thread
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OCIStore({self.url('')!r}, endpoint_url={self.endpoint_url!r})"

    def url(self, key: str) -> str:
        """``oci://bucket@namespace/prefix/key`` (never with credentials)."""
        path = "/".join(part for part in (self.prefix, key) if part)
        return f"oci://{self.bucket}@{self.namespace}" + (f"/{path}" if path else "")

    # --- writing --------------------------------------------------------------------------------

    def put_file(self, local_path: str, key: str) -> None:
        """Upload the file at ``local_path`` to ``key`` in one PutObject (atomic for readers).

        Raises:
            CredentialsError: The config file is missing or invalid, or the service refused it.
            StorageError: Any other failure of the request.
        """
        name = self._name(key)
        size = os.stat(local_path).st_size  # a missing local file is the caller's error
        with self._boundary("uploading to", key), open(local_path, "rb") as body:
            self._oci_client().put_object(
                self.namespace, self.bucket, name, body, content_length=size
            )

    def delete(self, key: str) -> None:
        """Delete the object under ``key`` (one DeleteObject; a missing object is already gone).

        Raises:
            CredentialsError: The config file is missing or invalid, or the service refused it.
            StorageError: Any other failure of the request.
        """
        name = self._name(key)
        with contextlib.suppress(ObjectNotFoundError), self._boundary("deleting", key):
            self._oci_client().delete_object(self.namespace, self.bucket, name)

    # --- reading --------------------------------------------------------------------------------

    def get_bytes(self, key: str) -> bytes:
        """The whole object under ``key``.

        Raises:
            ObjectNotFoundError: No object under ``key`` (or no such bucket).
            CredentialsError: The config file is missing or invalid, or the service refused it.
            StorageError: Any other failure of the request.
        """
        name = self._name(key)
        with self._boundary("reading", key):
            response = self._oci_client().get_object(self.namespace, self.bucket, name)
            data: bytes = response.data.content
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start .. end - 1`` of the object under ``key`` (one ranged GetObject).

        Raises:
            ConfigurationError: The range is negative or reversed.
            ObjectNotFoundError: No object under ``key``.
            StorageError: The range runs past the end of the object, or the request failed.
        """
        name = self._name(key)
        check_range(start, end, self.url(key))
        if start == end:
            size = self.info(key).size
            if end > size:
                raise self._past_the_end(key, start, end, size)
            return b""
        with self._boundary("reading", key):
            try:
                response = self._oci_client().get_object(
                    self.namespace, self.bucket, name, range=f"bytes={start}-{end - 1}"
                )
            except Exception as exc:
                if getattr(exc, "status", None) != 416:
                    raise
                size = self.info(key).size
                raise self._past_the_end(key, start, end, size) from exc
            data: bytes = response.data.content
        if len(data) != end - start:
            raise self._past_the_end(key, start, end, start + len(data))
        return data

    def info(self, key: str) -> ObjectInfo:
        """The size and ETag of the object under ``key`` (one HeadObject).

        Raises:
            ObjectNotFoundError: No object under ``key``.
        """
        name = self._name(key)
        with self._boundary("checking", key):
            response = self._oci_client().head_object(self.namespace, self.bucket, name)
        headers = response.headers
        return info_from_headers(headers, self.url(key))

    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key``."""
        return exists_by_info(self.info, key)

    def list(self, prefix: str = "") -> list[str]:
        """The keys (relative to the store's root) that start with ``prefix``, sorted.

        Follows ListObjects' ``nextStartWith`` until the listing is complete.
        """
        return sorted(self.list_info(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list`, with each object's size and ETag (ListObjects' ``fields``)."""
        root = f"{self.prefix}/" if self.prefix else ""
        infos: dict[str, ObjectInfo] = {}
        start: str | None = None
        with self._boundary("listing", prefix):
            client = self._oci_client()
            while True:
                options: dict[str, Any] = {"prefix": root + prefix, "fields": "name,size,etag"}
                options["limit"] = _PAGE_LIMIT
                if start is not None:
                    options["start"] = start
                page = client.list_objects(self.namespace, self.bucket, **options).data
                for item in page.objects or ():
                    etag = getattr(item, "etag", None)
                    infos[item.name[len(root) :]] = ObjectInfo(
                        size=int(getattr(item, "size", None) or 0),
                        etag=str(etag).strip('"') if etag else None,
                    )
                start = page.next_start_with
                if not start:
                    break
        return infos

    # --- internals ------------------------------------------------------------------------------

    def _name(self, key: str) -> str:
        """The object name of ``key``: ``prefix/key``."""
        check_key(key, self.url(""))
        return "/".join(part for part in (self.prefix, key) if part)

    def _past_the_end(self, key: str, start: int, end: int, size: int) -> StorageError:
        return StorageError(
            f"reading {self.url(key)}: byte range [{start}, {end}) runs past the end of the "
            f"object ({size} bytes)"
        )

    def _oci_client(self) -> Any:
        """This thread's ObjectStorageClient, made on first use (so the constructor does no I/O).

        The config file is read once per store; each thread gets its own client, because the
        SDK's clients hold a ``requests`` session, which is not documented as thread-safe.
        """
        client = getattr(self._local, "client", None)
        if client is None:
            oci = require("oci", extra="oci", purpose=_PURPOSE)
            options: dict[str, Any] = {
                "retry_strategy": oci.retry.NoneRetryStrategy(),  # callers retry
                "circuit_breaker_strategy": oci.circuit_breaker.NoCircuitBreakerStrategy(),
                "timeout": self.timeouts,
            }
            if self.endpoint_url is not None:
                options["service_endpoint"] = self.endpoint_url
            client = oci.object_storage.ObjectStorageClient(self._read_profile(oci), **options)
            self._local.client = client
        return client

    def _read_profile(self, oci: Any) -> dict[str, Any]:
        """The profile of the config file, read once (missing or invalid: CredentialsError)."""
        with self._lock:
            if self._profile is None:
                try:
                    profile = oci.config.from_file(
                        file_location=self.config_file, profile_name=self.profile
                    )
                except oci.exceptions.ClientError as exc:
                    raise CredentialsError(
                        f"cannot open {self.url('')}: the OCI config file {self.config_file} "
                        f"(profile {self.profile}) cannot be used: {type(exc).__name__}: "
                        f"{self._scrub(str(exc))}. {_CREDENTIALS_HELP}."
                    ) from None
                self._secrets = tuple(
                    str(profile[name])
                    for name in ("pass_phrase", "key_content")
                    if profile.get(name)
                )
                self._profile = dict(profile)
            return self._profile

    @contextlib.contextmanager
    def _boundary(self, action: str, key: str) -> Iterator[None]:
        """Turn the SDK's errors into shardstream's, naming the URL."""
        try:
            yield
        except ShardstreamError:
            raise
        except Exception as exc:
            translated = self._translate(exc, action, key)
            if translated is None:
                raise
            raise translated from None

    def _translate(self, exc: Exception, action: str, key: str) -> StorageError | None:
        oci = require("oci", extra="oci", purpose=_PURPOSE)
        where = f"{action} {self.url(key)}"
        endpoint = self.endpoint_url or "the profile's region"
        if isinstance(exc, oci.exceptions.ServiceError):
            detail = self._scrub(f"HTTP {exc.status} {exc.code}: {exc.message}")
            if exc.status in _AUTH_STATUSES:
                return CredentialsError(
                    f"{where} failed: Object Storage at {endpoint} refused the request ({detail}). "
                    f"{_CREDENTIALS_HELP}."
                )
            if exc.status == 404:
                return ObjectNotFoundError(f"{where} failed: no such object or bucket ({detail})")
            return StorageError(f"{where} failed at {endpoint}: {detail}")
        if isinstance(exc, oci.exceptions.ClientError):
            return CredentialsError(
                f"{where} failed: {type(exc).__name__}: {self._scrub(str(exc))}. "
                f"{_CREDENTIALS_HELP}."
            )
        if isinstance(
            exc, (OSError, oci.exceptions.RequestException, oci.exceptions.ConnectTimeout)
        ):
            detail = self._scrub(f"{type(exc).__name__}: {exc}")
            return StorageError(f"{where} failed at {endpoint}: {detail}")
        return None

    def _scrub(self, text: str) -> str:
        """``text`` without the key's pass phrase or inline key, should an error echo them."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text
