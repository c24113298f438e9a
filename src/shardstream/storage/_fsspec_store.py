"""The part of the GCS and Azure backends that does not depend on the cloud: one fsspec filesystem.

A subclass says how to create its filesystem (lazily, on first use), how to turn the SDK's
exceptions into shardstream's, and which secrets must never appear in a message. This class
implements the :class:`~shardstream.storage.base.ObjectStore` contract on top of that.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from shardstream.errors import (
    ConfigurationError,
    ObjectNotFoundError,
    ShardstreamError,
    StorageError,
)
from shardstream.storage.answers import exists_by_info
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key, check_range

__all__ = ["FsspecStore"]

# Signatures of shared-access URLs, should an SDK ever put one in an error message.
_SIGNATURE = re.compile(r"(?i)\b(sig|signature|accountkey|sharedaccesssignature)=([^&;\s'\"]+)")


class FsspecStore:
    """A bucket (or container) and prefix reached through one fsspec filesystem.

    Subclasses set ``scheme``, ``bucket``, ``prefix`` and ``_netloc`` in their constructor,
    call :meth:`_init_store` (which checks and keeps the timeouts), and implement
    :meth:`_create_filesystem` and :meth:`_translate`.
    """

    scheme: str
    bucket: str
    prefix: str
    _netloc: str

    def _init_store(self, connect_timeout: float, read_timeout: float) -> None:
        if not (connect_timeout > 0 and read_timeout > 0):
            raise ConfigurationError(
                f"{type(self).__name__}({self.url('')!r}): connect_timeout={connect_timeout} and "
                f"read_timeout={read_timeout} must be positive numbers of seconds"
            )
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self._fs: Any = None
        self._fs_pid = os.getpid()
        self._lock = threading.Lock()

    # --- the ObjectStore protocol ---------------------------------------------------------------

    def url(self, key: str) -> str:
        """``scheme://bucket/prefix/key``, as the store was named (never with credentials)."""
        return f"{self.scheme}://" + "/".join(
            part for part in (self._netloc, self.prefix, key) if part
        )

    def put_file(self, local_path: str, key: str) -> None:
        """Upload the file at ``local_path`` to ``key``.

        Raises:
            FileNotFoundError: ``local_path`` does not exist (the caller's mistake, not ours).
            ObjectNotFoundError: The bucket or container does not exist.
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        os.stat(local_path)
        with self._boundary("uploading to", key):
            self._filesystem().put_file(local_path, path)

    def delete(self, key: str) -> None:
        """Delete the object under ``key`` (a missing object is already gone).

        Raises:
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        with contextlib.suppress(ObjectNotFoundError), self._boundary("deleting", key):
            self._filesystem().rm_file(path)

    def get_bytes(self, key: str) -> bytes:
        """The whole object under ``key``.

        Raises:
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        with self._boundary("reading", key):
            data: bytes = self._filesystem().cat_file(path)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start .. end - 1`` of the object under ``key``, in one ranged request.

        Raises:
            ConfigurationError: The range is negative or reversed.
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: The range runs past the end of the object, or the request failed.
        """
        path = self._path(key)
        check_range(start, end, self.url(key))
        if start == end:
            return b""
        with self._boundary("reading", key):
            data: bytes = self._filesystem().cat_file(path, start=start, end=end)
        if len(data) != end - start:
            raise StorageError(
                f"reading {self.url(key)}: byte range [{start}, {end}) runs past the end of the "
                f"object (the server sent {len(data)} bytes)"
            )
        return data

    def info(self, key: str) -> ObjectInfo:
        """The object's size and version tag, from one metadata request.

        Raises:
            ObjectNotFoundError: No object under ``key`` (a "folder" is not an object).
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        path = self._path(key)
        with self._boundary("checking", key):
            details: dict[str, Any] = self._filesystem().info(path)
        if details.get("type") != "file":
            raise ObjectNotFoundError(f"checking {self.url(key)} failed: it is a prefix, no object")
        return ObjectInfo(size=int(details["size"]), etag=self._etag(details))

    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key`` (a prefix of other keys is not one).

        Raises:
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        return exists_by_info(self.info, key)

    def list(self, prefix: str = "") -> list[str]:
        """The keys (relative to the store's root) that start with ``prefix``, sorted.

        Raises:
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        return sorted(self.list_info(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list`, with each object's size and version tag, from the same listing.

        Raises:
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        root = self._path("")
        # Ask only for the deepest folder the prefix names, then filter by the rest of it.
        folder = prefix.rpartition("/")[0]
        base = self._path(folder) if folder else root
        with self._boundary("listing", prefix):
            found: dict[str, dict[str, Any]] = self._filesystem().find(base, detail=True)
        inside = root + "/"  # "bucket/ds/", so that "bucket/ds2/..." never counts
        infos: dict[str, ObjectInfo] = {}
        for path, details in found.items():
            key = path[len(inside) :] if path.startswith(inside) else ""
            if key and key.startswith(prefix) and details.get("type", "file") == "file":
                infos[key] = ObjectInfo(size=int(details["size"]), etag=self._etag(details))
        return infos

    # --- for subclasses -------------------------------------------------------------------------

    def _create_filesystem(self) -> Any:
        """Import the SDK and create the fsspec filesystem (may check credentials)."""
        raise NotImplementedError

    def _translate(self, exc: Exception, where: str) -> StorageError:
        """The shardstream error for ``exc``, raised while doing ``where`` (action and URL)."""
        raise NotImplementedError

    def _secrets(self) -> Sequence[str]:
        """Every secret this store holds, to be removed from messages."""
        return []

    def _etag(self, details: dict[str, Any]) -> str | None:
        etag = details.get("etag")
        return str(etag).strip('"') if etag else None

    # --- internals ------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        """``bucket/prefix/key`` as fsspec spells it."""
        check_key(key, self.url(""))
        return "/".join(part for part in (self.bucket, self.prefix, key) if part)

    def _filesystem(self) -> Any:
        """The filesystem, created on first use (so the constructor does no I/O).

        A forked process (a DataLoader worker) makes its own: fsspec's event loop and
        connections do not survive a fork.
        """
        if self._fs_pid != os.getpid():
            self._lock = threading.Lock()  # a lock copied mid-use by fork would never open
            self._fs, self._fs_pid = None, os.getpid()
        with self._lock:
            if self._fs is None:
                self._fs = self._create_filesystem()
            return self._fs

    @contextlib.contextmanager
    def _boundary(self, action: str, key: str) -> Iterator[None]:
        """Turn the SDK's errors into shardstream's, naming the URL and holding no secret."""
        try:
            yield
        except ShardstreamError:
            raise
        except Exception as exc:
            translated = self._translate(exc, f"{action} {self.url(key)}")
            if self._holds_secret(exc):
                # A traceback prints the chained exception too: keep it out when it holds one.
                raise translated from None
            raise translated from exc

    def _holds_secret(self, exc: BaseException) -> bool:
        """Whether ``exc`` or an exception it was raised from mentions a secret."""
        seen: BaseException | None = exc
        visited: set[int] = set()
        while seen is not None and id(seen) not in visited:
            visited.add(id(seen))
            text = f"{seen!r} {seen}"
            if self._scrub(text) != text:
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    def _scrub(self, text: str) -> str:
        """``text`` without this store's secrets or anything that looks like a signature."""
        secrets: set[str] = set()
        for secret in self._secrets():
            # The secret, as a repr() would escape it, and each long line of a multi-line one
            # (a PEM private key).
            secrets.update((secret, secret.encode("unicode_escape").decode("ascii")))
            secrets.update(line for line in secret.splitlines() if len(line) >= 16)
        for secret in sorted(filter(None, secrets), key=len, reverse=True):
            text = text.replace(secret, "***")
        return _SIGNATURE.sub(lambda match: f"{match.group(1)}=***", text)
