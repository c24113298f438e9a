"""Merging the indexes of parallel writers into one ``index.json`` at the dataset root."""

from __future__ import annotations

import dataclasses
import logging
import os
import re

from shardstream.errors import IndexFormatError, ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME, FileInfo, ShardEntry, dump_index, parse_index
from shardstream.storage import atomic_write, local_path

__all__ = ["merge_index"]

logger = logging.getLogger(__name__)


def _natural_key(path: str) -> list[object]:
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
    for prefix in sorted(partitions, key=_natural_key):
        path = os.path.join(root, prefix, INDEX_BASENAME)
        with open(path, "rb") as handle:
            entries = parse_index(handle.read(), source=path)
        for entry in entries:
            if entry.format != "mds":
                raise IndexFormatError(
                    f"{path}: only MDS shards can be merged, got {entry.format!r}"
                )
            merged.append(
                dataclasses.replace(
                    entry,
                    raw_data=_prefixed(entry.raw_data, prefix),
                    zip_data=None if entry.zip_data is None else _prefixed(entry.zip_data, prefix),
                )
            )
    atomic_write(os.path.join(root, INDEX_BASENAME), [dump_index(merged)])
    logger.info("merged %d partitions (%d shards) into %s", len(partitions), len(merged), root)
    return len(merged)


def _prefixed(info: FileInfo, prefix: str) -> FileInfo:
    return dataclasses.replace(info, basename=f"{prefix}/{info.basename}")
