"""Loaders over streaming datasets (imports torch), and Petastorm's converter API."""

from shardstream.loader.dataloader import StreamingDataLoader
from shardstream.loader.spark_converter import (
    ConverterDataLoader,
    SparkDatasetConverter,
    make_spark_converter,
    register_delete_dir_handler,
)
from shardstream.loader.transform_spec import TransformSpec

__all__ = [
    "ConverterDataLoader",
    "SparkDatasetConverter",
    "StreamingDataLoader",
    "TransformSpec",
    "make_spark_converter",
    "register_delete_dir_handler",
]
