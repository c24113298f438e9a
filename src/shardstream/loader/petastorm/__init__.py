"""Petastorm's reader API over shardstream: change the import line, keep the code.

``from petastorm import make_reader, make_batch_reader, TransformSpec``,
``from petastorm.tf_utils import make_petastorm_dataset, tf_tensors``,
``from petastorm.transform import transform_schema, edit_field``, the writing side
(``from petastorm.etl.dataset_metadata import materialize_dataset``,
``from petastorm.unischema import dict_to_spark_row`` and ``from petastorm.codecs import ...``),
``from petastorm.pytorch import DataLoader, BatchedDataLoader, InMemBatchedDataLoader``,
``from petastorm.predicates import in_lambda``
and ``from petastorm.spark import make_spark_converter`` all become
``from shardstream.loader.petastorm import ...``. The readers stream the Parquet folder with
:class:`~shardstream.StreamingDataset` (docs/petastorm.md, docs/parquet.md).
"""

from shardstream.loader.epoch_loader import ConverterDataLoader
from shardstream.loader.petastorm.batched import BatchedDataLoader, InMemBatchedDataLoader
from shardstream.loader.petastorm.codecs import (
    CompressedImageCodec,
    CompressedNdarrayCodec,
    NdarrayCodec,
    ScalarCodec,
)
from shardstream.loader.petastorm.make import make_batch_reader, make_reader
from shardstream.loader.petastorm.materialize import dict_to_spark_row, materialize_dataset
from shardstream.loader.petastorm.predicates import (
    PredicateBase,
    in_intersection,
    in_lambda,
    in_negate,
    in_pseudorandom_split,
    in_reduce,
    in_set,
)
from shardstream.loader.petastorm.pytorch import DataLoader, decimal_friendly_collate
from shardstream.loader.petastorm.reader import Reader
from shardstream.loader.petastorm.tf_utils import make_petastorm_dataset, tf_tensors
from shardstream.loader.petastorm.transform import edit_field, transform_schema
from shardstream.loader.petastorm.unischema import Unischema, UnischemaField
from shardstream.loader.spark_converter import (
    SparkDatasetConverter,
    make_spark_converter,
    register_delete_dir_handler,
)
from shardstream.loader.transform_spec import TransformSpec

__all__ = [
    "BatchedDataLoader",
    "CompressedImageCodec",
    "CompressedNdarrayCodec",
    "ConverterDataLoader",
    "DataLoader",
    "InMemBatchedDataLoader",
    "NdarrayCodec",
    "PredicateBase",
    "Reader",
    "ScalarCodec",
    "SparkDatasetConverter",
    "TransformSpec",
    "Unischema",
    "UnischemaField",
    "decimal_friendly_collate",
    "dict_to_spark_row",
    "edit_field",
    "in_intersection",
    "in_lambda",
    "in_negate",
    "in_pseudorandom_split",
    "in_reduce",
    "in_set",
    "make_batch_reader",
    "make_petastorm_dataset",
    "make_reader",
    "make_spark_converter",
    "materialize_dataset",
    "register_delete_dir_handler",
    "tf_tensors",
    "transform_schema",
]
