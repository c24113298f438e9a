from __future__ import annotations

import datetime
import io
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream import LocalDataset
from shardstream.converters import BatchConverter, arrow_to_mds, infer_columns
from shardstream.errors import ConfigurationError, SampleEncodingError


def convert(table: pa.Table, columns: dict[str, str] | None = None, **kwargs: object) -> list[Any]:
    converter = BatchConverter(table.schema, columns or infer_columns(table.schema), **kwargs)  # type: ignore[arg-type]
    samples, first = [], 0
    for batch in table.to_batches(max_chunksize=3):
        samples += converter.samples(batch, first)
        first += batch.num_rows
    return samples


def test_values_come_out_ready_for_their_encodings():
    table = pa.table(
        {
            "flag": [True, False],
            "day": pa.array([datetime.date(1970, 1, 3), datetime.date(1969, 12, 31)]),
            "when": pa.array(
                [datetime.datetime(1970, 1, 1, 0, 0, 1, 5), datetime.datetime(1969, 12, 31, 23)],
                pa.timestamp("ns", tz="Europe/Paris"),
            ),
            "money": [Decimal("1.50"), Decimal("-2")],
            "nested": pa.array([{"x": Decimal("1.5"), "d": datetime.date(2020, 1, 2)}, None]),
            "pairs": pa.array([[(1, "a")], []], pa.map_(pa.int32(), pa.string())),
            "blob_json": pa.array([[b"\x00\x01"], []], pa.list_(pa.binary())),
        }
    )
    columns = {**infer_columns(table.schema), "nested": "json"}
    samples = convert(table, columns, on_null="skip")
    assert len(samples) == 1  # the null struct is skipped
    sample = samples[0]
    assert sample["flag"] == 1
    assert sample["day"] == 2
    assert sample["when"] == 1_000_005  # naive datetimes given to a zoned type are UTC
    assert sample["money"] == Decimal("1.50")
    assert sample["nested"] == {"x": "1.5", "d": "2020-01-02"}
    assert sample["pairs"] == [[1, "a"]]
    assert sample["blob_json"] == ["AAE="]


def test_timestamps_are_utc_microseconds_and_refuse_lost_nanoseconds():
    zoned = pa.array([0, 1_500], pa.timestamp("us", tz="Asia/Tokyo"))
    naive = pa.array([10_000], pa.timestamp("ns"))
    assert [s["t"] for s in convert(pa.table({"t": zoned}))] == [0, 1_500]
    assert [s["t"] for s in convert(pa.table({"t": naive}))] == [10]
    with pytest.raises(SampleEncodingError, match="column 't'"):
        convert(pa.table({"t": pa.array([10_001], pa.timestamp("ns"))}))
    iso = convert(pa.table({"t": zoned}), {"t": "str"})
    assert iso[1]["t"] == "1970-01-01T09:00:00.001500+09:00"


def test_arrays_become_numpy_views_of_each_row_even_in_a_sliced_batch():
    table = pa.table(
        {
            "v": pa.array([[1, 2], [3], [4, 5, 6], [7], [8, 9]], pa.list_(pa.int16())),
            "fixed": pa.array([[i, i + 1] for i in range(5)], pa.list_(pa.float32(), 2)),
            "grid": pa.array([[[i, 0], [1, 1]] for i in range(5)], pa.list_(pa.list_(pa.int8()))),
        }
    )
    samples = convert(table)  # batches of 3 rows: the second starts at an offset
    assert [s["v"].tolist() for s in samples] == [[1, 2], [3], [4, 5, 6], [7], [8, 9]]
    assert samples[4]["v"].dtype == np.int16
    assert samples[3]["fixed"].tolist() == [3.0, 4.0]
    assert samples[3]["fixed"].dtype == np.float32
    assert samples[4]["grid"].tolist() == [[4, 0], [1, 1]]
    shaped = convert(table.select(["fixed"]), {"fixed": "ndarray:float64:1,2"})
    assert shaped[2]["fixed"].shape == (1, 2)
    assert shaped[2]["fixed"].dtype == np.float64


def test_empty_and_ragged_arrays_name_the_row_and_suggest_json():
    empty = pa.table({"v": pa.array([[1.0], [2.0], [3.0], [4.0], []])})
    with pytest.raises(SampleEncodingError, match=r"column 'v' at row 4 of the input.*'json'"):
        convert(empty)
    ragged = pa.table({"m": pa.array([[[1]], [[1, 2], [3]]])})
    with pytest.raises(SampleEncodingError, match=r"column 'm' at row 1 .*not rectangular"):
        convert(ragged)
    assert convert(ragged, {"m": "json"})[1]["m"] == [[1, 2], [3]]


def test_nulls_error_with_column_and_absolute_row_or_are_skipped():
    table = pa.table({"a": [1, 2, 3, 4, None, 6], "v": [[1], [2], [None], [4], [5], [6]]})
    with pytest.raises(SampleEncodingError) as info:
        convert(table.select(["a"]))
    assert "column 'a' is null at row 4 of the input" in str(info.value)
    assert "fill_null" in str(info.value)
    assert "on_null='skip'" in str(info.value)
    with pytest.raises(
        SampleEncodingError, match=r"'v' is null \(an element of its array\) at row 2"
    ):
        convert(table.select(["v"]))
    converter = BatchConverter(table.schema, infer_columns(table.schema), on_null="skip")
    samples = converter.samples(table.to_batches()[0], first_row=100)
    assert [s["a"] for s in samples] == [1, 2, 4, 6]
    assert converter.skipped == 2
    # json keeps nulls inside a value; a top-level null is still a null.
    inner = pa.table({"j": pa.array([[1, None]], pa.list_(pa.int64()))})
    assert convert(inner, {"j": "json"}) == [{"j": [1, None]}]


