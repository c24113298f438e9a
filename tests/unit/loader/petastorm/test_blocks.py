"""Rows decoded field by field, then kept, transformed and made into namedtuples."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardstream.errors import ConfigurationError, ShardFormatError
from shardstream.loader.fields import Field
from shardstream.loader.petastorm.blocks import DecodeRows, Outputs, column_array, decode_value
from shardstream.loader.petastorm.codecs import NdarrayCodec, ScalarCodec
from shardstream.loader.petastorm.predicates import in_lambda
from shardstream.loader.petastorm.unischema import Unischema, UnischemaField
from shardstream.loader.transform_spec import TransformSpec
from shardstream.tables.filters import Filters


def test_values_decode_as_petastorms_decode_row():
    assert type(decode_value(UnischemaField("a", np.int16, ()), 3)) is np.int16
    assert decode_value(UnischemaField("a", np.int16, ()), None) is None
    assert decode_value(UnischemaField("b", np.bytes_, ()), b"x\x00") == b"x\x00"  # not cut
    listed = np.array([1, 2])
    assert decode_value(UnischemaField("v", np.int64, (None,)), listed) is listed
    codec = ScalarCodec(None)
    assert type(decode_value(UnischemaField("d", Decimal, (), codec), "1.5")) is Decimal


def test_a_value_its_codec_cannot_decode_names_the_field():
    fields = [UnischemaField("m", np.float32, (2,), NdarrayCodec())]
    with pytest.raises(ShardFormatError, match=r"field 'm'.*NdarrayCodec"):
        DecodeRows(fields)([{"m": b"not npy"}])


@given(hnp.arrays(np.int32, st.tuples(st.integers(0, 6), st.just(3))))
def test_arrays_of_one_shape_stack_and_keep_the_fields_dtype(stacked: np.ndarray):
    field = Field("v", np.dtype("int32"), (3,))
    out = column_array(field, list(stacked))
    assert out.dtype == np.int32
    assert out.shape == stacked.shape
    np.testing.assert_array_equal(out, stacked)


def test_columns_take_the_types_a_batch_holds():
    def column(dtype: Any, shape: Any, values: list[Any]) -> np.ndarray:
        return column_array(Field("c", np.dtype(dtype), shape), values)

    assert column("int32", (), [1, 2]).dtype == np.int32
    with_null = column("int32", (), [1, None])
    assert with_null.dtype == np.float64
    assert np.isnan(with_null[1])
    assert column(np.str_, (), ["a", "bc"]).dtype.kind == "U"
    assert column(np.str_, (), ["a", None]).tolist() == ["a", None]
    assert column(object, (), [b"x", b"yz"]).dtype == object
    times = column(
        "datetime64[ns]", (), [datetime.datetime(2024, 1, 2), np.datetime64("2024-01-03")]
    )
    assert times.dtype == np.dtype("datetime64[ns]")
    ragged = column("int16", (None,), [np.arange(2), np.arange(3)])
    assert ragged.dtype == object
    assert ragged[1].tolist() == [0, 1, 2]
    equal = column("int16", (None,), [np.arange(2), np.arange(2)])
    assert equal.shape == (2, 2)
    assert equal.dtype == np.int16
    assert column("float32", (None, 4), []).shape == (0, 0, 4)
    assert column(np.str_, (), []).shape == (0,)


SCHEMA = Unischema("S", [UnischemaField("id", np.int64, ()), UnischemaField("v", np.float32, (2,))])
BLOCK = {"id": [np.int64(i) for i in range(6)], "v": [np.full(2, i, np.float32) for i in range(6)]}


def test_rows_are_kept_by_filters_then_predicate():
    outputs = Outputs(["id", "v"], SCHEMA, batched=False, filters=Filters.parse([("id", ">", 0)]),
                      predicate=in_lambda(["id"], lambda i: i % 2 == 1))  # fmt: skip
    assert [int(row.id) for row in outputs.of(BLOCK)] == [1, 3, 5]
    batched = Outputs(["id", "v"], SCHEMA, batched=True,
                      predicate=in_lambda(["id"], lambda i: i > 3))  # fmt: skip
    (batch,) = batched.of(BLOCK)
    assert batch.id.tolist() == [4, 5]
    assert batch.v.shape == (2, 2)
    nothing = Outputs(
        ["id"], SCHEMA.view(["id"]), batched=True, filters=Filters.parse([("id", "<", 0)])
    )
    assert nothing.of(BLOCK) == []


def test_a_transform_that_drops_a_declared_field_is_named():
    spec = TransformSpec(lambda frame: frame.drop(columns=["v"]))
    outputs = Outputs(["id", "v"], SCHEMA, batched=True, transform=spec)
    with pytest.raises(ConfigurationError, match="returned no column 'v'"):
        outputs.of(BLOCK)
    rows = Outputs(["id", "v"], SCHEMA, batched=False, transform=TransformSpec(lambda row: 3))
    with pytest.raises(ConfigurationError, match="returns a dict"):
        rows.of(BLOCK)
