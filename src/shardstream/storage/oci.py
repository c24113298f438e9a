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
ListObjects (paged with ``start`` / ``nextStartWith``; key ranges listed at once start with
``startAfter``). A single PutObject takes up to 50 GiB
and is atomic for readers, which covers every MDS shard (at most 4 GiB), so multipart uploads
are not needed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from shardstream import config
from shardstream._optional import require
from shardstream.errors import ConfigurationError, CredentialsError
from shardstream.storage.answers import info_from_headers, range_header, tag
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import split_store_url
from shardstream.storage.store_base import Failure, Kind, WritableStore

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
    """``(bucket, namespace, prefix)`` of ``oci://bucket@namespace/prefix`` (prefix optional).

    Raises:
        ConfigurationError: The URL is not of that form.
    """
    parts = split_store_url(url, ("oci",), "an OCI URL", "oci://bucket@namespace[/prefix]")
    bucket, at, namespace = parts.netloc.partition("@")
    if not at or not bucket or not namespace or "@" in namespace:
        raise ConfigurationError(
            f"{url!r} is not an oci://bucket@namespace[/prefix] URL: it needs both the bucket and "
            "the Object Storage namespace (shown by `oci os ns get`)"
        )
    return bucket, namespace, parts.path.strip("/")


class OCIStore(WritableStore):
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

    # An empty range past the end is refused as a ranged GetObject would refuse it.
    _empty_range_asks = True
    _lists_from_key = True  # ListObjects' startAfter, in name order
    _identifies_reads = True  # a GetObject's ETag and Content-Length
    _default_endpoint = "the profile's region"
    _credentials_text = _CREDENTIALS_HELP
    _clients = ("_local",)  # one SDK client a thread, and none of a parent's in a forked child
    _local: threading.local | None

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
        self._check_timeouts(connect_timeout=connect_timeout, read_timeout=read_timeout)
        self.timeouts = (float(connect_timeout), float(read_timeout))
        self.endpoint_url = endpoint_url if endpoint_url is not None else config.oci_endpoint_url()
        self.config_file = os.path.expanduser(
            config_file if config_file is not None else config.oci_config_file()
        )
        self.profile = profile if profile is not None else config.oci_profile()
        self._profile: dict[str, Any] | None = None
        self._profile_secrets: tuple[str, ...] = ()
        super().__init__()

    def __repr__(self) -> str:
        return f"OCIStore({self.url('')!r}, endpoint_url={self.endpoint_url!r})"

    def url(self, key: str) -> str:
        """``oci://bucket@namespace/prefix/key`` (never with credentials)."""
        path = "/".join(part for part in (self.prefix, key) if part)
        return f"oci://{self.bucket}@{self.namespace}" + (f"/{path}" if path else "")

    # --- the primitives -------------------------------------------------------------------------

    def _write(self, local_path: str, key: str) -> None:
        """One PutObject (atomic for readers)."""
        size = os.stat(local_path).st_size
        with open(local_path, "rb") as body:
            self._oci_client().put_object(
                self.namespace, self.bucket, self._name(key), body, content_length=size
            )

    def _remove(self, key: str) -> None:
        self._oci_client().delete_object(self.namespace, self.bucket, self._name(key))

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        wanted = range_header(start, end)
        options = {"range": wanted} if wanted else {}
        response = self._oci_client().get_object(
            self.namespace, self.bucket, self._name(key), **options
        )
        data: bytes = response.data.content
        return data

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        response = self._oci_client().get_object(self.namespace, self.bucket, self._name(key))
        data: bytes = response.data.content
        return data, info_from_headers(response.headers, self.url(key))

    def _head(self, key: str) -> ObjectInfo:
        response = self._oci_client().head_object(self.namespace, self.bucket, self._name(key))
        return info_from_headers(response.headers, self.url(key))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One ListObjects page (``start`` / ``nextStartWith``, with its ``fields``)."""
        root = f"{self.prefix}/" if self.prefix else ""
        options: dict[str, Any] = {"prefix": root + prefix, "fields": "name,size,etag"}
        options["limit"] = _PAGE_LIMIT
        if token is not None:
            options["start"] = token
        elif start_after is not None:
            options["start_after"] = root + start_after
        page = self._oci_client().list_objects(self.namespace, self.bucket, **options).data
        infos: dict[str, ObjectInfo] = {}
        for item in page.objects or ():
            infos[item.name[len(root) :]] = ObjectInfo(
                size=int(getattr(item, "size", None) or 0), etag=tag(getattr(item, "etag", None))
            )
        return infos, page.next_start_with or None

    def _classify(self, exc: Exception) -> Failure | None:
        oci = require("oci", extra="oci", purpose=_PURPOSE)
        if isinstance(exc, oci.exceptions.ServiceError):
            detail = f"HTTP {exc.status} {exc.code}: {exc.message}"
            if exc.status in _AUTH_STATUSES:
                return Failure(Kind.CREDENTIALS, detail)
            if exc.status == 404:
                return Failure(Kind.NOT_FOUND, detail)
            if exc.status == 416:
                return Failure(Kind.PAST_END, detail)
            return Failure(Kind.OTHER, detail)
        if isinstance(exc, oci.exceptions.ClientError):
            return Failure(Kind.CREDENTIALS, f"{type(exc).__name__}: {exc}")
        if isinstance(
            exc, (OSError, oci.exceptions.RequestException, oci.exceptions.ConnectTimeout)
        ):
            return Failure(Kind.OTHER, f"{type(exc).__name__}: {exc}")
        return None

    def _secrets(self) -> Sequence[str]:
        """The key's pass phrase or inline key, should an error echo them."""
        return self._profile_secrets

    # --- internals ------------------------------------------------------------------------------

    def _name(self, key: str) -> str:
        """The object name of ``key``: ``prefix/key``."""
        self._key(key)
        return "/".join(part for part in (self.prefix, key) if part)

    def _oci_client(self) -> Any:
        """This thread's ObjectStorageClient, made on first use (so the constructor does no I/O).

        The config file is read once per store; each thread gets its own client, because the
        SDK's clients hold a ``requests`` session, which is not documented as thread-safe.
        """
        local = self._lazy("_local", threading.local)
        client = getattr(local, "client", None)
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
            local.client = client
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
                self._profile_secrets = tuple(
                    str(profile[name])
                    for name in ("pass_phrase", "key_content")
                    if profile.get(name)
                )
                self._profile = dict(profile)
            return self._profile
