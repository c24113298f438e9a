"""What identifies a DataFrame's materialized copy: its plan, its source files, the options.

The key is a SHA-256 digest of:

* the DataFrame's analyzed plan, canonicalized by Spark (expression ids and attribute names
  erased, so the same query gives the same text in any session), and its schema as JSON;
* every source file (``DataFrame.inputFiles()``) with its size and modification time, stat'ed
  through ``os.stat`` for local files (nanoseconds) and through Spark's Hadoop file system for
  anything else (``s3a://``, ``abfss://``, ``dbfs:/``...);
* the session time zone and the conversion options (float dtype, compression).

A plan whose leaves the text cannot identify (rows from ``createDataFrame`` or an RDD) is
keyed to the Spark application too, with Spark's semantic hash of the plan: reused within that
application, rebuilt by any other.

A Spark Connect DataFrame, which has no JVM plan on the client, is keyed by what its server
tells instead (:mod:`shardstream.converters.spark_connect_key`), with the same options.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from shardstream._optional import require
from shardstream.converters.spark_connect_key import connect_material, is_connect
from shardstream.errors import ConfigurationError

__all__ = ["KEY_VERSION", "cast_floats", "dataframe_key", "hadoop_stats", "mds_compression"]

logger = logging.getLogger(__name__)

KEY_VERSION = 1  # bump when the same DataFrame would be written differently
_IN_MEMORY_LEAVES = re.compile(
    r"\b(LogicalRDD|LocalRelation|CachedLocalRelation|ExternalRDD|ExistingRDD)\b"
)
_INT_MAX = 2**31 - 1

# Petastorm's Parquet codecs, and what each becomes in MDS (which has no lz4 or raw deflate).
_PETASTORM_CODECS: Mapping[str, str | None] = {
    "uncompressed": None,
    "none": None,
    "snappy": "snappy",
    "gzip": "gz",
    "deflate": "gz",
    "bzip2": "bz2",
    "lz4": "zstd",
    "zstd": "zstd",
}
_MDS_CODECS = ("br", "bz2", "gz", "snappy", "zstd")
DEFAULT_CODEC = "zstd"


def mds_compression(codec: str | None) -> str | None:
    """The MDS compression for a Petastorm ``compression_codec`` (or an MDS name).

    ``None`` gives zstd (``dataframe_to_mds``'s default); ``'uncompressed'`` gives none;
    ``'gzip'`` and ``'deflate'`` give ``gz``, ``'bzip2'`` gives ``bz2``, ``'snappy'`` stays,
    and ``'lz4'``, which MDS lacks, gives zstd (as fast, smaller). MDS names (``'zstd:7'``,
    ``'br'``...) pass through.

    Raises:
        ConfigurationError: A codec neither Petastorm nor MDS knows.
    """
    if codec is None:
        return DEFAULT_CODEC
    if not isinstance(codec, str):
        raise ConfigurationError(f"compression_codec must be a string or None, got {codec!r}")
    name = codec.lower()
    if name in _PETASTORM_CODECS:
        mapped = _PETASTORM_CODECS[name]
        if name == "lz4":
            logger.info("compression_codec='lz4': MDS has no lz4, using zstd")
        return mapped
    if name.split(":", 1)[0] in _MDS_CODECS:
        return name
    raise ConfigurationError(
        f"compression_codec={codec!r} is unknown; use one of "
        f"{', '.join(sorted(_PETASTORM_CODECS))} (Petastorm's names) or an MDS compression "
        f"({', '.join(_MDS_CODECS)}, with an optional ':level')"
    )


def cast_floats(dataframe: Any, dtype: str | None) -> Any:
    """Cast every float and double column, arrays and ML vectors included, to ``dtype``.

    Args:
        dataframe: A ``pyspark.sql.DataFrame``.
        dtype: ``'float32'`` (Petastorm's default), ``'float64'``, or ``None`` to keep each
            column's type (ML vectors still become ``array<double>``).

    Returns:
        The DataFrame with the casts applied (the same one when nothing changes).

    Raises:
        ConfigurationError: ``dtype`` is none of the above.
    """
    if dtype not in ("float32", "float64", None):
        raise ConfigurationError(f"dtype must be 'float32', 'float64' or None, got {dtype!r}")
    types = require("pyspark.sql.types", extra="spark", purpose="make_spark_converter")
    target = None
    if dtype is not None:
        target = types.FloatType() if dtype == "float32" else types.DoubleType()
    changed = False
    columns = []
    for field in dataframe.schema.fields:
        column = dataframe[field.name]
        if type(field.dataType).__name__ == "VectorUDT":
            ml = require("pyspark.ml.functions", extra="spark", purpose="ML vector columns")
            column = ml.vector_to_array(column, dtype or "float64")
            changed = True
        elif target is not None:
            cast = _with_floats(field.dataType, target, types)
            if cast != field.dataType:
                column = column.cast(cast)
                changed = True
        columns.append(column.alias(field.name))
    return dataframe.select(*columns) if changed else dataframe


def _with_floats(data_type: Any, target: Any, types: Any) -> Any:
    """``data_type`` with its float and double leaves (through arrays) replaced by ``target``."""
    if isinstance(data_type, (types.FloatType, types.DoubleType)):
        return target
    if isinstance(data_type, types.ArrayType):
        element = _with_floats(data_type.elementType, target, types)
        return types.ArrayType(element, data_type.containsNull)
    return data_type


def dataframe_key(dataframe: Any, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The cache key of ``dataframe`` written with ``options``, and what it was computed from.

    Args:
        dataframe: A ``pyspark.sql.DataFrame``, classic or Spark Connect.
        options: The conversion options that change what is written (JSON-serializable).

    Returns:
        ``(key, material)``: a 32-hex-digit key, and the JSON-able material it digests (kept
        beside the data, to tell later why a key changed).

    Raises:
        ConfigurationError: The DataFrame gives no plan to key it by, or a source file is gone.
    """
    if is_connect(dataframe):
        served = {"version": KEY_VERSION, **connect_material(dataframe, _IN_MEMORY_LEAVES)}
        served["options"] = dict(options)
        return _digest(served), served
    plan = _plan_text(dataframe)
    session = dataframe.sparkSession
    material: dict[str, Any] = {
        "version": KEY_VERSION,
        "plan": plan,
        "schema": dataframe.schema.json(),
        "time_zone": session.conf.get("spark.sql.session.timeZone"),  # what casts assume
        "files": _file_stats(session, sorted(dataframe.inputFiles())),
        "options": dict(options),
    }
    if _IN_MEMORY_LEAVES.search(plan):
        material["application"] = [session.sparkContext.applicationId, dataframe.semanticHash()]
        logger.info(
            "the DataFrame reads in-memory rows (createDataFrame or an RDD): its cache is keyed "
            "to this Spark application (%s)",
            material["application"][0],
        )
    return _digest(material), material


def _digest(material: Mapping[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _plan_text(dataframe: Any) -> str:
    try:
        plan = dataframe._jdf.queryExecution().analyzed().canonicalized()
    except AttributeError as exc:
        raise ConfigurationError(
            f"make_spark_converter needs a Spark DataFrame with a plan to key its cache by; "
            f"{type(dataframe).__module__}.{type(dataframe).__name__} has none"
        ) from exc
    try:  # every field, however many (toString cuts lists at maxToStringFields)
        return str(plan.treeString(False, False, _INT_MAX, False))
    except Exception:  # a Spark whose treeString differs: the usual text
        logger.debug("treeString with all fields failed; keying by toString", exc_info=True)
        return str(plan.toString())


def _file_stats(session: Any, urls: list[str]) -> list[list[Any]]:
    """``[url, size, modification time]`` of each source file, in ``urls``' order."""
    local = [url for url in urls if urlsplit(url).scheme in ("", "file")]
    found = {url: _local_stat(url) for url in local}
    found.update(hadoop_stats(session, [url for url in urls if url not in found]))
    return [[url, *found[url]] for url in urls]


def _local_stat(url: str) -> tuple[int, int]:
    parts = urlsplit(url)
    path = unquote(parts.path) if parts.scheme else url
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot stat the DataFrame's source file {url}: {exc}; it was moved or deleted "
            "since the DataFrame was read: read the source again"
        ) from exc
    return info.st_size, info.st_mtime_ns


def hadoop_stats(session: Any, urls: list[str]) -> dict[str, tuple[int, int]]:
    """``{url: (size, modification time in ms)}`` through Spark's Hadoop file systems.

    One listing per folder (one request to an object store) rather than a request per file,
    each ``FileStatus`` read from its text (one call into the JVM); a file the listing does not
    show as expected is asked about alone.
    """
    if not urls:
        return {}
    context = session.sparkContext
    jvm, conf = context._jvm, context._jsc.hadoopConfiguration()
    folders: dict[str, list[str]] = {}
    for url in urls:
        folders.setdefault(url.rsplit("/", 1)[0], []).append(url)
    stats: dict[str, tuple[int, int]] = {}
    for folder, members in folders.items():
        path = jvm.org.apache.hadoop.fs.Path(folder)
        listed: dict[str, tuple[int, int]] = {}
        try:
            for status in path.getFileSystem(conf).listStatus(path):
                match = _STATUS.search(str(status.toString()))  # one call, not three
                if match:
                    listed[match[1]] = (int(match[2]), int(match[3]))
        except Exception:  # a folder that cannot be listed: each file alone
            logger.debug("listing %s failed; stat'ing its files one by one", folder, exc_info=True)
        for url in members:
            stats[url] = listed.get(url) or _hadoop_stat(jvm, conf, url)
    return stats


_STATUS = re.compile(r"path=([^;]*); isDirectory=false; length=(\d+);.*?modification_time=(\d+)")


def _hadoop_stat(jvm: Any, conf: Any, url: str) -> tuple[int, int]:
    path = jvm.org.apache.hadoop.fs.Path(url)
    status = path.getFileSystem(conf).getFileStatus(path)
    return int(status.getLen()), int(status.getModificationTime())
