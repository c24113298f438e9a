"""A ``tf.data.Dataset`` over a :class:`~shardstream.StreamingDataset`, with Petastorm's elements.

Each element is a namedtuple with one field per column, each a batched tensor, as Petastorm's
``make_tf_dataset`` yields (``dataset.map(lambda x: (x.features, x.label))``). The signature is
known before the first batch, from the dataset's loaded index and the source's Spark schema
(:mod:`shardstream.loader.fields`): numbers keep their dtype, ``BooleanType`` is ``tf.bool``,
arrays their dtype and rank (and sizes where the encoding fixes them), text, bytes, decimals and
``json`` columns ``tf.string``. A ``transform_spec`` runs on each batch as a pandas DataFrame.
TensorFlow is imported when a dataset is made, never before.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from shardstream._optional import require
from shardstream.dataset.streaming import StreamingDataset
from shardstream.loader.epoch_tail import EpochTail
from shardstream.loader.fields import Field, SparkHint, batch_arrays, dataset_columns, fields_of
from shardstream.loader.transform_spec import TransformSpec, apply_transform, transformed_fields

__all__ = ["row_type", "tf_dataset", "with_one_shot_iterator"]


def tf_dataset(
    dataset: StreamingDataset,
    batch_size: int,
    num_epochs: int | None,
    tail: EpochTail | None,
    prefetch: int | None,
    *,
    hints: Mapping[str, SparkHint] | None = None,
    transform_spec: TransformSpec | None = None,
) -> Any:
    """``dataset``'s rows as a ``tf.data.Dataset`` of namedtuples of batched tensors.

    Batches run on across epochs, as Petastorm's do: only the last one may be short.

    Args:
        dataset: The streaming dataset (its loaded index gives the columns).
        batch_size: Rows per batch.
        num_epochs: Epochs per pass over the ``tf.data.Dataset``; ``None`` loops for ever.
        tail: The padding to cut from each epoch's end, or ``None`` to keep it.
        prefetch: Batches to prefetch (default ``tf.data.AUTOTUNE``).
        hints: What the source's Spark schema says of each column (booleans, array ranks).
        transform_spec: A function over each batch, and the fields it leaves.

    Returns:
        The ``tf.data.Dataset``. It also has TF1's ``make_one_shot_iterator()``.

    Raises:
        MissingDependencyError: TensorFlow is not installed.
        ConfigurationError: A column TensorFlow cannot hold, or a bad ``transform_spec``.
    """
    tf = require("tensorflow", extra="tf", purpose="make_tf_dataset")
    columns = dataset_columns(dataset)
    fields = fields_of(columns, hints)
    out_fields = fields if transform_spec is None else transformed_fields(fields, transform_spec)
    element = row_type(out_fields)
    signature = element(*(_tensor_spec(field, tf) for field in out_fields))

    def convert(rows: Sequence[Mapping[str, Any]]) -> Any:
        if transform_spec is None:
            arrays = batch_arrays(rows, out_fields, columns)
        else:
            arrays = apply_transform(transform_spec, rows, fields, columns, out_fields)
        return element(*(arrays[field.name] for field in out_fields))

    def batches() -> Iterator[Any]:
        rows: list[Mapping[str, Any]] = []
        epoch = 0
        while num_epochs is None or epoch < num_epochs:
            for position, sample in enumerate(dataset):
                last = tail is not None and position // batch_size == tail.steps - 1
                if last and tail is not None and not tail.keep[position % batch_size]:
                    continue  # padding: a repeat of a row another batch holds
                rows.append(sample)
                if len(rows) == batch_size:
                    yield convert(rows)
                    rows = []
            epoch += 1
        if rows:
            yield convert(rows)

    result = tf.data.Dataset.from_generator(batches, output_signature=signature)
    return with_one_shot_iterator(
        result.prefetch(tf.data.AUTOTUNE if prefetch is None else prefetch), tf
    )


def with_one_shot_iterator(dataset: Any, tf: Any) -> Any:
    """``dataset`` with TF1's ``make_one_shot_iterator()`` method, which Petastorm's examples call.

    TF2 keeps only the function form, ``tf.compat.v1.data.make_one_shot_iterator(dataset)``.
    """
    dataset.make_one_shot_iterator = types.MethodType(
        lambda self: tf.compat.v1.data.make_one_shot_iterator(self), dataset
    )
    return dataset


def row_type(fields: Sequence[Field]) -> Any:
    """The namedtuple of a batch: one attribute per field, in order.

    A column name that is no Python identifier (``_c0``, ``my-col``) becomes ``_<position>``.

    Example:
        >>> import numpy as np
        >>> fields = [Field("features", np.dtype("f4"), (None,)), Field("_c0", np.dtype("i8"), ())]
        >>> row_type(fields)._fields
        ('features', '_1')
    """
    return collections.namedtuple("Row", [field.name for field in fields], rename=True)


def _tensor_spec(field: Field, tf: Any) -> Any:
    """The batched ``tf.TensorSpec`` of ``field``."""
    dtype = tf.string if field.is_text else tf.as_dtype(field.dtype)
    shape = None if field.shape is None else (None, *field.shape)
    return tf.TensorSpec(shape=shape, dtype=dtype)
