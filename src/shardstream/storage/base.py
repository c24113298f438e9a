"""The contract every storage backend fulfils."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ObjectStore"]


class ObjectStore(Protocol):
    """A place shards are published to, addressed by keys relative to a dataset root.

    ``put_file`` must be atomic from a reader's point of view: the object appears under ``key``
    whole or not at all. It raises ``OSError`` (or a subclass) on failure; callers retry.
    """

    def put_file(self, local_path: str, key: str) -> None:
        """Publish the file at ``local_path`` under ``key``."""

    def url(self, key: str) -> str:
        """The full URL of ``key``, for messages and logs (never with credentials)."""
