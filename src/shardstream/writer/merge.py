"""Merging the indexes of parallel writers into one ``index.json`` at the dataset root.

:func:`merge_index` takes the reference's calling forms: a dataset root whose sub-folders hold
the partitions (a folder, a URL or a ``(local, remote)`` pair), or a list of partition index
files (paths, URLs or ``(local, remote)`` pairs) with the root the merged index goes to.
:func:`merge_partitions` merges named sub-folders only (the Spark driver's winners).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, overload

from shardstream.errors import (
    ConfigurationError,
    IndexFormatError,
    ObjectNotFoundError,
    ShardNotFoundError,
)
from shardstream.format.index import INDEX_BASENAME, FileInfo, ShardEntry, dump_index, parse_index
from shardstream.storage import ObjectStore, atomic_write, is_remote, local_path, open_store

__all__ = ["merge_index", "merge_partitions", "natural_key", "partition_folders"]

logger = logging.getLogger(__name__)

#: A dataset root: a local folder or URL, or a ``(local folder, remote URL)`` pair.
Root = str | os.PathLike[str] | tuple[str, str]
#: One partition's index file: a path or URL, or a ``(local path, remote URL)`` pair.
IndexFile = str | os.PathLike[str] | tuple[str, str]


def natural_key(path: str) -> list[object]:
    """Sort key that orders ``part-2`` before ``part-10``."""
    return [int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", path)]


def partition_folders(keys: Iterable[str]) -> list[str]:
    """The folders holding an ``index.json`` among a root's ``keys``, in natural order.

    The root's own index is not a partition, and a partition's sub-folders belong to it: only
    the shallowest indexes count.
    """
    folders = sorted(
        (key[: -len(INDEX_BASENAME) - 1] for key in keys if key.endswith("/" + INDEX_BASENAME)),
        key=lambda folder: (folder.count("/"), natural_key(folder)),
    )
    chosen: list[str] = []
    for folder in folders:
        if not any(folder.startswith(parent + "/") for parent in chosen):
            chosen.append(folder)
    return sorted(chosen, key=natural_key)


@overload
def merge_index(out: Root, keep_local: bool = True, download_timeout: float = 60) -> int: ...


@overload
def merge_index(
    index_file_urls: Sequence[IndexFile],
    out: Root,
    keep_local: bool = True,
    download_timeout: float = 60,
) -> int: ...


def merge_index(*args: Any, **kwargs: Any) -> int:
    """Merge the ``index.json`` of each partition into one ``index.json`` at the dataset root.

    Two calling forms, as in mosaicml-streaming:

    * ``merge_index(out, keep_local=True, download_timeout=60)``: every sub-folder of ``out``
      that holds an ``index.json`` is a partition, in natural order (``2`` before ``10``); a
      partition's own sub-folders belong to it.
    * ``merge_index(index_file_urls, out, keep_local=True, download_timeout=60)``: the
      partitions whose index files are listed, in the list's order (repeats dropped).

    Each shard's basename becomes a path relative to the root (``"3/shard.00000.mds"``), so the
    merged index reads as one dataset in shardstream and in mosaicml-streaming. The merged
    index is written last, atomically (locally) and in one upload (to a remote).

    Args:
        *args: The arguments of one of the two forms, in order.
        **kwargs: The same by name (``index_file_urls``, ``out``, ``keep_local``,
            ``download_timeout``).
        index_file_urls: A list of partition index files: local paths, URLs
            (``s3://b/ds/0/index.json``), or ``(local, remote)`` pairs read locally when the
            local file exists. An index under ``out`` names its shards by its folder's path
            below ``out``; any other by its folder's name (the reference's rule).
        out: The dataset root: a local folder, a URL (``s3://b/ds``), or a
            ``(local folder, remote URL)`` pair (partition indexes are read from the local
            folder when there, else from the remote; the merged index goes to both).
        keep_local: Leave the merged index in the local folder of a ``(local, remote)`` root.
            ``False`` publishes it to the remote only; a root with no remote always keeps it.
        download_timeout: Seconds each request to a remote may wait.

    Returns:
        The number of shards in the merged index.

    Raises:
        ConfigurationError: Arguments of neither form, an empty list, ``out`` neither a folder,
            a URL nor a pair, or two listed indexes that would share a folder.
        ShardNotFoundError: No sub-folder of ``out`` holds an ``index.json``.
        ObjectNotFoundError: A listed index file is missing (a ``FileNotFoundError``).
        IndexFormatError: A partition's index is malformed.

    Example:
        for part in range(2):
            with MDSWriter(out=f"/tmp/my-ds/{part}", columns={"x": "int"}) as writer:
                writer.write({"x": part})
        merge_index("/tmp/my-ds")  # 2 shards; LocalDataset("/tmp/my-ds") reads both
        merge_index(["/tmp/my-ds/1/index.json", "/tmp/my-ds/0/index.json"], "/tmp/my-ds")
    """
    listed = (bool(args) and isinstance(args[0], list)) or "index_file_urls" in kwargs
    form = _merge_listed if listed else _merge_root
    try:
        bound = inspect.signature(form).bind(*args, **kwargs)
    except TypeError as exc:
        raise ConfigurationError(
            f"merge_index takes (out, keep_local=True, download_timeout=60) or "
            f"(index_file_urls: list, out, keep_local=True, download_timeout=60); {exc}"
        ) from None
    return form(*bound.args, **bound.kwargs)


def merge_partitions(
    root: str, prefixes: Sequence[str], *, local: str | None = None, same_columns: bool = False
) -> int:
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
        local: A local copy of ``root`` (a writer's ``(local, remote)`` pair): its partition
            indexes are read there when present and the merged index is written there too, as
            well as published to ``root``.
        same_columns: Refuse partitions whose shards do not all have the same columns and
            encodings (MDS allows it, but a batch of mixed samples does not collate).

    Returns:
        The number of shards in the merged index.

    Raises:
        ConfigurationError: ``prefixes`` is empty or names a folder twice; with
            ``same_columns``, two partitions have different columns (both are named).
        ObjectNotFoundError: A partition has no ``index.json`` (a ``FileNotFoundError``).
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
    destination = _Destination.of(root if local is None else (local, root))
    store = destination.store()
    parts = [destination.partition(prefix.strip("/"), store) for prefix in prefixes]
    return _merge(parts, destination, store, keep_local=True, same_columns=same_columns)


@dataclasses.dataclass(frozen=True)
class _Partition:
    """One partition's index: its folder below the root, and where to read it."""

    prefix: str
    local: str | None  # read here when the file exists
    store: ObjectStore | None  # ... else from this store
    key: str = INDEX_BASENAME

    def read(self) -> tuple[bytes, str]:
        """The index's bytes, and where they came from (for messages)."""
        if self.local is not None and (self.store is None or os.path.exists(self.local)):
            try:
                with open(self.local, "rb") as handle:
                    return handle.read(), self.local
            except FileNotFoundError:
                pass
        elif self.store is not None:
            try:
                return self.store.get_bytes(self.key), self.store.url(self.key)
            except ObjectNotFoundError:
                pass
        places = [self.local] if self.local is not None else []
        places += [self.store.url(self.key)] if self.store is not None else []
        raise ObjectNotFoundError(
            f"partition {self.prefix!r} has no index at {' or '.join(places)}: finish writing "
            "it (its writer publishes index.json last) or leave it out of the merge"
        )


@dataclasses.dataclass(frozen=True)
class _Destination:
    """Where the merged index goes: a local folder, a remote root, or both."""

    local: str | None
    remote: str | None
    timeout: float | None = None

    @classmethod
    def of(cls, out: Any, timeout: float | None = None) -> _Destination:
        if isinstance(out, (tuple, list)):
            if len(out) != 2 or not all(isinstance(p, (str, os.PathLike)) for p in out):
                raise ConfigurationError(
                    f"out must be a folder, a URL or a (local folder, remote URL) pair, got {out!r}"
                )
            local, remote = os.fspath(out[0]), os.fspath(out[1])
            if is_remote(local):
                raise ConfigurationError(
                    f"out={out!r}: the first of the pair is the local folder, and {local!r} is a "
                    "URL; pass (local folder, remote URL)"
                )
            return cls(local_path(local), remote.rstrip("/"), timeout)
        if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
            raise ConfigurationError(
                f"out must be a folder, a URL or a (local folder, remote URL) pair, got {out!r}"
            )
        text = os.fspath(out)
        if is_remote(text):
            return cls(None, text.rstrip("/"), timeout)
        return cls(local_path(text), None, timeout)

    def store(self) -> ObjectStore | None:
        """The remote root's store (a plain folder or ``file://`` remote included)."""
        return None if self.remote is None else open_store(self.remote, timeout=self.timeout)

    def partition(self, prefix: str, store: ObjectStore | None) -> _Partition:
        """The partition in the sub-folder ``prefix`` of this root."""
        key = f"{prefix}/{INDEX_BASENAME}"
        local = None if self.local is None else os.path.join(self.local, *key.split("/"))
        return _Partition(prefix, local, store, key)

    def prefix_of(self, local: str | None, url: str | None) -> str | None:
        """The folder of an index file below this root, ``/``-separated; None when not below."""
        roots = [self.local]
        if self.remote is not None and not is_remote(self.remote):
            roots.append(local_path(self.remote))  # a plain folder (or file://) as the remote
        for root in roots:
            if local is not None and root is not None:
                folder = os.path.dirname(os.path.abspath(local))
                relative = os.path.relpath(folder, os.path.abspath(root))
                if relative != os.curdir and not relative.startswith(os.pardir):
                    return relative.replace(os.sep, "/")
        if url is not None and self.remote is not None:
            folder, base = url.rsplit("/", 1)[0], self.remote + "/"
            if folder.startswith(base) and len(folder) > len(base):
                return folder[len(base) :]
        return None


def _merge_root(out: Root, keep_local: bool = True, download_timeout: float = 60) -> int:
    _check_flags(keep_local, download_timeout)
    destination = _Destination.of(out, download_timeout)
    store = destination.store()
    if store is not None:
        prefixes = partition_folders(store.list())
    else:
        assert destination.local is not None
        prefixes = _local_partitions(destination.local)
    if not prefixes:
        raise ShardNotFoundError(
            f"no sub-folder of {destination.remote or destination.local} holds an "
            f"{INDEX_BASENAME} to merge: write the partitions there first, or list their "
            "index files with merge_index([...], out)"
        )
    parts = [destination.partition(prefix, store) for prefix in prefixes]
    return _merge(parts, destination, store, keep_local=keep_local)


def _merge_listed(
    index_file_urls: Sequence[IndexFile],
    out: Root,
    keep_local: bool = True,
    download_timeout: float = 60,
) -> int:
    _check_flags(keep_local, download_timeout)
    destination = _Destination.of(out, download_timeout)
    if not index_file_urls:
        raise ConfigurationError(
            f"index_file_urls is empty: list the partitions' index.json files to merge into {out}"
        )
    parts: dict[str, _Partition] = {}
    for element in dict.fromkeys(_normalized(item) for item in index_file_urls):
        part = _listed_partition(element, destination)
        if part.prefix in parts:
            raise ConfigurationError(
                f"{element!r} and an earlier index would both name their shards "
                f"{part.prefix}/...: put each partition in its own sub-folder of {out}"
            )
        parts[part.prefix] = part
    return _merge(list(parts.values()), destination, destination.store(), keep_local=keep_local)


def _normalized(item: Any) -> str | tuple[str, str]:
    paths = item if isinstance(item, (tuple, list)) and len(item) == 2 else (item,)
    if not all(isinstance(p, (str, os.PathLike)) and os.fspath(p).strip() for p in paths):
        raise ConfigurationError(
            f"index_file_urls holds {item!r}: each item is an index file's path or URL, or a "
            "(local path, remote URL) pair"
        )
    texts = [os.fspath(p).strip().rstrip("/") for p in paths]
    return (texts[0], texts[1]) if len(texts) == 2 else texts[0]


def _listed_partition(element: str | tuple[str, str], destination: _Destination) -> _Partition:
    """Where to read one listed index file, and the folder its shards are named under."""
    if isinstance(element, tuple):
        local: str | None = local_path(element[0])
        url: str | None = element[1]
    elif is_remote(element):
        local, url = None, element
    else:
        local, url = local_path(element), None
    store, key = None, INDEX_BASENAME
    if url is not None:
        if "/" not in url.split("://", 1)[-1]:
            raise ConfigurationError(f"{url!r} names no index file: give its full URL")
        parent, key = url.rsplit("/", 1)
        store = open_store(parent, timeout=destination.timeout)
    prefix = destination.prefix_of(local, url)
    if prefix is None:  # not below out: the folder's name, as the reference does
        prefix = os.path.basename(os.path.dirname(local if local is not None else url or ""))
        if not prefix:
            raise ConfigurationError(
                f"{element!r} is not in a sub-folder: each partition's index.json must sit in "
                "a folder of its own (below out)"
            )
    return _Partition(prefix, local, store, key)


def _check_flags(keep_local: Any, download_timeout: Any) -> None:
    if not isinstance(keep_local, bool):
        raise ConfigurationError(f"keep_local must be True or False, got {keep_local!r}")
    if (
        isinstance(download_timeout, bool)
        or not isinstance(download_timeout, (int, float))
        or not download_timeout > 0
    ):
        raise ConfigurationError(
            f"download_timeout must be a positive number of seconds, got {download_timeout!r}"
        )


def _local_partitions(root: str) -> list[str]:
    partitions = []
    for folder, dirs, files in os.walk(root):
        if folder != root and INDEX_BASENAME in files:
            partitions.append(os.path.relpath(folder, root).replace(os.sep, "/"))
            dirs[:] = []  # a partition's own sub-folders belong to its index
    return sorted(partitions, key=natural_key)


def _merge(
    parts: Sequence[_Partition],
    destination: _Destination,
    store: ObjectStore | None,
    *,
    keep_local: bool,
    same_columns: bool = False,
) -> int:
    """Read every partition's index, then publish the merged one: locally, then remotely."""
    merged: list[ShardEntry] = []
    first: tuple[str, Mapping[str, str]] | None = None
    for part in parts:
        data, source = part.read()
        entries = _prefixed_entries(data, part.prefix, source)
        for entry in entries if same_columns else ():
            if first is None:
                first = (part.prefix, entry.columns)
            elif dict(entry.columns) != dict(first[1]):
                raise ConfigurationError(
                    f"partitions {first[0]!r} and {part.prefix!r} have different columns "
                    f"({_schema(first[1])} against {_schema(entry.columns)}): rewrite one with "
                    "the other's columns, or keep them as separate datasets"
                )
        merged += entries
    text = dump_index(merged)
    if destination.local is not None and (keep_local or store is None):
        os.makedirs(destination.local, exist_ok=True)
        atomic_write(os.path.join(destination.local, INDEX_BASENAME), [text])
    if store is not None:
        with tempfile.TemporaryDirectory(prefix="shardstream-merge-") as scratch:
            path = os.path.join(scratch, INDEX_BASENAME)
            atomic_write(path, [text])
            store.put_file(path, INDEX_BASENAME)
    where = destination.remote or destination.local
    logger.info("merged %d partitions (%d shards) into %s", len(parts), len(merged), where)
    return len(merged)


def _schema(columns: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{name}: {encoding}" for name, encoding in columns.items()) + "}"


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
