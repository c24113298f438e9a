"""The one rule of which file column types read as a dataset's column type."""

from __future__ import annotations

import pyarrow as pa
import pytest

from shardstream.format.column_types import reads_as


@pytest.mark.parametrize(
    ("held", "wanted"),
    [
        (pa.large_string(), pa.string()),
        (pa.dictionary(pa.int32(), pa.string()), pa.string()),
        (pa.large_binary(), pa.binary()),
        (pa.large_list(pa.int32()), pa.list_(pa.field("element", pa.int32()))),
        (pa.struct([("a", pa.large_string())]), pa.struct([("a", pa.string())])),
        (pa.map_(pa.string(), pa.large_list(pa.int8())), pa.map_(pa.string(), pa.list_(pa.int8()))),
    ],
)
def test_layouts_of_one_type_read_as_it(held: pa.DataType, wanted: pa.DataType):
    assert reads_as(held, wanted)
    assert reads_as(held, wanted, widen=True)


@pytest.mark.parametrize(
    ("held", "wanted"),
    [
        (pa.int32(), pa.int64()),
        (pa.float32(), pa.float64()),
        (pa.int64(), pa.float64()),
        (pa.decimal128(5, 2), pa.decimal128(10, 2)),
        (pa.int32(), pa.decimal128(12, 0)),
        (pa.date32(), pa.timestamp("us")),
        (pa.timestamp("ns"), pa.timestamp("us", tz="UTC")),
        (pa.list_(pa.int16()), pa.list_(pa.int64())),
        (pa.struct([("a", pa.int8())]), pa.struct([("a", pa.int32())])),
        (
            pa.struct([("b", pa.int8()), ("a", pa.int8())]),
            pa.struct([("a", pa.int8()), ("b", pa.int8())]),
        ),
        (pa.struct([("a", pa.int8())]), pa.struct([("a", pa.int8()), ("added", pa.string())])),
    ],
)
def test_widenings_read_only_where_the_rows_are_cast(held: pa.DataType, wanted: pa.DataType):
    assert not reads_as(held, wanted)
    assert reads_as(held, wanted, widen=True)


@pytest.mark.parametrize(
    ("held", "wanted"),
    [
        (pa.string(), pa.int64()),
        (pa.int64(), pa.int32()),
        (pa.uint32(), pa.int64()),
        (pa.float64(), pa.float32()),
        (pa.float64(), pa.int64()),
        (pa.decimal128(10, 4), pa.decimal128(10, 2)),
        (pa.timestamp("us"), pa.date32()),
        (pa.binary(), pa.string()),
        (pa.struct([("a", pa.int8())]), pa.struct([("b", pa.int8())])),
        (pa.list_(pa.string()), pa.list_(pa.int64())),
    ],
)
def test_other_types_never_read(held: pa.DataType, wanted: pa.DataType):
    assert not reads_as(held, wanted, widen=True)
