"""The Unischema stand-in: field selection, inference from Arrow, rows as namedtuples."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from shardstream.errors import ConfigurationError
from shardstream.loader.fields import Field
from shardstream.loader.petastorm.unischema import (
    Unischema,
    UnischemaField,
    as_field,
    from_field,
    infer_unischema,
    select_fields,
)

SCHEMA = Unischema("S", [UnischemaField("id", np.int32, ()), UnischemaField("idx", np.int64, ()),
                         UnischemaField("image", np.uint8, (None, None, 3)),
                         UnischemaField("my-col", np.str_, ())])  # fmt: skip


def test_selection_takes_names_full_patterns_and_fields_in_schema_order():
    assert select_fields(SCHEMA, None) == ["id", "idx", "image", "my-col"]
    assert select_fields(SCHEMA, ["id"]) == ["id"]  # a full match: not idx
    assert select_fields(SCHEMA, ["image", "id.*"]) == ["id", "idx", "image"]
    assert select_fields(SCHEMA, [SCHEMA.fields["image"], "my-.*"]) == ["image", "my-col"]


@pytest.mark.parametrize(
    ("wanted", "match"),
    [
        ("id", "a list"),
        ([UnischemaField("other", np.int32, ())], "'other'"),
        (["zzz"], "no field matches"),
        ([3], "holds 3"),
    ],
)
def test_bad_selections_are_refused(wanted: object, match: str):
    with pytest.raises(ConfigurationError, match=match):
        select_fields(SCHEMA, wanted)  # type: ignore[arg-type]


def test_rows_are_namedtuples_shared_by_schema_and_fields():
    row = SCHEMA.make_namedtuple(id=1, idx=2, image=None, **{"my-col": "a"})
    assert type(row).__name__ == "S_view"
    assert row._fields == ("id", "idx", "image", "_3")  # a name that is no identifier
    assert type(SCHEMA.view(list(SCHEMA.fields)).make_namedtuple_tf(1, 2, 3, 4)) is not type(row)
    assert SCHEMA.namedtuple_type() is Unischema("S", SCHEMA.fields.values()).namedtuple_type()
    assert SCHEMA.image is SCHEMA.fields["image"]
    with pytest.raises(AttributeError):
        _ = SCHEMA.nothing


def test_the_inferred_schema_puts_partitions_first_and_skips_what_numpy_lacks():
    arrow = pa.schema([
        ("a", pa.int16()), ("v", pa.list_(pa.float32())), ("s", pa.string()),
        ("b", pa.binary()), ("d", pa.decimal128(5, 2)), ("t", pa.timestamp("ms")),
        ("nested", pa.list_(pa.list_(pa.int8()))), ("st", pa.struct([("x", pa.int8())])),
        ("flag", pa.bool_()),
    ])  # fmt: skip
    schema = infer_unischema(arrow, {"year": "int64", "kind": "string"})
    assert [(f.name, f.numpy_dtype, f.shape) for f in schema.fields.values()] == [
        ("year", np.int64, ()), ("kind", np.str_, ()), ("a", np.int16, ()),
        ("v", np.float32, (None,)), ("s", np.str_, ()), ("b", np.bytes_, ()),
        ("d", Decimal, ()), ("t", np.datetime64, ()), ("flag", np.bool_, ()),
    ]  # fmt: skip


def test_fields_convert_to_the_loaders_fields_and_back():
    assert as_field(UnischemaField("x", np.float32, (None, 2))) == Field(
        "x", np.dtype("float32"), (None, 2)
    )
    assert as_field(UnischemaField("d", Decimal, ())).dtype == np.dtype(object)
    assert as_field(UnischemaField("b", np.bytes_, ())).dtype == np.dtype(object)
    assert as_field(UnischemaField("s", np.str_, (), None, True)).nullable
    back = from_field(Field("y", np.dtype("int64"), (), True))
    assert back == UnischemaField("y", np.int64, (), None, True)
