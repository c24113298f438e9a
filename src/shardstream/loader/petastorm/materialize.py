"""Petastorm's writing side: ``dict_to_spark_row`` and ``materialize_dataset``.

A Petastorm dataset is a Parquet folder that Spark writes, each row encoded by its Unischema's
codecs (:func:`dict_to_spark_row`), plus the pickled Unischema in the key-value metadata of
``_common_metadata`` at its root (:func:`materialize_dataset`, around the Spark write). What is
written here is what Petastorm writes: its own ``make_reader`` reads it (the schema pickle names
Petastorm's classes, :func:`~shardstream.loader.petastorm.metadata.dump_unischema`, and the
row-group counts Petastorm's reader needs are stored too), and so does shardstream's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.converters.spark_workers import use_worker_python
from shardstream.errors import ConfigurationError, ObjectNotFoundError, SampleValueError
from shardstream.loader.petastorm.metadata import (
    COMMON_METADATA,
    ROW_GROUPS_PER_FILE_KEY,
    UNISCHEMA_KEY,
    dump_unischema,
)
from shardstream.loader.petastorm.unischema import Unischema
from shardstream.storage import DownloadOptions, ObjectStore, open_store
from shardstream.storage.base import Remover
from shardstream.tables.footers import fetch_footer, write_metadata_file
from shardstream.tables.layout import parse_metadata

__all__ = ["dict_to_spark_row", "materialize_dataset"]

logger = logging.getLogger(__name__)

# The Hadoop settings materialize_dataset sets for the write, as Petastorm sets them: no
# summary files unless asked, and row-group sizes checked every 3 rows (small rows groups
# are otherwise only cut every 100 rows).
_ROW_CHECK_KEYS = ("parquet.block.size.row.check.min", "parquet.row-group.size.row.check.min")
_SAVED_KEYS = (
    "parquet.summary.metadata.level", "parquet.enable.summary-metadata",
    "parquet.summary.metadata.propagate-errors", *_ROW_CHECK_KEYS, "parquet.block.size",
)  # fmt: skip


def dict_to_spark_row(unischema: Unischema, row_dict: Mapping[str, Any]) -> Any:
    """One row for Spark: each value encoded by its field's codec, a ``pyspark.Row``.

    A nullable field missing from ``row_dict`` is ``None``. A field without a codec keeps its
    value (a NumPy scalar becomes the Python one).

    Args:
        unischema: The dataset's schema.
        row_dict: One value per field, by name.

    Returns:
        A ``pyspark.Row`` with the schema's fields, in its order.

    Raises:
        SampleValueError: Fields missing or unknown, ``None`` in a field that is not
            nullable, or a value its codec refuses (a ``ValueError``, as in Petastorm).

    Example:
        rows = sc.parallelize(range(100)).map(lambda i: dict_to_spark_row(Schema, make_row(i)))
        spark.createDataFrame(rows, Schema.as_spark_schema()).write.parquet(url)
    """
    pyspark = require("pyspark", extra="spark", purpose="dict_to_spark_row")
    if not isinstance(unischema, Unischema):
        raise ConfigurationError(f"dict_to_spark_row takes a Unischema, got {unischema!r}")
    fields = unischema.fields
    row = dict(row_dict)
    for name, field in fields.items():
        if name not in row and field.nullable:
            row[name] = None
    if set(row) != set(fields):
        missing, unknown = sorted(set(fields) - set(row)), sorted(set(row) - set(fields))
        raise SampleValueError(
            f"the row's fields do not match {unischema.name}'s: missing {missing} (not "
            f"nullable), unknown {unknown}"
        )
    encoded: list[Any] = []
    for name, field in fields.items():
        value = row[name]
        if value is None:
            if not field.nullable:
                raise SampleValueError(f"field {name!r} is not nullable, but its value is None")
            encoded.append(None)
        elif field.codec is not None:
            encoded.append(field.codec.encode(field, value))
        else:
            encoded.append(value.tolist() if isinstance(value, np.generic) else value)
    return pyspark.Row(**dict(zip(fields, encoded, strict=True)))


@contextlib.contextmanager
def materialize_dataset(
    spark: Any,
    dataset_url: str,
    schema: Unischema,
    row_group_size_mb: int | None = None,
    use_summary_metadata: bool = False,
    filesystem_factory: Any = None,
) -> Iterator[None]:
    """Around a Spark write of ``dataset_url``: then store ``schema`` with it, as Petastorm does.

    Before the block, Spark's Hadoop settings are set as Petastorm sets them (row groups of
    ``row_group_size_mb``, checked every 3 rows; no summary files unless
    ``use_summary_metadata``). After it, ``_common_metadata`` is written at the dataset's root:
    the first data file's Arrow schema, with the pickled Unischema and each file's row-group
    count. The settings are restored whether the block succeeds or not; nothing is stored
    when it raises.

    Args:
        spark: The ``SparkSession`` that writes.
        dataset_url: The folder the block writes (``file://``, ``s3://``... or a path).
        schema: The rows' Unischema.
        row_group_size_mb: The Parquet row-group size, in MiB (``None``: Spark's).
        use_summary_metadata: Let Spark write its summary ``_metadata`` too.
        filesystem_factory: Not supported: stores take credentials from the environment.

    Raises:
        ConfigurationError: A bad argument, or no Parquet file in the folder after the block.

    Example:
        with materialize_dataset(spark, "file:///data/hello", HelloSchema, 64):
            rows = sc.parallelize(range(10)).map(lambda i: dict_to_spark_row(HelloSchema, row(i)))
            frame = spark.createDataFrame(rows, HelloSchema.as_spark_schema())
            frame.write.mode("overwrite").parquet("file:///data/hello")
    """
    if filesystem_factory is not None:
        raise ConfigurationError(
            "filesystem_factory is not supported: give the dataset's URL; stores take their "
            "credentials from the environment"
        )
    if not isinstance(schema, Unischema):
        raise ConfigurationError(f"materialize_dataset takes a Unischema, got {schema!r}")
    pickled = dump_unischema(schema)  # before the job, so a bad schema costs no Spark write
    use_worker_python(spark)  # the block's jobs unpickle dict_to_spark_row: shardstream's
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    saved = {key: hadoop.get(key) for key in _SAVED_KEYS}
    try:
        hadoop.set("parquet.summary.metadata.level", "ALL" if use_summary_metadata else "NONE")
        hadoop.setBoolean("parquet.summary.metadata.propagate-errors", True)
        for key in _ROW_CHECK_KEYS:
            hadoop.setInt(key, 3)
        if row_group_size_mb:
            hadoop.setInt("parquet.block.size", int(row_group_size_mb) * 1024 * 1024)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                hadoop.unset(key)
            else:
                hadoop.set(key, value)
    write_common_metadata(open_store(_url(dataset_url)), pickled)


def write_common_metadata(store: ObjectStore, pickled_schema: bytes) -> None:
    """Write ``_common_metadata`` at ``store``'s root: the files' schema, the Unischema, counts.

    Raises:
        ConfigurationError: The folder holds no Parquet data file.
    """
    files = sorted(key for key in store.list() if _is_data_file(key))
    if not files:
        raise ConfigurationError(
            f"{store.url('')} holds no Parquet file after the materialize_dataset block: write "
            f"the dataset inside the block, to the URL given to materialize_dataset"
        )
    counts = {}
    arrow_schema = None
    for key in files:
        metadata = _footer(store, key)
        counts[key] = metadata.num_row_groups
        if arrow_schema is None:
            arrow_schema = metadata.schema.to_arrow_schema()
    assert arrow_schema is not None
    stored = dict(arrow_schema.metadata or {})
    stored[UNISCHEMA_KEY] = pickled_schema
    stored[ROW_GROUPS_PER_FILE_KEY] = json.dumps(counts).encode()
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, COMMON_METADATA)
        write_metadata_file(arrow_schema.with_metadata(stored), path)
        store.put_file(path, COMMON_METADATA)
    if isinstance(store, Remover):  # Hadoop's checksum of the file, which it no longer matches
        with contextlib.suppress(OSError, ObjectNotFoundError):
            if store.exists(f".{COMMON_METADATA}.crc"):
                store.delete(f".{COMMON_METADATA}.crc")
    logger.info("stored the Unischema in %s (%d files)", store.url(COMMON_METADATA), len(files))


def _footer(store: ObjectStore, key: str) -> Any:
    """The file's ``FileMetaData``: its footer read by the footer stage, by range."""
    source = store.url(key)
    footer = fetch_footer(store, key, store.info(key).size, DownloadOptions(), source=source)
    return parse_metadata(footer, source=source)


def _is_data_file(key: str) -> bool:
    """Whether ``key`` is a data file: not Spark's or Hadoop's bookkeeping (``_*``, ``.*``)."""
    return not any(part.startswith(("_", ".")) for part in key.split("/"))


def _url(url: Any) -> str:
    if not isinstance(url, (str, os.PathLike)) or not str(url):
        raise ConfigurationError(f"the dataset URL must be a string, got {url!r}")
    return os.fspath(url).rstrip("/") or "/"
