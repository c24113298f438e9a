"""The derived index of a Parquet dataset: its files and their row groups, once per node.

A Parquet folder has no ``index.json``; its footers are the index. The files are listed in
sorted key order (``*.parquet``, skipping names and folders that start with ``_`` or ``.``,
such as Spark's ``_SUCCESS`` and ``_temporary/``), and each file's footer is read by the
footer stage (:mod:`~shardstream.tables.footers`): ranged requests, or ``pread`` in place.

For a remote, the footers are saved with each file's size and etag in the stream's cache
folder (``.shardstream/parquet-index.json``), under a lock: later processes and runs ask the
store only for the files' sizes and etags, and read again only the footers of files that
changed, whose cached row groups are deleted. A local folder read in place is never written
to; its footers are read in each process (a few reads per file), once while they are held.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.locks import FileLock
from shardstream.cache.provenance import SourceRecord, identity, read_record
from shardstream.cache.safe_paths import read_file, write_file
from shardstream.errors import IndexFormatError, ShardFormatError, ShardNotFoundError
from shardstream.format.index import safe_basename
from shardstream.storage import DownloadOptions, ObjectStore, fetch_listing
from shardstream.storage.base import ObjectInfo
from shardstream.tables.footers import local_layout, parsed_layout, store_layout
from shardstream.tables.layout import ParquetFileLayout, dump_layouts, parse_layouts
from shardstream.tables.row_group_files import row_group_basename

__all__ = [
    "PARQUET_INDEX",
    "is_parquet_key",
    "list_parquet",
    "local_file_layouts",
    "local_layouts",
    "parquet_files",
    "sync_layouts",
]

logger = logging.getLogger(__name__)

#: The derived index's file name, in a remote stream's ``.shardstream`` folder.
PARQUET_INDEX = "parquet-index.json"
_THREADS = 8
_OPTIONS = DownloadOptions()


def is_parquet_key(key: str) -> bool:
    """Whether ``key`` names a data file of a Parquet dataset."""
    parts = key.split("/")
    return key.endswith(".parquet") and not any(p.startswith(("_", ".")) for p in parts)


def list_parquet(store: ObjectStore, options: DownloadOptions = _OPTIONS) -> dict[str, ObjectInfo]:
    """The store's Parquet data files, by sorted key, with their sizes and tags: one listing."""
    return parquet_files(fetch_listing(store, "", options))


def parquet_files(listed: Mapping[str, ObjectInfo]) -> dict[str, ObjectInfo]:
    """The Parquet data files of a store's listing, by sorted key."""
    return {key: listed[key] for key in sorted(listed) if is_parquet_key(key)}


def local_layouts(root: str) -> list[ParquetFileLayout]:
    """The layouts of the Parquet files under the local folder ``root`` (read in place).

    Raises:
        ShardNotFoundError: The folder holds no Parquet file.
        ShardFormatError: A file is not Parquet.
    """
    keys: list[str] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith(("_", "."))]
        relative = os.path.relpath(folder, root)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        keys.extend(prefix + name for name in names if is_parquet_key(prefix + name))
    if not keys:
        raise ShardNotFoundError(
            f"{root} holds no index.json and no *.parquet files: point local= (or remote=) "
            "at the dataset's root folder"
        )
    return local_file_layouts(root, sorted(keys))


def local_file_layouts(root: str, keys: list[str]) -> list[ParquetFileLayout]:
    """The layouts of the files ``keys`` under the local folder ``root``, in that order.

    Raises:
        ShardFormatError: A file is not Parquet.
    """
    with ThreadPoolExecutor(_THREADS, thread_name_prefix="shardstream-footer") as pool:
        return list(pool.map(lambda key: local_layout(root, key), keys))


def sync_layouts(
    store: ObjectStore,
    local: str,
    options: DownloadOptions,
    listed: Mapping[str, ObjectInfo] | None = None,
) -> list[ParquetFileLayout]:
    """The layouts of the remote's Parquet files, from the saved derived index where current.

    Args:
        store: The stream's remote root.
        local: The stream's cache folder.
        options: Retries and timeout of the requests.
        listed: :func:`list_parquet` of the store, when the caller listed it already.

    Raises:
        CacheConflictError: ``local`` caches another remote.
        ShardNotFoundError: The remote holds no Parquet file.
        ShardFormatError: A file is not Parquet.
        StorageError: A request failed after every retry.
    """
    listed = list_parquet(store, options) if listed is None else listed
    keys = sorted(listed)
    if not keys:
        raise ShardNotFoundError(
            f"{store.url('')} holds no index.json and no *.parquet files: point remote= at "
            "the dataset's root prefix"
        )
    infos = [listed[key] for key in keys]
    state = os.path.join(local, STATE_FOLDER)
    record = read_record(state)
    if record is not None:
        record.check_remote(store.url(""), local)
    else:  # a folder caches one remote, whatever its format (its Parquet files listed here)
        objects = {key: identity(info) for key, info in listed.items()}
        SourceRecord(store.url(""), objects, complete=False).write(state)
    path = os.path.join(state, PARQUET_INDEX)
    saved = _saved(path)
    if _current(saved, keys, infos):
        return saved
    lock = FileLock(os.path.join(state, "parquet-index.lock"))
    with (
        lock.hold(timeout=options.timeout * (options.retry + 1) + 60, what="the index"),
        ThreadPoolExecutor(_THREADS, thread_name_prefix="shardstream-footer") as pool,
    ):
        saved = _saved(path)
        if _current(saved, keys, infos):
            return saved  # another process of the node read the footers meanwhile
        known = {(s.key, s.size, s.etag): s for s in saved if s.etag is not None}
        layouts = list(
            pool.map(
                lambda item: (
                    known.get((item[0], item[1].size, item[1].etag))
                    or _remote_layout(store, item[0], item[1], options)
                ),
                zip(keys, infos, strict=True),
            )
        )
        _drop_changed(local, saved, layouts)
        write_file(path, [dump_layouts(layouts)])
    logger.info("read the footers of %s (%d Parquet files)", store.url(""), len(layouts))
    return layouts


def _current(saved: list[ParquetFileLayout], keys: list[str], infos: list[ObjectInfo]) -> bool:
    return len(saved) == len(keys) and all(
        s.key == key and s.size == info.size and s.etag is not None and s.etag == info.etag
        for s, key, info in zip(saved, keys, infos, strict=False)
    )


def _saved(path: str) -> list[ParquetFileLayout]:
    try:
        return parse_layouts(read_file(path), source=path, make=parsed_layout)
    except FileNotFoundError:
        return []
    except (IndexFormatError, ShardFormatError) as exc:
        logger.warning("ignoring the saved Parquet index: %s", exc)
        return []


def _drop_changed(local: str, old: list[ParquetFileLayout], new: list[ParquetFileLayout]) -> None:
    """Delete the cached row groups of files that changed or are gone."""
    kept = {(layout.key, layout.size, layout.etag) for layout in new}
    for layout in old:
        if (layout.key, layout.size, layout.etag) in kept:
            continue
        for group in layout.row_groups:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(local, row_group_basename(layout, group.index)))
        logger.warning("%s changed: its cached row groups are deleted", layout.key)


def _remote_layout(
    store: ObjectStore, key: str, info: ObjectInfo, options: DownloadOptions
) -> ParquetFileLayout:
    key = safe_basename(key, where=store.url(""))
    return store_layout(store, key, info.size, info.etag, options)
