"""A ``tf.data.Dataset`` over a :class:`~shardstream.StreamingDataset`, from its MDS columns.

The element signature comes from the dataset's ``index.json``: numeric scalars keep their
dtype, ``ndarray`` columns their dtype (and shape when the encoding fixes one), and text,
bytes, decimals and ``json`` columns (Spark structs and maps) become ``tf.string`` (JSON text
for ``json``). Other encodings (images, pickles, Python ints) have no TensorFlow form and are
refused, naming the column. TensorFlow is imported when a dataset is made, never before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.dataset.streaming import StreamingDataset
from shardstream.errors import ConfigurationError
from shardstream.format.encodings import get_encoding
from shardstream.format.index import parse_index
from shardstream.loader.epoch_tail import EpochTail
from shardstream.storage import open_store

__all__ = ["element_spec", "tf_dataset"]

_NUMERIC = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64")  # fmt: skip
_TEXT = ("str", "bytes", "str_decimal", "str_int", "str_float", "json")


def tf_dataset(
    dataset: StreamingDataset,
    url: str,
    batch_size: int,
    num_epochs: int | None,
    tail: EpochTail | None,
    prefetch: int | None,
) -> Any:
    """``dataset``'s samples as a batched ``tf.data.Dataset``.

    Args:
        dataset: The streaming dataset (its ``batch_size`` is ``batch_size``).
        url: The MDS dataset it reads, whose index gives the columns.
        batch_size: Rows per batch.
        num_epochs: Epochs per pass over the ``tf.data.Dataset``; ``None`` loops for ever.
        tail: The padding to cut from each epoch's end, or ``None`` to keep it.
        prefetch: Batches to prefetch (default ``tf.data.AUTOTUNE``).

    Returns:
        The ``tf.data.Dataset`` of dicts of tensors.

    Raises:
        MissingDependencyError: TensorFlow is not installed.
        ConfigurationError: A column TensorFlow cannot hold.
    """
    tf = require("tensorflow", extra="tf", purpose="make_tf_dataset")
    store = open_store(url)
    entries = parse_index(store.get_bytes("index.json"), source=store.url("index.json"))
    columns = dict(entries[0].columns) if entries else {}
    specs, converters = element_spec(columns, tf)

    def samples() -> Iterator[dict[str, Any]]:
        epoch = 0
        while num_epochs is None or epoch < num_epochs:
            for position, sample in enumerate(dataset):
                last = tail is not None and position // batch_size == tail.steps - 1
                if last and tail is not None and not tail.keep[position % batch_size]:
                    continue  # padding: a repeat of a row another batch holds
                yield {name: converters[name](sample[name]) for name in specs}
            epoch += 1

    result = tf.data.Dataset.from_generator(samples, output_signature=specs).batch(batch_size)
    return result.prefetch(tf.data.AUTOTUNE if prefetch is None else prefetch)


def element_spec(
    columns: Mapping[str, str], tf: Any
) -> tuple[dict[str, Any], dict[str, Callable[[Any], Any]]]:
    """The ``tf.TensorSpec`` of each column, and how a decoded value becomes its tensor value.

    Raises:
        ConfigurationError: A column's encoding has no TensorFlow form.
    """
    specs: dict[str, Any] = {}
    converters: dict[str, Callable[[Any], Any]] = {}
    for name, encoding in columns.items():
        base = encoding.split(":", 1)[0]
        if base in _NUMERIC:
            specs[name] = tf.TensorSpec(shape=(), dtype=tf.as_dtype(base))
            converters[name] = np.asarray
        elif base == "ndarray":
            codec = get_encoding(encoding)
            dtype = getattr(codec, "dtype", None)
            if dtype is None:
                raise ConfigurationError(
                    f"column {name!r} ({encoding}) stores its dtype per sample; TensorFlow "
                    f"needs one dtype per column: write it as ndarray:<dtype>"
                )
            shape = getattr(codec, "shape", None)
            specs[name] = tf.TensorSpec(shape=shape, dtype=tf.as_dtype(dtype))
            converters[name] = np.asarray
        elif base in _TEXT:
            specs[name] = tf.TensorSpec(shape=(), dtype=tf.string)
            converters[name] = _as_json if base == "json" else _as_text
        else:
            raise ConfigurationError(
                f"column {name!r} has the encoding {encoding!r}, which has no TensorFlow form "
                f"here (numbers, ndarray, text, bytes and json columns do)"
            )
    return specs, converters


def _as_text(value: Any) -> Any:
    return value if isinstance(value, (bytes, str)) else str(value)


def _as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
