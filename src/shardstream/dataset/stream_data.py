"""Opening a stream's data: an MDS index, or the row groups of a Parquet folder or Delta table.

A stream's format is what it says (``Stream(format=...)``) or, left at ``None``, what is there:
MDS where an ``index.json`` is, else Delta where a ``_delta_log/`` is, else Parquet where
``*.parquet`` files are. Detecting costs an MDS stream nothing: the remote ``index.json`` is
asked for anyway, and only its absence makes the folder be listed. A Delta table's version is
read as the Parquet files the log names for it (:mod:`shardstream.cache.delta_log`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from shardstream.cache import CacheStream
from shardstream.cache import sync_index as _sync_index
from shardstream.cache.delta_log import LOG_FOLDER, read_snapshot
from shardstream.cache.ownership import claim_cache_folder
from shardstream.cache.parquet_index import (
    local_file_layouts,
    local_layouts,
    parquet_files,
    sync_layouts,
)
from shardstream.dataset.local import LocalDataset
from shardstream.dataset.parquet import ParquetDataset
from shardstream.dataset.splits import local_splits, remote_splits, split_advice
from shardstream.dataset.stream import ResolvedStream
from shardstream.errors import ConfigurationError, ObjectNotFoundError, ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage import ObjectStore, fetch_listing, open_store
from shardstream.storage.base import ObjectInfo

__all__ = ["StreamData", "cache_stream", "open_remote", "open_stream_data"]

logger = logging.getLogger(__name__)

#: What a stream reads from: MDS shards or Parquet row groups.
StreamData = LocalDataset | ParquetDataset


def open_stream_data(
    stream: ResolvedStream,
    store: ObjectStore | None,
    *,
    allow_unsafe_types: bool,
    policy: ReadPolicy,
) -> StreamData:
    """The stream's dataset, its index fetched (MDS) or its footers read (Parquet).

    Raises:
        ConfigurationError: ``columns`` or ``filters`` is given for an MDS stream, or
            ``format='parquet'`` for a Delta table.
        ShardNotFoundError: Neither an index, a Delta log nor Parquet files are there (the
            message lists the splits below, when the folder holds some, or the split's
            siblings).
        CacheFolderError: ``local=`` is not a folder the cache may write to
            (:mod:`shardstream.cache.ownership`).
    """
    if stream.remote is not None:  # the cache writes only in a folder it owns
        claim_cache_folder(stream.local, stream.remote, stream.split)
    try:
        return _open(stream, store, allow_unsafe_types=allow_unsafe_types, policy=policy)
    except (ShardNotFoundError, ObjectNotFoundError) as exc:
        advice = _split_advice(stream)
        if not advice:
            raise
        where = stream.remote or stream.local
        raise type(exc)(f"{where} holds no {INDEX_BASENAME}; {advice}") from exc


def _split_advice(stream: ResolvedStream) -> str:
    """The splits beside the stream's split (or below its root), and which to pick."""
    split = stream.split
    if stream.remote is not None:
        parent = stream.remote[: -len(split) - 1] if split else stream.remote
        found = remote_splits(parent, stream.options)
    else:
        found = local_splits(stream.local[: -len(split) - 1] if split else stream.local)
    return split_advice(split, found)


def _open(
    stream: ResolvedStream,
    store: ObjectStore | None,
    *,
    allow_unsafe_types: bool,
    policy: ReadPolicy,
) -> StreamData:
    if stream.format == "delta" or (
        stream.format is None and _no_index(stream) and _local_log(stream)
    ):
        return _delta(stream, store)
    if stream.format == "parquet" or (stream.format is None and _no_index(stream)):
        return _parquet(stream, store)
    entries = None
    if store is not None:
        try:
            entries = _sync_index(store, stream.local, stream.options)
        except ObjectNotFoundError:
            if stream.format is not None:
                raise
            listed = fetch_listing(store, "", stream.options)
            if _has_log(listed):
                return _delta(stream, store)
            files = parquet_files(listed)
            if not files:
                raise
            return _parquet(stream, store, files)
    if stream.columns is not None or stream.filters is not None or stream.version is not None:
        raise ConfigurationError(
            f"columns= and filters= apply to Parquet streams only (Delta tables too), version= "
            f"to Delta tables; {stream.remote or stream.local} is an MDS dataset"
        )
    return LocalDataset(
        stream.local,
        # A remote's cache folder holds its decompressed shards; data read in place is left
        # alone (LocalDataset's default: a cache folder of its own).
        cache_dir=stream.local if store is not None else None,
        validate_hash=stream.validate_hash,
        allow_unsafe_types=allow_unsafe_types,
        policy=policy,
        entries=entries,
        check_empty=store is None,  # a remote's are checked through the cache, which fetches
    )


