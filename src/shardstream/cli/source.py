"""A dataset named on the command line: its index, and its shard files on local disk.

A local folder is read in place. A remote dataset (any URL :func:`open_store` opens) has its
``index.json`` fetched, and each shard's stored file is downloaded on demand into a cache
folder (``--cache``, or a temporary folder removed at exit), with the retries and timeouts of
every other download. A kept ``--cache`` folder is checked against the remote as a stream's
cache is (:mod:`shardstream.cache.index_sync`): what changed remotely is downloaded again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from shardstream.cache.index_sync import sync_index
from shardstream.cache.safe_paths import read_file
from shardstream.cache.shard_files import shard_file_pairs
from shardstream.cli.arguments import count, dataset_root, positive_seconds
from shardstream.dataset import LocalDataset
from shardstream.dataset.splits import local_splits, remote_splits, split_advice
from shardstream.errors import (
    ObjectNotFoundError,
    ShardNotFoundError,
    UnsupportedURLError,
)
from shardstream.format.index import INDEX_BASENAME, FileInfo, ShardEntry, parse_index
from shardstream.storage import (
    DownloadOptions,
    ObjectStore,
    download_file,
    fetch_listing,
    is_remote,
    local_path,
    open_store,
)
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.delta_log import LOG_FOLDER, read_snapshot
from shardstream.tables.layout_index import (
    is_parquet_key,
    local_file_layouts,
    local_layouts,
    parquet_files,
    sync_layouts,
)

__all__ = ["DatasetSource", "add_dataset_arguments", "open_source", "stored_files"]


def add_dataset_arguments(parser: argparse.ArgumentParser, *, parquet_file: bool = False) -> None:
    """The dataset a command reads: its root, a split below it, and how to download it.

    With ``parquet_file``, the root may also be one local Parquet file.
    """
    parser.add_argument(
        "url",
        type=dataset_root(parquet_file=parquet_file),
        help="the dataset root: a folder (MDS, Parquet or Delta) or a URL (s3://, gs://, ...)"
        + ("; or one Parquet file" if parquet_file else ""),
    )
    parser.add_argument("--split", default="", help="the split (sub-folder) to read, e.g. train")
    parser.add_argument(
        "--retry", type=count(0), default=2, help="retries of each failed download request (2)"
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        help="seconds each download request may take (60)",
    )


def download_options(args: argparse.Namespace) -> DownloadOptions:
    """The command line's retries and timeout (checked as they were parsed)."""
    return DownloadOptions(retry=args.retry, timeout=args.timeout)