def test_wrong_pairings_of_type_and_encoding_are_refused_up_front():
    table = pa.table({"s": ["x"], "n": [1]})
    with pytest.raises(ConfigurationError, match=r"column 's' has Arrow type string.*'int32'"):
        BatchConverter(table.schema, {"s": "int32"})
    with pytest.raises(ConfigurationError, match=r"'pil'.*binary values"):
        BatchConverter(table.schema, {"n": "pil"})
    with pytest.raises(ConfigurationError, match=r"'jpeg_array'.*lists of binary"):
        BatchConverter(table.schema, {"s": "jpeg_array"})
    with pytest.raises(ConfigurationError, match=r"not in the data"):
        BatchConverter(table.schema, {"missing": "int32"})
    with pytest.raises(ConfigurationError, match="on_null"):
        BatchConverter(table.schema, {"n": "int"}, on_null="fill")  # type: ignore[arg-type]
    with pytest.raises(SampleEncodingError, match=r"column 'n' .*'int8'"):
        convert(pa.table({"n": [1000]}), {"n": "int8"})


def test_binary_columns_keep_image_files_or_decode_them():
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (3, 2), (10, 20, 30)).save(buffer, format="PNG")
    data = buffer.getvalue()
    table = pa.table({"img": [data]})
    assert convert(table, {"img": "png"})[0]["img"] == data
    decoded = convert(table, {"img": "pil"})[0]["img"]
    assert decoded.size == (3, 2)
    assert decoded.getpixel((0, 0)) == (10, 20, 30)


NUMERIC_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.float32(),
                 pa.float64(), pa.bool_()]  # fmt: skip


@st.composite
def numeric_tables(draw: st.DrawFn) -> pa.Table:
    rows = draw(st.integers(1, 40))
    columns = {}
    for number in range(draw(st.integers(1, 4))):
        arrow_type = draw(st.sampled_from(NUMERIC_TYPES))
        dtype = (
            np.dtype("uint8")
            if arrow_type == pa.bool_()
            else np.dtype(arrow_type.to_pandas_dtype())
        )
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        if dtype.kind == "f":
            values = rng.standard_normal(rows).astype(dtype) * 1e3
        else:
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, rows, dtype=dtype, endpoint=True)
        if arrow_type == pa.bool_():
            columns[f"c{number}"] = pa.array(values.astype(bool))
        elif draw(st.booleans()):  # a list column of the same values
            lengths = [1 + i % 3 for i in range(rows)]
            flat = np.resize(values, sum(lengths))
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            columns[f"c{number}"] = pa.ListArray.from_arrays(offsets, pa.array(flat, arrow_type))
        else:
            columns[f"c{number}"] = pa.array(values, arrow_type)
    return pa.table(columns)


@settings(max_examples=25, deadline=None)
@given(table=numeric_tables())
def test_random_numeric_tables_round_trip_through_mds(table: pa.Table, tmp_path_factory):
    out = tmp_path_factory.mktemp("prop")
    assert arrow_to_mds(table, str(out), progress=False, size_limit=700, batch_rows=7) == len(table)
    with LocalDataset(out, cache_dir=out / "cache") as dataset:
        assert len(dataset) == len(table)
        for name, column in zip(table.column_names, table.columns, strict=True):
            want = column.to_pylist()
            got = [dataset[i][name] for i in range(len(dataset))]
            for g, w in zip(got, want, strict=True):
                if isinstance(g, np.ndarray):
                    assert g.tolist() == pytest.approx(w)
                else:
                    assert g == w


def test_arrow_to_mds_takes_readers_and_batch_iterables(tmp_path: Path):
    table = pa.table({"x": list(range(10)), "s": [str(i) for i in range(10)]})
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=4))
    assert arrow_to_mds(reader, str(tmp_path / "r"), progress=False) == 10
    assert arrow_to_mds(iter(table.to_batches(3)), str(tmp_path / "i"), progress=False) == 10
    with LocalDataset(tmp_path / "i", cache_dir=tmp_path / "c") as dataset:
        assert [dataset[i]["s"] for i in range(10)] == [str(i) for i in range(10)]
    with pytest.raises(ConfigurationError, match="no record batches"):
        arrow_to_mds(iter([]), str(tmp_path / "e"), progress=False)


def test_element_nulls_are_found_in_sliced_and_fixed_size_arrays():
    table = pa.table(
        {
            "f": pa.array([[1, 2], [3, 4], [5, None], [7, 8]], pa.list_(pa.int32(), 2)),
            "g": pa.array([[1], [2], [3], [None]]),
        }
    )
    converter = BatchConverter(table.schema, infer_columns(table.schema), on_null="skip")
    samples = converter.samples(table.to_batches()[0].slice(1), first_row=1)
    assert [s["f"].tolist() for s in samples] == [[3, 4]]
    assert converter.skipped == 2
    strict = BatchConverter(table.schema, infer_columns(table.schema))
    with pytest.raises(
        SampleEncodingError, match=r"'f' is null \(an element of its array\) at row 2"
    ):
        strict.samples(table.to_batches()[0].slice(2), first_row=2)


def test_importing_the_converters_imports_no_optional_dependency():
    code = (
        "import json, sys, shardstream.converters; print(json.dumps([m for m in "
        "('pyarrow', 'pyspark', 'pandas', 'datasets', 'PIL', 'torch') if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
