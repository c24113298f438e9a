"""A dataset named on the command line: its index, and its shard files on local disk.

A local folder is read in place. A remote dataset (any URL :func:`open_store` opens) has its
``index.json`` fetched, and each shard's stored file is downloaded on demand into a cache
folder (``--cache``, or a temporary folder removed at exit), with the retries and timeouts of
every other download.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from shardstream.cache.shard_files import shard_file_pairs
from shardstream.dataset import LocalDataset
from shardstream.errors import ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME, FileInfo, ShardEntry, parse_index
from shardstream.storage import (
    ObjectStore,
    download_file,
    fetch_bytes,
    is_remote,
    local_path,
    open_store,
)

__all__ = ["DatasetSource", "open_source", "stored_files"]


@dataclass
class DatasetSource:
    """The dataset at ``url``: its entries, and where its files are (or will be) local."""

    url: str
    entries: list[ShardEntry]
    local: str
    store: ObjectStore | None = None
    progress: Any = None  # a tqdm bar of bytes downloaded, or None
    _fetched: set[int] = field(default_factory=set)

    def fetch(self, shard: int) -> None:
        """Make the stored files of shard ``shard`` present locally (no-op for a local folder)."""
        if self.store is None or shard in self._fetched:
            return
        for info in stored_files(self.entries[shard]):
            dest = os.path.join(self.local, info.basename)
            with contextlib.suppress(OSError):
                if os.path.getsize(dest) == info.bytes:
                    continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            download_file(self.store, info.basename, dest, expected_size=info.bytes)
            if self.progress is not None:
                self.progress.update(info.bytes)
        self._fetched.add(shard)

    def drop(self, shard: int) -> None:
        """Delete a remote shard's downloaded files (no-op for a local folder)."""
        if self.store is None:
            return
        for info in stored_files(self.entries[shard]):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.local, info.basename))
        self._fetched.discard(shard)

    def dataset(self, **options: Any) -> LocalDataset:
        """A reader over the local files (fetch the shards it reads first)."""
        return LocalDataset(self.local, entries=self.entries, **options)

    @property
    def samples(self) -> int:
        """Samples in the dataset."""
        return sum(entry.samples for entry in self.entries)


def stored_files(entry: ShardEntry) -> list[FileInfo]:
    """The files a shard is stored as: each compressed one, or else the uncompressed one."""
    return [zipped or raw for raw, zipped in shard_file_pairs(entry)]


@contextlib.contextmanager
def open_source(
    url: str, cache: str | None = None, *, progress: bool = False
) -> Iterator[DatasetSource]:
    """Open the dataset at ``url``: a local folder, or a remote one cached under ``cache``.

    With ``progress``, a remote dataset's downloads show a bar of bytes (on stderr).

    Raises:
        ShardNotFoundError / ObjectNotFoundError: There is no ``index.json`` at ``url``.
        IndexFormatError: The index is malformed.
    """
    if not is_remote(url):
        local = local_path(url)
        path = os.path.join(local, INDEX_BASENAME)
        try:
            with open(path, "rb") as handle:
                entries = parse_index(handle.read(), source=path)
        except FileNotFoundError as exc:
            raise ShardNotFoundError(
                f"no {INDEX_BASENAME} in {local}: is it the dataset's root folder?"
            ) from exc
        yield DatasetSource(url, entries, local)
        return
    store = open_store(url)
    entries = parse_index(fetch_bytes(store, INDEX_BASENAME), source=store.url(INDEX_BASENAME))
    with contextlib.ExitStack() as stack:
        if cache is None:
            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="shardstream-cli-"))
        os.makedirs(cache, exist_ok=True)
        bar = None
        if progress:
            bar = stack.enter_context(
                tqdm(desc="downloaded", unit="B", unit_scale=True, leave=False, dynamic_ncols=True)
            )
        yield DatasetSource(url, entries, cache, store, bar)
