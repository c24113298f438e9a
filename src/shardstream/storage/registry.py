"""Choosing a storage backend from a URL."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from shardstream.errors import ConfigurationError, UnsupportedURLError
from shardstream.storage.azure import SCHEMES as AZURE_SCHEMES
from shardstream.storage.azure import AzureStore
from shardstream.storage.base import ObjectStore
from shardstream.storage.databricks import DatabricksVolumeStore
from shardstream.storage.gcs import GCSStore
from shardstream.storage.http import HTTPStore
from shardstream.storage.keys import url_for_message
from shardstream.storage.local import LocalStore
from shardstream.storage.oci import OCIStore
from shardstream.storage.s3 import S3Store

__all__ = ["is_remote", "local_path", "open_store"]

_CONNECT_TIMEOUT = 10.0  # the backends' default wait for a connection


def _scheme(url: str) -> str:
    scheme = urlsplit(url).scheme
    # A Windows drive letter ("C:\\data") is not a scheme.
    return "" if len(scheme) <= 1 else scheme.lower()


def is_remote(url: str) -> bool:
    """True when ``url`` names an object store rather than a local path (``file://`` is local)."""
    return _scheme(url) not in ("", "file")


def local_path(url: str) -> str:
    """The local path of a plain path or ``file://`` URL, with ``~`` expanded."""
    if _scheme(url) == "file":
        url = urlsplit(url).path
    return os.path.expanduser(url)


def open_store(url: str, *, timeout: float | None = None, **options: Any) -> ObjectStore:
    """Return the backend for the dataset root ``url``.

    Local folders and ``file://`` URLs (:class:`LocalStore`), ``s3://`` (:class:`S3Store`)
    and, read-only, ``http://`` and ``https://`` (:class:`HTTPStore`),
    ``oci://bucket@namespace/prefix`` (:class:`OCIStore`), ``dbfs:/Volumes/...``
    (:class:`DatabricksVolumeStore`), ``gs://`` (:class:`GCSStore`) and ``azure://``, ``az://``,
    ``abfs://`` and ``abfss://`` (:class:`AzureStore`).

    Opening does no I/O: credentials and the connection are checked on first use.

    Args:
        url: The dataset root.
        timeout: Seconds every request of a remote store may wait on the network: to connect
            (at most 10 s, the backends' default) and between two reads or writes of a socket,
            for reads, listings and uploads alike. A server that stops answering then fails a
            request after about ``timeout``. Options naming a backend's own timeouts win;
            ``None`` keeps the backend's defaults; a local folder ignores it.
        **options: Keyword arguments for the backend's constructor, e.g.
            ``read_timeout=30`` or ``anon=True`` for ``s3://``, ``headers=...`` for ``https://``.

    Raises:
        UnsupportedURLError: No backend handles the URL's scheme in this version.
        ConfigurationError: The backend refused the URL or an option, or ``timeout`` is not a
            positive number.
    """
    scheme = _scheme(url)
    if timeout is not None:
        options = {**_timeouts(url, scheme, timeout), **options}
    if scheme in ("", "file"):
        if options:
            raise ConfigurationError(
                f"open_store({url!r}): a local folder takes no options (got {sorted(options)})"
            )
        return LocalStore(local_path(url))
    if scheme == "s3":
        return S3Store(url, **options)
    if scheme in ("http", "https"):
        return HTTPStore(url, **options)
    if scheme == "oci":
        return OCIStore(url, **options)
    if scheme in ("gs", "gcs"):
        return GCSStore(url, **options)
    if scheme in AZURE_SCHEMES:  # azure://, az://, abfs:// and abfss://
        return AzureStore(url, **options)
    if scheme == "dbfs":  # Unity Catalog volumes; other dbfs:/ paths raise UnsupportedURLError
        return DatabricksVolumeStore(url, **options)
    raise UnsupportedURLError(
        f"cannot publish to {url_for_message(url)!r} or read from it: this version of "
        f"shardstream has no storage backend for '{scheme}://' (it has file://, s3://, gs://, "
        "azure://, oci://, dbfs:/Volumes and, to read, http(s)://). Write to a local folder "
        "or a file:// URL, then copy the folder."
    )


def _timeouts(url: str, scheme: str, timeout: float) -> dict[str, float]:
    """``timeout`` as the constructor arguments of the backend for ``scheme``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigurationError(
            f"open_store({url_for_message(url)!r}): timeout={timeout!r} must be a positive "
            "number of seconds"
        )
    seconds = float(timeout)
    if scheme in ("", "file"):
        return {}  # no network: nothing to wait for
    if scheme in ("http", "https"):
        return {"timeout": seconds}
    if scheme == "dbfs":  # urllib has one timeout for connecting and reading
        return {"read_timeout": seconds}
    return {"connect_timeout": min(seconds, _CONNECT_TIMEOUT), "read_timeout": seconds}
