"""The primitives of the GCS and Azure backends, on one fsspec filesystem.

A subclass says how to create its filesystem (lazily, on first use), what the SDK's exceptions
mean, and which secrets must never appear in a message; :class:`~shardstream.storage.
store_base.BaseStore` builds the :class:`~shardstream.storage.base.ObjectStore` contract on
these primitives.
"""

from __future__ import annotations

from typing import Any

from shardstream.errors import ObjectNotFoundError
from shardstream.storage.answers import tag
from shardstream.storage.base import ObjectInfo
from shardstream.storage.store_base import WritableStore

__all__ = ["FsspecStore"]


class FsspecStore(WritableStore):
    """A bucket (or container) and prefix reached through one fsspec filesystem.

    Subclasses set ``scheme``, ``bucket``, ``prefix`` and ``_netloc`` in their constructor,
    call :meth:`_init_store` (which checks and keeps the timeouts), and implement
    :meth:`_create_filesystem` and :meth:`_classify`.
    """

    scheme: str
    bucket: str
    prefix: str
    _netloc: str
    _clients: tuple[str, ...] = ("_fs",)
    _fs: Any

    def _init_store(self, connect_timeout: float, read_timeout: float) -> None:
        self._check_timeouts(connect_timeout=connect_timeout, read_timeout=read_timeout)
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        super().__init__()

    def url(self, key: str) -> str:
        """``scheme://bucket/prefix/key``, as the store was named (never with credentials)."""
        return f"{self.scheme}://" + "/".join(
            part for part in (self._netloc, self.prefix, key) if part
        )

    # --- the primitives -------------------------------------------------------------------------

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        path = self._path(key)
        whole = start == 0 and end is None
        data: bytes = (
            self._filesystem().cat_file(path)
            if whole
            else self._filesystem().cat_file(path, start=start, end=end)
        )
        return data

    def _write(self, local_path: str, key: str) -> None:
        self._filesystem().put_file(local_path, self._path(key))

    def _remove(self, key: str) -> None:
        self._filesystem().rm_file(self._path(key))

    def _head(self, key: str) -> ObjectInfo:
        details: dict[str, Any] = self._filesystem().info(self._path(key))
        if details.get("type") != "file":
            raise ObjectNotFoundError(f"checking {self.url(key)} failed: it is a prefix, no object")
        return ObjectInfo(size=int(details["size"]), etag=self._etag(details))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """The whole listing as one page (fsspec's ``find`` follows the pages itself)."""
        root = self._path("")
        # Ask only for the deepest folder the prefix names, then filter by the rest of it.
        folder = prefix.rpartition("/")[0]
        found: dict[str, dict[str, Any]] = self._filesystem().find(
            self._path(folder) if folder else root, detail=True
        )
        inside = root + "/"  # "bucket/ds/", so that "bucket/ds2/..." never counts
        infos: dict[str, ObjectInfo] = {}
        for path, details in found.items():
            key = path[len(inside) :] if path.startswith(inside) else ""
            if (
                key.startswith(prefix)
                and (start_after is None or key > start_after)
                and details.get("type", "file") == "file"
                and key
            ):
                infos[key] = ObjectInfo(size=int(details["size"]), etag=self._etag(details))
        return infos, None

    # --- for subclasses -------------------------------------------------------------------------

    def _create_filesystem(self) -> Any:
        """Import the SDK and create the fsspec filesystem (may check credentials)."""
        raise NotImplementedError

    def _etag(self, details: dict[str, Any]) -> str | None:
        return tag(details.get("etag"))

    # --- internals ------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        """``bucket/prefix/key`` as fsspec spells it."""
        self._key(key)
        return "/".join(part for part in (self.bucket, self.prefix, key) if part)

    def _filesystem(self) -> Any:
        """The filesystem, created on first use (so the constructor does no I/O)."""
        return self._lazy("_fs", self._create_filesystem)
