"""The contract every storage backend fulfils."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ObjectInfo", "ObjectStore", "Publisher", "Remover"]


@dataclass(frozen=True)
class ObjectInfo:
    """What a store says about one object without sending its bytes.

    Attributes:
        size: The object's size in bytes.
        etag: The store's version tag (ETag, generation, or a local file's size and mtime), or
            ``None`` when the backend has none. Two reads with the same etag see the same bytes.
    """

    size: int
    etag: str | None = None


class Publisher(Protocol):
    """What a writer needs of a store: publish files under keys, and name them in messages."""

    def url(self, key: str) -> str:
        """The full URL of ``key``, for messages and logs (never with credentials)."""

    def put_file(self, local_path: str, key: str) -> None:
        """Publish the file at ``local_path`` under ``key``, atomically for readers."""


class ObjectStore(Publisher, Protocol):
    """A dataset root on some storage, addressed by keys relative to that root.

    Keys use ``/`` and never start with ``/`` or contain ``..`` (backends refuse such keys with
    ``ConfigurationError``). Every method may do I/O; constructors never do.

    Errors: a missing object raises :class:`~shardstream.errors.ObjectNotFoundError`, refused or
    missing credentials :class:`~shardstream.errors.CredentialsError`, anything else the store
    or the network did :class:`~shardstream.errors.StorageError` (all ``OSError`` subclasses). A
    message names the full URL and never holds a secret.
    """

    def url(self, key: str) -> str:
        """The full URL of ``key``, for messages and logs (never with credentials)."""

    def put_file(self, local_path: str, key: str) -> None:
        """Publish the file at ``local_path`` under ``key``.

        Atomic from a reader's point of view: the object appears under ``key`` whole or not at
        all. Callers retry.
        """

    def get_bytes(self, key: str) -> bytes:
        """The whole object under ``key``."""

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        """Bytes ``start .. end - 1`` of the object under ``key`` (``0 <= start <= end``).

        A range that runs past the end of the object raises
        :class:`~shardstream.errors.StorageError` (never a short read); ``start > end`` or a
        negative ``start`` raises :class:`~shardstream.errors.ConfigurationError`. An empty
        range (``start == end``) returns ``b""`` without asking the store. With ``if_match`` (a
        listing's version tag), the bytes come only from that version of the object, else
        :class:`~shardstream.errors.ObjectChangedError`; a store that cannot tie a range to a
        version raises :class:`~shardstream.errors.UnsupportedURLError`.
        """

    def info(self, key: str) -> ObjectInfo:
        """The size and version tag of the object under ``key``."""

    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key`` (a "folder" holding objects is not one)."""

    def list(self, prefix: str = "") -> list[str]:
        """The keys of all objects under the root that start with ``prefix``, sorted.

        ``prefix`` is a plain string prefix (``"a/b"`` matches ``a/b.bin`` and ``a/b/c``), keys
        of nested objects are full paths relative to the root, and "folders" are not keys.
        """

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list`, with each object's size and version tag: one listing, no request a key.

        What the cache compares with the objects its files came from (a dataset rewritten in
        place under the same names changes its objects' tags).

        Raises:
            UnsupportedURLError: The store has no listing (HTTP).
        """


@runtime_checkable
class Remover(Protocol):
    """A store a writer may delete from: every writable backend (HTTP is read-only)."""

    def delete(self, key: str) -> None:
        """Delete the object under ``key``; a missing object is not an error (already gone)."""
