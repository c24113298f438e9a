"""Petastorm's ``make_petastorm_dataset`` and ``tf_tensors``: a reader in TensorFlow.

Each element is what the reader yields, as a namedtuple of tensors: one row (``make_reader``)
or one batch (``make_batch_reader``, each tensor's first dimension the rows). Types TensorFlow
lacks are converted as Petastorm converts them: ``uint16`` to ``int32``, ``uint32`` to
``int64``, dates and times to ``int64`` nanoseconds since 1970, decimals to text. The reader is
read once per pass: a second pass (``Dataset.repeat``) resets it, with Petastorm's
``UserWarning`` that the reader's ``num_epochs`` is the cheaper way.

The dataset is made as Petastorm makes it, by ``tf.compat.v1``'s ``Dataset``: a TF2 dataset
(``model.fit``, ``as_numpy_iterator``) that also has TF1's ``output_shapes``, ``output_types``
and ``make_one_shot_iterator()``, so code written for either runs. ``tf_tensors`` is TF1 graph
code: it reads the reader from a ``py_func`` each time the graph runs.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.errors import ConfigurationError
from shardstream.loader.fields import Field
from shardstream.loader.petastorm.unischema import as_field

__all__ = ["make_petastorm_dataset", "tf_tensors"]

_RESET_WARNING = (
    "Running multiple iterations over make_petastorm_dataset is not recommend for performance "
    "issue: each pass reads the reader again; use the reader's num_epochs, or Dataset.cache() "
    "before repeat()"
)
#: The name of the shuffling queue's size op, as Petastorm names it.
RANDOM_SHUFFLING_QUEUE_SIZE = "random_shuffling_queue_size"

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
        The dataset (a ``tf.compat.v1`` one: TF1's ``output_shapes``, ``output_types`` and
        ``make_one_shot_iterator()`` work on it too).

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
        if reader.last_row_consumed:  # a second pass: Petastorm resets the reader, and warns
            warnings.warn(_RESET_WARNING, UserWarning, stacklevel=2)
            reader.reset()
        for row in reader:
            yield element(*(_sanitize(f, value) for f, value in zip(fields, row, strict=True)))

    return tf.compat.v1.data.Dataset.from_generator(rows, output_signature=signature)


def tf_tensors(reader: Any, shuffling_queue_capacity: int = 0, min_after_dequeue: int = 0) -> Any:
    """A namedtuple of graph tensors that read the reader's next row (or batch) when run.

    Petastorm's TF1 bridge: each ``session.run`` of them takes one item from the reader, so it
    is used in a graph (``tf.compat.v1``, eager execution off, or inside a ``tf.Graph``).
    The end of the reader is ``tf.errors.OutOfRangeError``.

    Args:
        reader: A reader from :func:`make_reader` or :func:`make_batch_reader`.
        shuffling_queue_capacity: Above 0, rows pass through a ``RandomShuffleQueue`` this
            large, filled by a queue runner (``tf.train.start_queue_runners``).
        min_after_dequeue: The rows the queue keeps after each dequeue.

    Returns:
        The reader's schema's namedtuple, of tensors with the fields' static shapes.

    Raises:
        MissingDependencyError: TensorFlow is not installed (``shardstream[tf]``).
        ConfigurationError: The reader yields NGrams, or a batch reader with a shuffling queue
            (a batch is a row group already; Petastorm refuses it too).

    Example:
        import tensorflow.compat.v1 as tf

        with tf.Graph().as_default(), make_reader("/data/hello_world") as reader:
            row = tf_tensors(reader)
            with tf.Session() as session:
                first = session.run(row)
    """
    tf = require("tensorflow", extra="tf", purpose="tf_tensors")
    v1 = tf.compat.v1
    if getattr(reader, "ngram", None):
        raise ConfigurationError("tf_tensors does not support NGram readers")
    batched = bool(reader.batched_output)
    if batched and shuffling_queue_capacity > 0:
        raise ConfigurationError(
            "shuffling_queue_capacity cannot be used with a batch reader: each batch is a row "
            "group already; shuffle with the reader's shuffle_rows"
        )
    fields = [as_field(field) for field in reader.schema.fields.values()]
    specs = [_spec(field, batched, tf) for field in fields]
    dtypes = [spec.dtype for spec in specs]

    def next_item(_: Any) -> list[Any]:
        item = next(reader)  # StopIteration ends the graph's input: OutOfRangeError
        return [_sanitize(f, value) for f, value in zip(fields, item, strict=True)]

    tensors = v1.py_func(next_item, [tf.constant(1)], dtypes)
    if shuffling_queue_capacity > 0:
        queue = v1.RandomShuffleQueue(shuffling_queue_capacity, min_after_dequeue, dtypes)
        queue.size(name=RANDOM_SHUFFLING_QUEUE_SIZE)
        v1.train.add_queue_runner(v1.train.QueueRunner(queue, [queue.enqueue(tensors)]))
        dequeued = queue.dequeue()
        tensors = dequeued if isinstance(dequeued, (list, tuple)) else [dequeued]  # one field
    for tensor, spec in zip(tensors, specs, strict=True):
        tensor.set_shape(spec.shape)
    return reader.schema.namedtuple_type()(*tensors)


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
