"""Petastorm's ``make_petastorm_dataset``: a reader as a ``tf.data.Dataset``.

Each element is what the reader yields, as a namedtuple of tensors: one row (``make_reader``)
or one batch (``make_batch_reader``, each tensor's first dimension the rows). Types TensorFlow
lacks are converted as Petastorm converts them: ``uint16`` to ``int32``, ``uint32`` to
``int64``, dates and times to ``int64`` nanoseconds since 1970, decimals to text. The reader is
read once: repeat with its ``num_epochs``, not ``Dataset.repeat``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.errors import ConfigurationError
from shardstream.loader.fields import Field
from shardstream.loader.petastorm.unischema import as_field
from shardstream.loader.tf_dataset import with_one_shot_iterator

__all__ = ["make_petastorm_dataset"]

_EPOCH = np.datetime64("1970-01-01T00:00:00", "ns")
_WIDENED: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype("uint16"): np.dtype("int32"),
    np.dtype("uint32"): np.dtype("int64"),
}


def make_petastorm_dataset(reader: Any) -> Any:
    """A ``tf.data.Dataset`` of the reader's rows or batches, as namedtuples of tensors.

    Args:
        reader: A reader from :func:`make_reader` or :func:`make_batch_reader`.

    Returns:
        The dataset; it also has TF1's ``make_one_shot_iterator()``.

    Raises:
        MissingDependencyError: TensorFlow is not installed (``shardstream[tf]``).
        ConfigurationError: The reader yields NGrams.

    Example:
        with make_batch_reader("/data/events", num_epochs=1) as reader:
            dataset = make_petastorm_dataset(reader).map(lambda x: (x.features, x.label))
            model.fit(dataset)
    """
    tf = require("tensorflow", extra="tf", purpose="make_petastorm_dataset")
    if getattr(reader, "ngram", None):
        raise ConfigurationError("make_petastorm_dataset does not support NGram readers")
    fields = [as_field(field) for field in reader.schema.fields.values()]
    element = reader.schema.namedtuple_type()
    batched = bool(reader.batched_output)
    signature = element(*(_spec(field, batched, tf) for field in fields))

    def rows() -> Iterator[Any]:
        if reader.last_row_consumed:
            raise RuntimeError(
                "make_petastorm_dataset reads its reader once: use the reader's num_epochs to "
                "read more epochs, not Dataset.repeat"
            )
        for row in reader:
            yield element(*(_sanitize(f, value) for f, value in zip(fields, row, strict=True)))

    dataset = tf.data.Dataset.from_generator(rows, output_signature=signature)
    return with_one_shot_iterator(dataset, tf)


def _spec(field: Field, batched: bool, tf: Any) -> Any:
    """The ``tf.TensorSpec`` of a field's values (a batch of them when ``batched``)."""
    kind = field.dtype
    if kind.kind in "USO":
        dtype = tf.string
    elif kind.kind == "M":
        dtype = tf.int64
    else:
        dtype = tf.as_dtype(_WIDENED.get(kind, kind))
    shape = None if field.shape is None else ((None,) if batched else ()) + tuple(field.shape)
    return tf.TensorSpec(shape=shape, dtype=dtype)


def _sanitize(field: Field, value: Any) -> Any:
    """``value`` in a type TensorFlow holds, as Petastorm converts it.

    Raises:
        ConfigurationError: A null, which no tensor holds.
    """
    if value is None:
        raise ConfigurationError(
            f"field {field.name!r} is null in a row: a tensor holds no null; leave such rows "
            f"out with a predicate or filters"
        )
    if isinstance(value, Decimal):
        return str(value.normalize())
    if isinstance(value, (datetime.date, np.datetime64)):
        return _nanoseconds(np.array([value], dtype=object))[0]
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype in _WIDENED:
        return value.astype(_WIDENED[value.dtype])
    if value.dtype.kind == "M":
        return _nanoseconds(value)
    if value.dtype.kind == "O" and value.size:
        first = value.flat[0]
        if isinstance(first, Decimal):
            return np.array([str(item.normalize()) for item in value.flat]).reshape(value.shape)
        if isinstance(first, datetime.date):
            return _nanoseconds(value)
        if any(item is None for item in value.flat):
            raise ConfigurationError(
                f"field {field.name!r} holds a null in a batch: a tensor holds no null; leave "
                f"such rows out with a predicate or filters"
            )
    return value


def _nanoseconds(values: Any) -> Any:
    """Dates and times as ``int64`` nanoseconds since 1970 (UTC)."""
    values = np.asarray(values)
    if values.dtype.kind == "M":
        return (values.astype("datetime64[ns]") - _EPOCH).astype(np.int64)
    as_times = np.asarray(
        [
            item.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            if isinstance(item, datetime.datetime) and item.tzinfo is not None
            else item
            for item in values.ravel().tolist()
        ],
        dtype="datetime64[ns]",
    ).reshape(np.shape(values))
    return (as_times - _EPOCH).astype(np.int64)
