"""transform_schema and edit_field: Petastorm's own test_transform.py, ported as it runs there."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream.loader.petastorm import (
    TransformSpec,
    Unischema,
    UnischemaField,
    edit_field,
    transform_schema,
)
from shardstream.loader.petastorm.codecs import ScalarCodec, spark_type

TestSchema = Unischema(
    "TestSchema",
    [
        UnischemaField("string", np.str_, (), None, False),
        UnischemaField("int", np.int32, (), ScalarCodec(spark_type("IntegerType")), False),
        UnischemaField("double", np.float64, (), None, False),
    ],
)


def test_noop_transform():
    transformed = transform_schema(TestSchema, TransformSpec(lambda x: x))
    assert set(transformed.fields) == set(TestSchema.fields)
    assert transformed.name == "TestSchema_transformed"
    assert transformed.fields["int"] == TestSchema.fields["int"]  # the codec is kept


def test_remove_field_transform():
    one = transform_schema(TestSchema, TransformSpec(lambda x: x, removed_fields=["int"]))
    assert set(one.fields) == {"string", "double"}
    two = transform_schema(TestSchema, TransformSpec(lambda x: x, removed_fields=["int", "double"]))
    assert set(two.fields) == {"string"}


@pytest.mark.parametrize(
    "selected",
    [["string", "double", "int"], ["int", "string", "double"], ["string", "int"], ["int"]],
)
def test_select_field_transform(selected: list[str]):
    transformed = transform_schema(TestSchema, TransformSpec(selected_fields=selected))
    assert list(transformed.fields) == selected


def test_add_field_transform():
    spec = TransformSpec(
        lambda x: x, edit_fields=[UnischemaField("double2", np.float64, (), None, False)]
    )
    assert set(transform_schema(TestSchema, spec).fields) == {"string", "double", "double2", "int"}


def test_change_field_transform():
    spec = TransformSpec(lambda x: x, edit_fields=[UnischemaField("double", np.float16, ())])
    changed = transform_schema(TestSchema, spec).fields["double"]
    assert changed.numpy_dtype == np.float16
    assert changed.codec is None


def test_edit_fields_as_tuples_keep_the_type_given():
    spec = TransformSpec(edit_fields=[edit_field("text", np.str_, (None,), True)])
    field = transform_schema(TestSchema, spec).fields["text"]
    assert field == UnischemaField("text", np.str_, (None,), None, True)


def test_unknown_fields_in_remove_field_transform():
    spec = TransformSpec(lambda x: x, removed_fields=["int", "unknown_1", "unknown_2"])
    with pytest.warns(UserWarning, match="not part of the schema.*unknown_1"):
        one_removed = transform_schema(TestSchema, spec)
    assert set(one_removed.fields) == {"string", "double"}


def test_unknown_fields_in_selected_fields_are_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="selected_fields.*nope"):
        out = transform_schema(TestSchema, TransformSpec(selected_fields=["double", "nope"]))
    assert list(out.fields) == ["double"]


def test_create_edit_field():
    e1 = edit_field(name="ab", numpy_dtype=np.float64, shape=(2, 3), nullable=True)
    assert e1 == ("ab", np.float64, (2, 3), True)
    assert edit_field("c", np.int8, ()) == ("c", np.int8, (), False)
