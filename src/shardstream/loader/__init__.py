"""Loaders over streaming datasets (imports torch), and Petastorm's converter API."""

from shardstream.loader.dataloader import StreamingDataLoader
from shardstream.loader.spark_converter import (
    ConverterDataLoader,
    SparkDatasetConverter,
    make_spark_converter,
)

__all__ = [
    "ConverterDataLoader",
    "SparkDatasetConverter",
    "StreamingDataLoader",
    "make_spark_converter",
]
