"""The fields a converter's loaders yield: each column's name, NumPy dtype, shape and nullability.

Petastorm describes a dataset by fields of this kind (its Unischema); its TensorFlow elements
and ``transform_spec`` are written in their terms. Here they come from the dataset's MDS column
encodings, refined by what the source DataFrame's Spark schema knows and MDS does not keep: that
a ``uint8`` column was a ``BooleanType``, and how deep an array column nests (MDS stores the
shape of each ``ndarray`` sample, so the rank of a column is unknown without the schema).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardstream.errors import ConfigurationError
from shardstream.format.encodings import get_encoding

__all__ = ["Field", "SparkHint", "as_array", "batch_arrays", "dataset_columns", "fields_of",
           "spark_hints"]  # fmt: skip

_NUMERIC = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64")  # fmt: skip
_TEXT = ("str", "str_decimal", "str_int", "str_float", "json")


@dataclass(frozen=True)
class Field:
    """One column as the loaders yield it.

    Attributes:
        name: The column.
        dtype: Its NumPy dtype (``str_`` for text, ``bytes_`` for bytes).
        shape: The shape of one row's value, ``None`` for a dimension that varies; ``None``
            when even the rank is unknown.
        nullable: Whether the source allowed nulls.

    Example:
        >>> Field("label", np.dtype("int64"), ())
        Field(name='label', dtype=dtype('int64'), shape=(), nullable=False)
    """

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int | None, ...] | None
    nullable: bool = False

    @property
    def is_text(self) -> bool:
        """Whether the values are text or bytes (``tf.string``)."""
        return self.dtype.kind in "USO"


@dataclass(frozen=True)
class SparkHint:
    """What a DataFrame's schema says of a column that its MDS encoding does not.

    Attributes:
        boolean: A ``BooleanType`` column (stored as ``uint8``).
        rank: How deep arrays (and ML vectors) nest; ``0`` for a scalar.
        nullable: The schema allows nulls.

    Example:
        >>> SparkHint(boolean=False, rank=1, nullable=True).rank
        1
    """

    boolean: bool
    rank: int
    nullable: bool


def spark_hints(schema: Any) -> dict[str, SparkHint]:
    """The hints of each column of a ``pyspark.sql.types.StructType``.

    Example:
        hints = spark_hints(df.schema)   # {'features': SparkHint(False, 1, True), ...}
    """
    hints = {}
    for field in schema.fields:
        data_type, rank = field.dataType, 0
        while type(data_type).__name__ == "ArrayType":
            data_type, rank = data_type.elementType, rank + 1
        if type(data_type).__name__ == "VectorUDT":
            rank += 1
        boolean = type(data_type).__name__ == "BooleanType" and rank == 0
        hints[field.name] = SparkHint(boolean, rank, bool(field.nullable))
    return hints


def dataset_columns(dataset: Any) -> dict[str, str]:
    """The MDS column encodings of ``dataset`` (a ``StreamingDataset``), from the index it loaded.

    Not read again from the remote: the loaders are adapters on what the dataset reads.
    """
    shards = dataset.shards
    if not shards:
        return {}
    return dict(zip(shards[0].column_names, shards[0].column_encodings, strict=True))


def fields_of(
    columns: Mapping[str, str], hints: Mapping[str, SparkHint] | None = None
) -> list[Field]:
    """The fields of a dataset with these MDS ``columns``, in their order.

    Raises:
        ConfigurationError: A column whose encoding has no plain NumPy form (images, pickles,
            Python ints), or an ``ndarray`` column without a dtype.

    Example:
        >>> [f.shape for f in fields_of({"v": "ndarray:float32", "y": "int64"},
        ...                             {"v": SparkHint(False, 1, False)})]
        [(None,), ()]
    """
    hints = hints or {}
    fields = []
    for name, encoding in columns.items():
        hint = hints.get(name)
        nullable = hint.nullable if hint is not None else False
        base = encoding.split(":", 1)[0]
        if base in _NUMERIC:
            boolean = hint is not None and hint.boolean
            dtype = np.dtype(bool) if boolean else np.dtype(base)
            fields.append(Field(name, dtype, (), nullable))
        elif base == "ndarray":
            codec = get_encoding(encoding)
            array_dtype = getattr(codec, "dtype", None)
            if array_dtype is None:
                raise ConfigurationError(
                    f"column {name!r} ({encoding}) stores its dtype per sample; a loader of "
                    f"typed batches needs one dtype per column: write it as ndarray:<dtype>"
                )
            shape = getattr(codec, "shape", None)
            if shape is None and hint is not None:
                shape = (None,) * hint.rank
            fields.append(Field(name, np.dtype(array_dtype), shape, nullable))
        elif base in _TEXT:
            fields.append(Field(name, np.dtype(np.str_), (), nullable))
        elif base == "bytes":
            fields.append(Field(name, np.dtype(np.bytes_), (), nullable))
        else:
            raise ConfigurationError(
                f"column {name!r} has the encoding {encoding!r}, which has no typed form here "
                f"(numbers, ndarray, text, bytes and json columns do)"
            )
    return fields


def batch_arrays(
    rows: Sequence[Mapping[str, Any]], fields: Iterable[Field], columns: Mapping[str, str]
) -> dict[str, Any]:
    """Each field's values over ``rows``, one array per field (text as an object array).

    Raises:
        ConfigurationError: An array column whose rows differ in shape within the batch.

    Example:
        >>> flag = Field("y", np.dtype(bool), ())
        >>> batch_arrays([{"y": 1}, {"y": 0}], [flag], {"y": "uint8"})["y"].tolist()
        [True, False]
    """
    result: dict[str, Any] = {}
    for field in fields:
        values = [row[field.name] for row in rows]
        if columns.get(field.name) == "json":
            values = [json.dumps(value, sort_keys=True) for value in values]
        result[field.name] = as_array(field, values)
    return result


def as_array(field: Field, values: Sequence[Any]) -> Any:
    """``values`` of ``field`` as one array of the field's dtype, rows first.

    Raises:
        ConfigurationError: Array values of different shapes.
    """
    if field.is_text:
        return np.array(list(values), dtype=object)
    if field.shape == ():
        return np.asarray(values).astype(field.dtype, copy=False)
    shapes = {np.shape(value) for value in values}
    if len(shapes) > 1:
        raise ConfigurationError(
            f"column {field.name!r} holds arrays of different shapes in one batch "
            f"({', '.join(str(shape) for shape in sorted(shapes)[:3])}); a batch stacks them, so "
            f"give every row the same shape (pad them in Spark), or read rows one by one with "
            f"StreamingDataset"
        )
    if not values:
        return np.zeros((0, *(dim or 0 for dim in field.shape or ())), dtype=field.dtype)
    return np.stack([np.asarray(value) for value in values]).astype(field.dtype, copy=False)
