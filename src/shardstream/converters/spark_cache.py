"""A Spark DataFrame materialized once as MDS under a cache folder, keyed to its data.

Layout under the parent cache folder (a local path, ``file://`` URL, or any URL the writer
publishes to: ``s3://``, ``gs://``, ...)::

    <parent>/<key>/converter.json     the marker, published last: names the finished copy
    <parent>/<key>/run-<id>/          one creator's copy, written by dataframe_to_mds

``key`` comes from :func:`~shardstream.converters.spark_cache_key.dataframe_key` (the plan, the
source files' sizes and times, the options). A copy counts once ``converter.json`` names it, so
readers never see a half-written one. Creators racing on one key each write their own
``run-<id>`` folder, then publish the marker: locally with a hard link, which only the first
creator wins (the others delete their folders and use the winner's); on an object store the
marker is checked first and a creator that still loses the race (both publish) leaves a
complete copy behind, so each marker ever read names a whole dataset.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any

from shardstream._optional import require
from shardstream.converters.spark import dataframe_to_mds
from shardstream.converters.spark_cache_key import cast_floats, dataframe_key, mds_compression
from shardstream.converters.spark_nulls import fill_nulls
from shardstream.errors import ConfigurationError, ObjectNotFoundError
from shardstream.format.index import parse_index
from shardstream.storage import is_remote, local_path, open_store

__all__ = [
    "MARKER",
    "PARENT_CACHE_DIR_URL_CONF",
    "SHARDSTREAM_CACHE_DIR_URL_CONF",
    "CachedDataFrame",
    "cache_dataframe",
    "delete_cached",
    "parent_cache_dir",
]

logger = logging.getLogger(__name__)

PARENT_CACHE_DIR_URL_CONF = "petastorm.spark.converter.parentCacheDirUrl"
SHARDSTREAM_CACHE_DIR_URL_CONF = "shardstream.spark.converter.parentCacheDirUrl"
MARKER = "converter.json"


@dataclass(frozen=True)
class CachedDataFrame:
    """Where a DataFrame's MDS copy lives.

    Attributes:
        url: The MDS dataset (a local path, or the URL under the remote parent).
        key_url: The key's folder, holding the marker and the copy.
        rows: Samples in the dataset.
        created: This call wrote the copy (``False``: an existing one was reused).

    Example:
        cached = cache_dataframe(df, "/tmp/cache")
        dataset = LocalDataset(cached.url)
        assert len(dataset) == cached.rows
    """

    url: str
    key_url: str
    rows: int
    created: bool


def parent_cache_dir(spark: Any, explicit: str | None) -> str:
    """The parent cache folder: the argument, else the Petastorm conf key, else ours.

    Raises:
        ConfigurationError: None is set, or the value is empty.
    """
    if explicit is not None:
        value: str | None = os.fspath(explicit)
    else:
        value = spark.conf.get(PARENT_CACHE_DIR_URL_CONF, None) or spark.conf.get(
            SHARDSTREAM_CACHE_DIR_URL_CONF, None
        )
    if not value or not str(value).strip():
        raise ConfigurationError(
            "make_spark_converter needs a cache folder: pass parent_cache_dir_url=..., or set "
            f"the Spark conf {PARENT_CACHE_DIR_URL_CONF!r} (Petastorm's) or "
            f"{SHARDSTREAM_CACHE_DIR_URL_CONF!r}, e.g. spark.conf.set("
            f"{SHARDSTREAM_CACHE_DIR_URL_CONF!r}, 'file:///dbfs/tmp/cache')"
        )
    return str(value).rstrip("/")


def cache_dataframe(
    dataframe: Any,
    parent_cache_dir_url: str | None = None,
    compression_codec: str | None = None,
    dtype: str | None = "float32",
    *,
    on_null: str = "fill",
    size_limit: int | None = None,
    progress: bool = False,
) -> CachedDataFrame:
    """Materialize ``dataframe`` as MDS under the cache folder, or reuse the copy already there.

    Args:
        dataframe: A ``pyspark.sql.DataFrame``, classic or Spark Connect.
        parent_cache_dir_url: The parent cache folder (default: from the Spark conf, see
            :func:`parent_cache_dir`).
        compression_codec: Petastorm's codec name or an MDS compression (see
            :func:`~shardstream.converters.spark_cache_key.mds_compression`).
        dtype: ``'float32'``, ``'float64'`` or ``None``: what float columns become.
        on_null: ``"fill"`` (nulls by type, see :mod:`~shardstream.converters.spark_nulls`),
            ``"error"`` or ``"skip"`` (as :func:`~shardstream.converters.dataframe_to_mds`).
        size_limit: The shards' size limit in bytes (default: the writer's).
        progress: Show dataframe_to_mds's progress bar while writing.

    Returns:
        Where the copy is, and how many rows it holds.

    Raises:
        ConfigurationError: Not a DataFrame, no cache folder, a bad option, or a source file
            gone since the DataFrame was read.

    Example:
        cached = cache_dataframe(df, parent_cache_dir_url="file:///tmp/cache")
        print(cached.url, cached.rows, "written" if cached.created else "reused")
    """
    require("pyspark.sql", extra="spark", purpose="make_spark_converter")
    if not hasattr(dataframe, "sparkSession"):
        raise ConfigurationError(
            f"make_spark_converter needs a Spark DataFrame, got {type(dataframe).__name__}; for "
            f"a folder of Parquet files use spark.read.parquet(path), or stream it as it is "
            f"with StreamingDataset(remote=path)"
        )
    if on_null not in ("fill", "error", "skip"):
        raise ConfigurationError(f"on_null must be 'fill', 'error' or 'skip', got {on_null!r}")
    if size_limit is not None and (not isinstance(size_limit, int) or size_limit < 1):
        raise ConfigurationError(f"the shard size limit must be a positive int, got {size_limit!r}")
    parent = parent_cache_dir(dataframe.sparkSession, parent_cache_dir_url)
    compression = mds_compression(compression_codec)
    prepared = cast_floats(dataframe, dtype)
    options: dict[str, Any] = {"dtype": dtype, "compression": compression}
    if on_null != "fill":  # the default leaves the keys of copies made before it unchanged
        options["on_null"] = on_null
    if size_limit is not None:
        options["size_limit"] = size_limit
    key, material = dataframe_key(prepared, options)
    remote = is_remote(parent)
    key_url = f"{parent}/{key}" if remote else os.path.join(local_path(parent), key)
    found = _read_marker(key_url)
    if found is not None and open_store(found.url).exists("index.json"):
        logger.info("reusing the DataFrame's MDS copy at %s (%d rows)", found.url, found.rows)
        return found
    if found is not None:
        logger.warning("%s has no index.json any more (deleted?): writing it again", found.url)
    run = f"run-{uuid.uuid4().hex[:12]}"
    url = f"{key_url}/{run}" if remote else os.path.join(key_url, run)
    logger.info("materializing the DataFrame as MDS at %s", url)
    writer: dict[str, Any] = {"out": url, "compression": compression}
    if size_limit is not None:
        writer["size_limit"] = size_limit
    try:
        to_write = fill_nulls(prepared, dtype) if on_null == "fill" else prepared
        dataframe_to_mds(to_write, mds_kwargs=writer, progress=progress,
                         on_null="skip" if on_null == "skip" else "error")  # fmt: skip
    except BaseException:
        _remove_failed(key_url, url, remote)
        raise
    rows = _count_rows(url)
    marker = {"dataset": run, "rows": rows, "key": material}
    if _publish_marker(key_url, marker, replace=found is not None):
        return CachedDataFrame(url=url, key_url=key_url, rows=rows, created=True)
    winner = _read_marker(key_url)
    assert winner is not None, "the marker that won exists"
    if remote:
        logger.warning(
            "another process published %s first; %s is a complete copy nobody uses (delete it "
            "at will)",
            winner.url,
            url,
        )
    else:
        shutil.rmtree(url, ignore_errors=True)
    return winner


def delete_cached(key_url: str) -> None:
    """Remove a key's folder (marker first, so no reader picks the copy up meanwhile).

    Raises:
        ConfigurationError: The copy is on an object store (stores here never delete).
    """
    if is_remote(key_url):
        raise ConfigurationError(
            f"{key_url} is on an object store, and shardstream never deletes from one: remove "
            f"the prefix with the store's own tools"
        )
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(key_url, MARKER))
    shutil.rmtree(key_url, ignore_errors=True)


def _remove_failed(key_url: str, url: str, remote: bool) -> None:
    """After a failed conversion: no partial copy left where a good one is expected."""
    if remote:  # stores here are never deleted from; no marker names it, so none reads it
        logger.warning(
            "the conversion failed; %s may hold a partial copy (no marker names it)", url
        )
        return
    shutil.rmtree(url, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(key_url)  # only when empty: another run's copy or marker stays


def _read_marker(key_url: str) -> CachedDataFrame | None:
    store = open_store(key_url)
    try:
        marker = json.loads(store.get_bytes(MARKER))
    except (ObjectNotFoundError, FileNotFoundError):
        return None
    run = marker.get("dataset") if isinstance(marker, dict) else None
    rows = marker.get("rows") if isinstance(marker, dict) else None
    if not isinstance(run, str) or not isinstance(rows, int) or "/" in run:
        raise ConfigurationError(
            f"{store.url(MARKER)} is not a converter marker: {marker!r}; the cache folder "
            "holds something else: give make_spark_converter another parent_cache_dir_url"
        )
    url = f"{key_url}/{run}" if is_remote(key_url) else os.path.join(key_url, run)
    return CachedDataFrame(url=url, key_url=key_url, rows=rows, created=False)


def _count_rows(url: str) -> int:
    store = open_store(url)
    entries = parse_index(store.get_bytes("index.json"), source=store.url("index.json"))
    return sum(entry.samples for entry in entries)


def _publish_marker(key_url: str, marker: dict[str, Any], *, replace: bool = False) -> bool:
    """Publish the marker unless another creator did first; True when this one counts.

    ``replace`` publishes over a marker whose copy is gone (the last such creator wins).
    """
    text = json.dumps(marker, indent=1, sort_keys=True).encode()
    if not is_remote(key_url):
        final = os.path.join(key_url, MARKER)
        handle, temporary = tempfile.mkstemp(prefix=f".{MARKER}.", dir=key_url)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            if replace:
                os.replace(temporary, final)
                return True
            os.link(temporary, final)  # fails when the marker exists: the first creator wins
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):  # gone when replaced
                os.remove(temporary)
        return True
    store = open_store(key_url)
    if not replace and store.exists(MARKER):
        return False
    with tempfile.TemporaryDirectory(prefix="shardstream-marker-") as folder:
        path = os.path.join(folder, MARKER)
        with open(path, "wb") as out:
            out.write(text)
        store.put_file(path, MARKER)
    return True