@dataclass
class DatasetSource:
    """The dataset at ``url``: its entries, and where its files are (or will be) local."""

    url: str
    entries: list[ShardEntry]
    local: str
    store: ObjectStore | None = None
    progress: bool = False  # draw a bar of bytes downloaded (on the first download)
    options: DownloadOptions = field(default_factory=DownloadOptions)
    parquet: ParquetDataset | None = None  # Parquet files: read in place, or row groups fetched
    _fetched: set[int] = field(default_factory=set)
    _bar: Any = None

    @property
    def format(self) -> str:
        """What the dataset is: ``mds``, ``parquet`` or ``delta`` (a table's version)."""
        if self.parquet is None:
            return "mds"
        return "parquet" if self.parquet.snapshot is None else "delta"

    def _count(self, size: int) -> None:
        """Count downloaded bytes.

        The bar is drawn at the first, so a command that refuses its arguments (or reads
        nothing) draws none.
        """
        if not self.progress:
            return
        if self._bar is None:
            self._bar = tqdm(
                desc="downloaded", unit="B", unit_scale=True, leave=False, dynamic_ncols=True
            )
        self._bar.update(size)

    def close(self) -> None:
        """Remove the bar, if one was drawn."""
        if self._bar is not None:
            self._bar.close()

    def fetch(self, shard: int) -> None:
        """Make the stored files of shard ``shard`` present locally (no-op for a local folder)."""
        if self.store is None or shard in self._fetched:
            return
        fetcher = None if self.parquet is None else self.parquet.fetcher
        if fetcher is not None:  # a remote Parquet row group: its byte span only
            entry = self.entries[shard]
            fetcher.fetch(self.store, entry, os.path.join(self.local, entry.raw_data.basename),
                          self.options)  # fmt: skip
            self._count(entry.raw_data.bytes)
            self._fetched.add(shard)
            return
        for info in stored_files(self.entries[shard]):
            dest = os.path.join(self.local, info.basename)
            with contextlib.suppress(OSError):
                if os.path.getsize(dest) == info.bytes:
                    continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            download_file(self.store, info.basename, dest, self.options, expected_size=info.bytes)
            self._count(info.bytes)
        self._fetched.add(shard)

    def drop(self, shard: int) -> None:
        """Delete a remote shard's downloaded files (no-op for a local folder)."""
        if self.store is None:
            return
        for info in stored_files(self.entries[shard]):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.local, info.basename))
        self._fetched.discard(shard)

    def dataset(self, **options: Any) -> LocalDataset | ParquetDataset:
        """A reader over the local files (fetch the shards it reads first)."""
        if self.parquet is not None:
            return self.parquet
        # A remote's shards are fetched one by one: an empty one is checked when it is opened.
        return LocalDataset(
            self.local, entries=self.entries, check_empty=self.store is None, **options
        )

    @property
    def shard_bytes(self) -> list[int]:
        """What each shard costs to download: its stored file, or a Parquet row group's span."""
        if self.parquet is None:
            return [entry.data_file.bytes for entry in self.entries]
        return [group.nbytes for layout in self.parquet.layouts for group in layout.row_groups]

    @property
    def stored_bytes(self) -> int:
        """The bytes of the dataset's files (a Parquet file counted once, not per row group)."""
        files = {entry.data_file.basename: entry.data_file.bytes for entry in self.entries}
        return sum(files.values())

    @property
    def samples(self) -> int:
        """Samples in the dataset."""
        return sum(entry.samples for entry in self.entries)


def stored_files(entry: ShardEntry) -> list[FileInfo]:
    """The files a shard is stored as: each compressed one, or else the uncompressed one."""
    return [zipped or raw for raw, zipped in shard_file_pairs(entry)]


@contextlib.contextmanager
def open_source(
    url: str,
    cache: str | None = None,
    *,
    progress: bool = False,
    options: DownloadOptions | None = None,
    split: str = "",
) -> Iterator[DatasetSource]:
    """Open the dataset at ``url`` (its ``split``): a local folder, or a remote one cached.

    A remote dataset's files are downloaded into ``cache`` (default: a temporary folder).

    A dataset without ``index.json`` is read as the library streams it: the latest version of
    a Delta table where a ``_delta_log/`` is, else its ``*.parquet`` files; each row group is
    a shard (fetched alone from a remote). A local ``url`` may also be one Parquet file. With
    ``progress``, a remote dataset's downloads show a bar of bytes (on stderr), drawn at the
    first download.

    Raises:
        ShardNotFoundError / ObjectNotFoundError: There is no ``index.json`` at ``url`` (the
            message lists the splits there are and says ``--split``).
        IndexFormatError: The index is malformed.
    """
    options = options or DownloadOptions()
    root, split = url, split.strip("/")
    url = root.rstrip("/") + "/" + split if split else root
    if not is_remote(url):
        source = _open_local(url, root, split, options)
        source.progress = progress
        yield source
        return
    store = open_store(url, timeout=options.timeout)
    with contextlib.ExitStack() as stack:
        if cache is None:
            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="shardstream-cli-"))
        os.makedirs(cache, exist_ok=True)
        parquet = None
        try:
            # As a stream's cache: the files of objects changed since they were downloaded
            # into a kept --cache folder are dropped (identities, never sizes or times).
            synced = sync_index(store, cache, options)
            entries = synced if synced is not None else _cached_index(cache)
        except ObjectNotFoundError as exc:
            parquet = _remote_table(url, store, cache, options)
            if parquet is None:
                advice = split_advice(split, remote_splits(root, options), flag="--split")
                raise ObjectNotFoundError(_no_index(url, advice)) from exc
            entries = parquet.shards
        source = DatasetSource(url, entries, cache, store, progress, options, parquet)
        stack.callback(source.close)
        yield source


