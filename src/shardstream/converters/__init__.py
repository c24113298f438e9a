"""Other sources to MDS: Spark DataFrames, pandas, Arrow, Hugging Face datasets and files.

Every converter goes through Arrow, so one type mapping (:mod:`.arrow_types`) and one null
policy (:mod:`.arrow_samples`) serve them all; the image-folder converter reads files directly.
Importing this package imports none of pyspark, pyarrow, pandas or datasets: each converter
imports what it needs when called.
"""

from shardstream.converters.arrow_samples import BatchConverter
from shardstream.converters.arrow_types import infer_columns, infer_encoding
from shardstream.converters.files import csv_to_mds, jsonl_to_mds
from shardstream.converters.image_folder import image_folder_to_mds
from shardstream.converters.spark import dataframe_to_mds
from shardstream.converters.tables import arrow_to_mds, hf_to_mds, pandas_to_mds

__all__ = [
    "BatchConverter",
    "arrow_to_mds",
    "csv_to_mds",
    "dataframe_to_mds",
    "hf_to_mds",
    "image_folder_to_mds",
    "infer_columns",
    "infer_encoding",
    "jsonl_to_mds",
    "pandas_to_mds",
]
