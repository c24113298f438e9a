"""Petastorm's ``petastorm.transform``: ``edit_field`` and ``transform_schema``.

``transform_schema`` derives a schema's fields after a ``TransformSpec`` by the one rule the
loaders use (:func:`~shardstream.loader.transform_spec.transformed_fields`). As Petastorm's, it
ignores removed or selected names the schema lacks, with a ``UserWarning`` naming them; the
readers refuse them instead (the spec would not do what its author meant).
"""

from __future__ import annotations

import warnings
from typing import Any

from shardstream.loader.fields import Field
from shardstream.loader.petastorm.unischema import (
    Unischema,
    UnischemaField,
    as_field,
    from_field,
)
from shardstream.loader.transform_spec import (
    TransformSpec,
    as_transform_spec,
    transformed_fields,
)

__all__ = ["TransformSpec", "edit_field", "transform_schema"]


def edit_field(
    name: str, numpy_dtype: Any, shape: tuple[int | None, ...], nullable: bool = False
) -> tuple[str, Any, tuple[int | None, ...], bool]:
    """The 4-tuple ``(name, numpy_dtype, shape, nullable)`` of ``TransformSpec(edit_fields=)``.

    Example:
        import numpy as np

        assert edit_field("ab", np.float64, (2, 3), True) == ("ab", np.float64, (2, 3), True)
    """
    return name, numpy_dtype, shape, nullable


def transform_schema(schema: Unischema, transform_spec: Any) -> Unischema:
    """The schema of the rows ``transform_spec`` returns for rows of ``schema``.

    The fields kept keep their codecs; edited and added ones have none. The result is named
    ``<name>_transformed``.

    Args:
        schema: The schema before the transform.
        transform_spec: A :class:`~shardstream.loader.TransformSpec` (or Petastorm's).

    Returns:
        The schema after it.

    Raises:
        ConfigurationError: ``transform_spec`` is not a ``TransformSpec``.

    Example:
        import numpy as np

        schema = Unischema("S", [UnischemaField("a", np.int32, ()),
                                 UnischemaField("b", np.float64, ())])
        out = transform_schema(schema, TransformSpec(edit_fields=[edit_field("c", np.str_, ())],
                                                     removed_fields=["a"]))
        assert list(out.fields) == ["b", "c"] and out.fields["c"].numpy_dtype is np.str_
    """
    spec = as_transform_spec(transform_spec)
    assert spec is not None  # None is no TransformSpec here
    kept = spec.removed_fields
    unknown = [name for name in spec.removed_fields if name not in schema.fields]
    if unknown:
        _ignored("removed_fields", unknown)
        kept = [name for name in spec.removed_fields if name in schema.fields]
    edits = {_name(field): _unischema_field(field) for field in transform_spec.edit_fields or []}
    selected = spec.selected_fields
    if selected is not None:
        present = {*schema.fields, *edits} - set(kept)
        unknown = [name for name in selected if name not in present]
        if unknown:
            _ignored("selected_fields", unknown)
            selected = [name for name in selected if name in present]
    checked = TransformSpec(None, spec.edit_fields, kept, selected)
    fields = transformed_fields([as_field(field) for field in schema.fields.values()], checked)
    return Unischema(
        f"{schema.name}_transformed",
        [edits.get(field.name) or schema.fields[field.name] for field in fields],
    )


def _name(field: Any) -> str:
    return str(field.name if isinstance(field, (Field, UnischemaField)) else field[0])


def _unischema_field(field: Any) -> UnischemaField:
    """An edit field (a 4-tuple or a ``UnischemaField``) as a codec-less field, type as given."""
    if isinstance(field, Field):  # shardstream's own TransformSpec holds its edits so
        return from_field(field)
    if hasattr(field, "numpy_dtype"):
        return UnischemaField(field.name, field.numpy_dtype, field.shape, None, field.nullable)
    name, numpy_dtype, shape, nullable = field
    return UnischemaField(name, numpy_dtype, shape, None, nullable)


def _ignored(argument: str, names: list[str]) -> None:
    warnings.warn(
        f"{argument} specified some field names that are not part of the schema. These field "
        f'names will be ignored "{", ".join(names)}". ',
        UserWarning,
        stacklevel=3,
    )
