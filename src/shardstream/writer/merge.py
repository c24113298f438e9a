"""Merging the indexes of parallel writers into one ``index.json`` at the dataset root."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tempfile
from collections.abc import Sequence

from shardstream.errors import ConfigurationError, IndexFormatError, ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME, FileInfo, ShardEntry, dump_index, parse_index
from shardstream.storage import atomic_write, is_remote, local_path, open_store

__all__ = ["merge_index", "merge_partitions", "natural_key"]

logger = logging.getLogger(__name__)


def natural_key(path: str) -> list[object]:
    """Sort key that orders ``part-2`` before ``part-10``."""
    return [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", path)]


def merge_index(root: str) -> int:
    """Merge every ``index.json`` found in sub-folders of ``root`` into ``root/index.json``.

    Each shard's basename becomes a path relative to ``root`` (``"3/shard.00000.mds"``), so the
    merged index reads as one dataset, in both shardstream and mosaicml-streaming. Sub-folders
    are taken in natural order (``2`` before ``10``). The merged index is written atomically.

    Args:
        root: The dataset root (a local folder or ``file://`` URL).

    Returns:
        The number of shards in the merged index.

    Raises:
        ShardNotFoundError: No sub-folder holds an ``index.json``.
        IndexFormatError: A partition's index is malformed.

    Example:
        for part in range(2):
            with MDSWriter(out=f"/tmp/my-ds/{part}", columns={"x": "int"}) as writer:
                writer.write({"x": part})
        merge_index("/tmp/my-ds")  # 2 shards; LocalDataset("/tmp/my-ds") reads both
    """
    root = local_path(root)
    partitions = []
    for folder, dirs, files in os.walk(root):
        if folder != root and INDEX_BASENAME in files:
            partitions.append(os.path.relpath(folder, root).replace(os.sep, "/"))
            dirs[:] = []  # a partition's own sub-folders belong to its index
    if not partitions:
        raise ShardNotFoundError(f"no sub-folder of {root} holds an {INDEX_BASENAME} to merge")
    merged: list[ShardEntry] = []
    for prefix in sorted(partitions, key=natural_key):
        path = os.path.join(root, prefix, INDEX_BASENAME)
        with open(path, "rb") as handle:
            merged += _prefixed_entries(handle.read(), prefix, path)
    atomic_write(os.path.join(root, INDEX_BASENAME), [dump_index(merged)])
    logger.info("merged %d partitions (%d shards) into %s", len(partitions), len(merged), root)
    return len(merged)


def merge_partitions(root: str, prefixes: Sequence[str], *, local: str | None = None) -> int:
    """Merge the indexes of the named sub-folders of ``root``, in the given order.

    Unlike :func:`merge_index`, which takes every sub-folder it finds, only ``prefixes`` are
    merged: a writer that knows which partitions are complete (say, the attempts whose results
    a Spark driver received) leaves any other sub-folder out of the dataset. ``root`` may be a
    local folder or any URL :func:`~shardstream.storage.open_store` opens; each partition index
    is read from ``root`` (or from ``local``, when given and holding it) and the merged
    ``index.json`` is written last, atomically.

    Args:
        root: The dataset root: a local folder, or a URL such as ``s3://bucket/ds``.
        prefixes: Sub-folders of ``root`` (``/``-separated), each holding an ``index.json``.
        local: A local copy of a remote ``root`` (a writer's ``(local, remote)`` pair): its
            partition indexes are read there when present and the merged index is written
            there too, as well as published to ``root``.

    Returns:
        The number of shards in the merged index.

    Raises:
        ConfigurationError: ``prefixes`` is empty or names a folder twice.
        ObjectNotFoundError: A partition has no ``index.json`` (``FileNotFoundError`` locally).
        IndexFormatError: A partition's index is malformed.
    """
    if not prefixes:
        raise ConfigurationError(
            f"no partitions to merge into {root}: pass the sub-folders (or prefixes) that hold "
            "the partitions' index.json files"
        )
    if len(set(prefixes)) != len(prefixes):
        raise ConfigurationError(
            f"a partition is named twice in {list(prefixes)}: name each one once"
        )
    remote = is_remote(root)
    store = open_store(root) if remote else None
    local_root = local_path(local) if local is not None else None if remote else local_path(root)
    merged: list[ShardEntry] = []
    for prefix in prefixes:
        key = f"{prefix.strip('/')}/{INDEX_BASENAME}"
        path = None if local_root is None else os.path.join(local_root, *key.split("/"))
        if path is not None and (store is None or os.path.exists(path)):
            with open(path, "rb") as handle:
                data = handle.read()
            source = path
        else:
            assert store is not None
            data, source = store.get_bytes(key), store.url(key)
        merged += _prefixed_entries(data, prefix.strip("/"), source)
    text = dump_index(merged)
    if local_root is not None:
        os.makedirs(local_root, exist_ok=True)
        atomic_write(os.path.join(local_root, INDEX_BASENAME), [text])
    if store is not None:
        with tempfile.TemporaryDirectory(prefix="shardstream-merge-") as scratch:
            path = os.path.join(scratch, INDEX_BASENAME)
            atomic_write(path, [text])
            store.put_file(path, INDEX_BASENAME)
    logger.info("merged %d partitions (%d shards) into %s", len(prefixes), len(merged), root)
    return len(merged)


def _prefixed_entries(data: bytes, prefix: str, source: str) -> list[ShardEntry]:
    entries = []
    for entry in parse_index(data, source=source):
        if entry.format != "mds":
            raise IndexFormatError(f"{source}: only MDS shards can be merged, got {entry.format!r}")
        entries.append(
            dataclasses.replace(
                entry,
                raw_data=_prefixed(entry.raw_data, prefix),
                zip_data=None if entry.zip_data is None else _prefixed(entry.zip_data, prefix),
            )
        )
    return entries


def _prefixed(info: FileInfo, prefix: str) -> FileInfo:
    return dataclasses.replace(info, basename=f"{prefix}/{info.basename}")