def _open_local(url: str, root: str, split: str, options: DownloadOptions) -> DatasetSource:
    """A local dataset, read in place; or one Parquet file.

    As a stream reads a folder: MDS where ``index.json`` is, else the latest version of a
    Delta table, else Parquet files.
    """
    local = local_path(url)
    if os.path.isfile(local):  # one Parquet file (the arguments' types refused other files)
        folder, name = os.path.split(os.path.abspath(local))
        one = ParquetDataset(folder, local_file_layouts(folder, [name]), source=url)
        return DatasetSource(url, one.shards, folder, parquet=one)
    path = os.path.join(local, INDEX_BASENAME)
    try:
        with open(path, "rb") as handle:
            entries = parse_index(handle.read(), source=path)
        return DatasetSource(url, entries, local)
    except (FileNotFoundError, NotADirectoryError) as exc:
        parquet: ParquetDataset | None = (
            _delta(url, None, local, options)
            if os.path.isdir(os.path.join(local, LOG_FOLDER))
            else _local_parquet(local)
        )
        if parquet is None:
            advice = split_advice(split, local_splits(local_path(root)), flag="--split")
            raise ShardNotFoundError(_no_index(local, advice)) from exc
        return DatasetSource(url, parquet.shards, local, parquet=parquet)


def _delta(
    url: str, store: ObjectStore | None, local: str, options: DownloadOptions
) -> ParquetDataset:
    """The latest version of the Delta table at ``url`` (remote: its log copied into ``local``)."""
    snapshot, infos = read_snapshot(url, store, local, None, options)
    keys = [file.key for file in snapshot.files]
    if store is None:
        layouts = local_file_layouts(local, keys)
    else:
        assert infos is not None
        layouts = sync_layouts(store, local, options, infos) if keys else []
    return ParquetDataset(local, layouts, cached=store is not None, source=url, snapshot=snapshot)


def _local_parquet(local: str) -> ParquetDataset | None:
    """The Parquet files of the folder ``local`` as a dataset, or ``None`` when it holds none."""
    for _folder, subfolders, names in os.walk(local):
        subfolders[:] = [name for name in subfolders if not name.startswith(("_", "."))]
        if any(is_parquet_key(name) for name in names):
            return ParquetDataset(local, local_layouts(local), source=local)
    return None


def _remote_table(
    url: str, store: ObjectStore, cache: str, options: DownloadOptions
) -> ParquetDataset | None:
    """The remote's Delta table or Parquet files (footers read into ``cache``), or ``None``."""
    try:
        every = fetch_listing(store, "", options)
    except UnsupportedURLError:  # a store that cannot list (HTTP) holds no Parquet folder
        return None
    if any(key.startswith(LOG_FOLDER + "/") for key in every):
        return _delta(url, store, cache, options)
    listed = parquet_files(every)
    if not listed:
        return None
    layouts = sync_layouts(store, cache, options, listed)
    return ParquetDataset(cache, layouts, cached=True, source=store.url("").rstrip("/"))


def _no_index(where: str, advice: str) -> str:
    """The message for a dataset without an index, with the splits there are, if any."""
    if advice:
        return f"{where} holds no {INDEX_BASENAME}; {advice}"
    return (
        f"no {INDEX_BASENAME} in {where} (and no *.parquet files): is it the dataset's root folder?"
    )


def _cached_index(cache: str) -> list[ShardEntry]:
    """The index :func:`sync_index` found current in ``cache``."""
    path = os.path.join(cache, INDEX_BASENAME)
    return parse_index(read_file(path), source=path)
