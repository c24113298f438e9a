"""Opening a stream's data: an MDS index, or the row groups of a Parquet folder or Delta table.

A stream's format is what it says (``Stream(format=...)``) or, left at ``None``, what is there:
MDS where an ``index.json`` is, else Delta where a ``_delta_log/`` is, else Parquet where
``*.parquet`` files are. Detecting costs an MDS stream nothing: the remote ``index.json`` is
asked for anyway, and only its absence makes the folder be listed. A Delta table's version is
read as the Parquet files the log names for it (:mod:`shardstream.tables.streams`).
"""

from __future__ import annotations

import logging
import os

from shardstream.cache import CacheStream
from shardstream.cache.index_sync import start_index_sync
from shardstream.cache.listing_check import ListingCheck
from shardstream.cache.ownership import claim_cache_folder
from shardstream.dataset.local import LocalDataset
from shardstream.dataset.splits import local_splits, remote_splits, split_advice
from shardstream.dataset.stream import ResolvedStream
from shardstream.errors import ConfigurationError, ObjectNotFoundError, ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage import ObjectStore, fetch_listing, open_store
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.layout_index import parquet_files
from shardstream.tables.streams import has_log, is_local_table, open_delta, open_parquet

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
    checks: list[ListingCheck] | None = None,
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

    ``checks``: where the start's listing goes when it is left running (an MDS stream whose
    store lists in ranges): the cache must be given it. Without ``checks`` it is waited for.
    """
    if stream.remote is not None:  # the cache writes only in a folder it owns
        claim_cache_folder(stream.local, stream.remote, stream.split)
    try:
        return _open(
            stream, store, allow_unsafe_types=allow_unsafe_types, policy=policy, checks=checks
        )
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
    checks: list[ListingCheck] | None,
) -> StreamData:
    if stream.format == "delta" or (
        stream.format is None and _no_index(stream) and is_local_table(stream)
    ):
        return open_delta(stream, store)
    if stream.format == "parquet" or (stream.format is None and _no_index(stream)):
        return open_parquet(stream, store)
    entries = None
    if store is not None:
        try:
            entries, check = start_index_sync(store, stream.local, stream.options)
            if check is not None and checks is None:
                check.wait()  # no cache to hand it to: the check ends here
            elif check is not None and checks is not None:
                checks.append(check)
        except ObjectNotFoundError:
            if stream.format is not None:
                raise
            listed = fetch_listing(store, "", stream.options)
            if has_log(listed):
                return open_delta(stream, store)
            files = parquet_files(listed)
            if not files:
                raise
            return open_parquet(stream, store, files)
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
    stream: ResolvedStream,
    data: StreamData,
    store: ObjectStore | None = None,
    check: ListingCheck | None = None,
) -> CacheStream:
    """The cache's view of a stream (opening its store when not given), with its listing."""
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
        check=check,
    )


def open_remote(stream: ResolvedStream) -> ObjectStore | None:
    """The stream's remote store, its requests bounded by the stream's download timeout."""
    if stream.remote is None:
        return None
    return open_store(stream.remote, timeout=stream.options.timeout)


def _no_index(stream: ResolvedStream) -> bool:
    """A local-only stream without ``index.json`` (a remote one is asked when synced)."""
    return stream.remote is None and not os.path.exists(os.path.join(stream.local, INDEX_BASENAME))
