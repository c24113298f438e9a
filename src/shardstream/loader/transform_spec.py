"""Petastorm's ``TransformSpec``: a function over each batch of rows as a pandas DataFrame.

The converter's loaders apply it to every batch before it becomes tensors: in the torch
loader's worker processes (as its ``collate_fn``), and in the generator of the TensorFlow
dataset. ``edit_fields``, ``removed_fields`` and ``selected_fields`` say, before the first batch,
which fields the function's output has, with Petastorm's meaning: the source's fields minus the
removed and edited ones, then the edited ones appended, then, when ``selected_fields`` is given,
just those in that order. The function must return a DataFrame with at least those columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from shardstream._optional import require
from shardstream.errors import ConfigurationError
from shardstream.loader.fields import Field, as_array, batch_arrays

__all__ = [
    "TransformCollate",
    "TransformSpec",
    "apply_transform",
    "as_transform_spec",
    "returned_columns",
    "transformed_fields",
]


class TransformSpec:
    """A function applied to each batch of rows, and the fields it leaves.

    Args:
        func: Takes a ``pandas.DataFrame`` of one batch's rows (array columns hold one NumPy
            array a row) and returns a DataFrame; ``None`` changes no values.
        edit_fields: Fields the function adds or changes: 4-tuples ``(name, numpy_dtype,
            shape, is_nullable)``, as Petastorm takes them, or Petastorm's ``UnischemaField``
            objects. ``None`` in ``shape`` is a dimension that varies.
        removed_fields: Names of fields the output drops.
        selected_fields: When given, the output's fields, in this order.

    Example:
        def normalize(frame):
            return frame.assign(x=frame.x / 255.0, y2=frame.y * 2)

        spec = TransformSpec(normalize, edit_fields=[("y2", np.int64, (), False)],
                             removed_fields=["y"])
        with converter.make_torch_dataloader(batch_size=32, transform_spec=spec) as loader:
            for batch in loader:  # batch["x"], batch["y2"]
                ...
    """

    def __init__(
        self,
        func: Callable[[Any], Any] | None = None,
        edit_fields: Sequence[Any] | None = None,
        removed_fields: Sequence[str] | None = None,
        selected_fields: Sequence[str] | None = None,
    ) -> None:
        if func is not None and not callable(func):
            raise ConfigurationError(f"TransformSpec's func must be callable, got {func!r}")
        self.func = func
        self.edit_fields = [_edited(field) for field in edit_fields or []]
        self.removed_fields = list(removed_fields or [])
        self.selected_fields = None if selected_fields is None else list(selected_fields)

    def __repr__(self) -> str:
        return (
            f"TransformSpec(func={self.func!r}, edit_fields={self.edit_fields!r}, "
            f"removed_fields={self.removed_fields!r}, selected_fields={self.selected_fields!r})"
        )


def as_transform_spec(spec: Any) -> TransformSpec | None:
    """``spec`` checked: ``None`` or a :class:`TransformSpec` (or Petastorm's, duck-typed).

    Raises:
        ConfigurationError: Anything else.
    """
    if spec is None or isinstance(spec, TransformSpec):
        return spec
    if hasattr(spec, "func") and hasattr(spec, "edit_fields"):  # petastorm.TransformSpec
        return TransformSpec(spec.func, spec.edit_fields, getattr(spec, "removed_fields", None),
                             getattr(spec, "selected_fields", None))  # fmt: skip
    raise ConfigurationError(
        f"transform_spec must be a shardstream.loader.TransformSpec, got {type(spec).__name__}"
    )


def _edited(field: Any) -> Field:
    """A Petastorm edit field (a 4-tuple or a ``UnischemaField``) as a :class:`Field`."""
    if isinstance(field, Field):  # one a TransformSpec made already
        return field
    if hasattr(field, "numpy_dtype"):  # UnischemaField: name, numpy_dtype, shape, codec, nullable
        name, dtype, shape, nullable = field.name, field.numpy_dtype, field.shape, field.nullable
    elif isinstance(field, (tuple, list)) and len(field) == 4:
        name, dtype, shape, nullable = field
    else:
        raise ConfigurationError(
            f"an edit field is a 4-tuple (name, numpy_dtype, shape, is_nullable) or a "
            f"UnischemaField; got {field!r}"
        )
    if shape is not None:
        shape = tuple(None if dim is None else int(dim) for dim in shape)
    return Field(str(name), np.dtype(dtype), shape, bool(nullable))


def transformed_fields(fields: Sequence[Field], spec: TransformSpec) -> list[Field]:
    """The fields after ``spec``, as Petastorm's ``transform_schema`` derives them.

    Raises:
        ConfigurationError: A removed or selected field that the fields do not hold.
    """
    names = [field.name for field in fields]
    unknown = [name for name in spec.removed_fields if name not in names]
    if unknown:
        raise ConfigurationError(
            f"transform_spec removes {', '.join(map(repr, unknown))}, which the dataset does "
            f"not have; its fields are {', '.join(names)}"
        )
    edited = {field.name for field in spec.edit_fields}
    out = [f for f in fields if f.name not in edited and f.name not in spec.removed_fields]
    out += spec.edit_fields
    if spec.selected_fields is None:
        return out
    by_name = {field.name: field for field in out}
    unknown = [name for name in spec.selected_fields if name not in by_name]
    if unknown:
        raise ConfigurationError(
            f"transform_spec selects {', '.join(map(repr, unknown))}, which the transformed "
            f"rows do not have; they have {', '.join(by_name)}"
        )
    return [by_name[name] for name in spec.selected_fields]


def apply_transform(
    spec: TransformSpec,
    rows: Sequence[Mapping[str, Any]],
    fields: Sequence[Field],
    columns: Mapping[str, str],
    out_fields: Sequence[Field],
) -> dict[str, Any]:
    """One batch's ``rows`` through ``spec``: each output field's values as one array.

    Raises:
        ConfigurationError: The function returned something other than a DataFrame, or one
            without a field the spec says it has.
    """
    pandas = require("pandas", extra="spark", purpose="transform_spec")
    arrays = batch_arrays(rows, fields, columns)
    frame = pandas.DataFrame(
        {name: list(values) if values.ndim > 1 else values for name, values in arrays.items()}
    )
    if spec.func is not None:
        frame = spec.func(frame)
    names = [field.name for field in out_fields]
    returned = returned_columns(frame, names)
    return {field.name: as_array(field, returned[field.name]) for field in out_fields}


def returned_columns(frame: Any, names: Sequence[str]) -> dict[str, list[Any]]:
    """The columns ``names`` of the DataFrame a batch transform returned, as lists.

    Raises:
        ConfigurationError: ``frame`` is no pandas DataFrame, or lacks a column the spec's
            fields say it has.
    """
    pandas = require("pandas", extra="spark", purpose="transform_spec")
    if not isinstance(frame, pandas.DataFrame):
        raise ConfigurationError(
            f"transform_spec's func must return a pandas DataFrame, got {type(frame).__name__}"
        )
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise ConfigurationError(
            f"transform_spec's func returned no column {', '.join(map(repr, missing))}; it "
            f"returned {', '.join(map(str, frame.columns))}. Declare new or changed columns in "
            f"edit_fields and dropped ones in removed_fields"
        )
    return {name: list(frame[name]) for name in names}


class TransformCollate:
    """A torch ``collate_fn``: a batch of sample dicts through a spec, then tensors.

    Runs in the DataLoader's worker processes (it pickles, as long as ``spec.func`` does).
    Number and bool arrays become tensors; text stays a list.

    Args:
        spec: The transform.
        fields: The dataset's fields.
        columns: Its MDS column encodings.

    Example:
        collate = TransformCollate(spec, fields_of(columns), columns)
        loader = StreamingDataLoader(dataset, batch_size=32, collate_fn=collate)
    """

    def __init__(self, spec: TransformSpec, fields: Sequence[Field], columns: Mapping[str, str]):
        self.spec = spec
        self.fields = list(fields)
        self.columns = dict(columns)
        self.out_fields = transformed_fields(self.fields, spec)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The batch of ``rows`` transformed, as tensors (text as lists)."""
        from shardstream._torch import require_torch

        torch = require_torch()
        arrays = apply_transform(self.spec, rows, self.fields, self.columns, self.out_fields)
        return {
            name: list(values) if values.dtype == object else torch.as_tensor(values)
            for name, values in arrays.items()
        }