def cache_stream(
    stream: ResolvedStream, data: StreamData, store: ObjectStore | None = None
) -> CacheStream:
    """The cache's view of a stream (opening its store when not given)."""
    if store is None:
        store = open_remote(stream)
    return CacheStream(
        local=stream.local,
        store=store,
        entries=data.shards,
        options=stream.options,
        keep_zip=stream.keep_zip,
        validate_hash=stream.validate_hash,
        fetcher=data.fetcher if isinstance(data, ParquetDataset) else None,
    )


def open_remote(stream: ResolvedStream) -> ObjectStore | None:
    """The stream's remote store, its requests bounded by the stream's download timeout."""
    if stream.remote is None:
        return None
    return open_store(stream.remote, timeout=stream.options.timeout)


def _no_index(stream: ResolvedStream) -> bool:
    """A local-only stream without ``index.json`` (a remote one is asked when synced)."""
    return stream.remote is None and not os.path.exists(os.path.join(stream.local, INDEX_BASENAME))


def _has_log(listed: Mapping[str, ObjectInfo]) -> bool:
    """Whether a remote folder's listing holds a Delta log."""
    return any(key.startswith(LOG_FOLDER + "/") for key in listed)


def _local_log(stream: ResolvedStream) -> bool:
    """A local-only stream that is a Delta table."""
    return stream.remote is None and os.path.isdir(os.path.join(stream.local, LOG_FOLDER))


def _delta(stream: ResolvedStream, store: ObjectStore | None) -> ParquetDataset:
    source = stream.remote or stream.local
    snapshot, infos = read_snapshot(source, store, stream.local, stream.version, stream.options)
    keys = [file.key for file in snapshot.files]
    if store is None:
        layouts = local_file_layouts(stream.local, keys)
    else:
        assert infos is not None
        layouts = sync_layouts(store, stream.local, stream.options, infos) if keys else []
    return ParquetDataset(
        stream.local,
        layouts,
        columns=stream.columns,
        cached=store is not None,
        source=source,
        filters=stream.filters,
        snapshot=snapshot,
    )


def _parquet(
    stream: ResolvedStream,
    store: ObjectStore | None,
    listed: Mapping[str, ObjectInfo] | None = None,
) -> ParquetDataset:
    if stream.validate_hash is not None:
        logger.warning(
            "validate_hash=%r does not apply to the Parquet stream %s: its files carry no "
            "digests in an index", stream.validate_hash, stream.remote or stream.local,
        )  # fmt: skip
    where = stream.remote or stream.local
    if stream.version is not None:
        raise ConfigurationError(
            f"version= applies to Delta tables; {where} is a Parquet folder (no _delta_log/)"
        )
    if store is None:
        if _local_log(stream):
            raise _not_parquet(where)
        if stream.files is None:
            layouts = local_layouts(stream.local)
        else:
            present = {f for f in stream.files if os.path.isfile(os.path.join(stream.local, f))}
            _check_files(stream.files, present, where)
            layouts = local_file_layouts(stream.local, list(stream.files))
    else:
        if listed is None:
            every = fetch_listing(store, "", stream.options)
            if _has_log(every):
                raise _not_parquet(where)
            listed = parquet_files(every) if stream.files is None else every
        if stream.files is not None:
            _check_files(stream.files, set(listed), where)
            listed = {key: listed[key] for key in stream.files}
        layouts = sync_layouts(store, stream.local, stream.options, listed)
    return ParquetDataset(
        stream.local,
        layouts,
        columns=stream.columns,
        cached=store is not None,
        source=stream.remote or stream.local,
        filters=stream.filters,
    )


def _check_files(files: tuple[str, ...], present: set[str], where: str) -> None:
    """Raises ShardNotFoundError naming the files of ``files=`` that ``where`` lacks."""
    missing = [name for name in files if name not in present]
    if missing:
        raise ShardNotFoundError(
            f"{where} holds no file {', '.join(map(repr, missing[:5]))}"
            f"{f' (and {len(missing) - 5} more)' if len(missing) > 5 else ''}, named in files=; "
            "give paths of existing files under the stream's root"
        )


def _not_parquet(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"{where} is a Delta table (it has a {LOG_FOLDER}/ folder): its folder also holds files "
        "that earlier versions removed, so it is not read as plain Parquet; pass "
        "format='delta' (or leave format unset)"
    )
