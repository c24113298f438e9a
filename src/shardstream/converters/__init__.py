"""Other sources to MDS: Spark DataFrames, Delta tables, pandas, Arrow, Hugging Face and files.

``cache_dataframe`` keeps one MDS copy of a DataFrame per plan and source files, for
``shardstream.loader.make_spark_converter`` (Petastorm's converter API, which needs torch and
so lives in the loader layer).

Every converter goes through Arrow, so one type mapping (:mod:`.arrow_types`) and one null
policy (:mod:`.arrow_samples`) serve them all; the image-folder converter reads files directly.
Importing this package imports none of pyspark, pyarrow, pandas or datasets: each converter
imports what it needs when called.
"""

from typing import TYPE_CHECKING, Any

from shardstream.converters.arrow_samples import BatchConverter
from shardstream.converters.arrow_types import infer_columns, infer_encoding
from shardstream.converters.delta import delta_to_mds
from shardstream.converters.files import csv_to_mds, jsonl_to_mds
from shardstream.converters.image_folder import image_folder_to_mds
from shardstream.converters.spark import dataframe_to_mds
from shardstream.converters.spark_cache import (
    PARENT_CACHE_DIR_URL_CONF,
    SHARDSTREAM_CACHE_DIR_URL_CONF,
    CachedDataFrame,
    cache_dataframe,
)
from shardstream.converters.spark_types import infer_dataframe_schema, is_json_compatible
from shardstream.converters.tables import arrow_to_mds, hf_to_mds, pandas_to_mds

if TYPE_CHECKING:
    from shardstream.converters.spark_types import SPARK_TO_MDS

__all__ = [
    "PARENT_CACHE_DIR_URL_CONF",
    "SHARDSTREAM_CACHE_DIR_URL_CONF",
    "SPARK_TO_MDS",
    "BatchConverter",
    "CachedDataFrame",
    "arrow_to_mds",
    "cache_dataframe",
    "csv_to_mds",
    "dataframe_to_mds",
    "delta_to_mds",
    "hf_to_mds",
    "image_folder_to_mds",
    "infer_columns",
    "infer_dataframe_schema",
    "infer_encoding",
    "is_json_compatible",
    "jsonl_to_mds",
    "pandas_to_mds",
]


def __getattr__(name: str) -> Any:
    if name == "SPARK_TO_MDS":  # needs pyspark: built on first use
        from shardstream.converters import spark_types

        return spark_types.SPARK_TO_MDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
