"""SplitSchema: the bytes of JSON-lines and delimited-text samples, and what it refuses."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from shardstream.errors import (
    ConfigurationError,
    SampleTypeError,
    SampleValueError,
    ShardTooLargeError,
)
from shardstream.format.split_schema import SplitSchema

COLUMNS = {"n": "int", "x": "float"}


class Shouting(int):
    def __str__(self) -> str:
        return "LOUD"


class Rounded(float):
    def __str__(self) -> str:
        return "about 1"


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_int_and_float_subclasses_are_written_as_the_numbers_they_hold(fmt: str):
    # str() of a subclass may be anything; the reader parses int() and float() text.
    schema = SplitSchema(fmt, COLUMNS, newline="\n")
    [data], size = schema.encode_sample_sized({"n": Shouting(7), "x": Rounded(1.25)})
    assert size == len(data)
    expected = b'{"n": 7, "x": 1.25}\n' if fmt == "json" else b"7,1.25\n"
    assert data == expected


@pytest.mark.parametrize("fmt", ["json", "tsv"])
def test_an_int_too_long_for_text_is_a_sample_value_error(fmt: str):
    schema = SplitSchema(fmt, COLUMNS, newline="\n")
    with pytest.raises(SampleValueError, match="cannot be written as text"):
        schema.encode_sample_sized({"n": 10**5000, "x": 1.0})


def test_numpy_bools_are_not_ints():
    schema = SplitSchema("csv", COLUMNS, newline="\n")
    with pytest.raises(SampleTypeError, match="expects int, got bool"):
        schema.encode_sample_sized({"n": np.bool_(True), "x": 1.0})


def test_a_shard_of_4_gib_is_refused_before_its_offsets_wrap():
    schema = SplitSchema("xsv", COLUMNS, newline="\n", separator="|")
    config = json.dumps(schema.config(compression=None, hashes=[], size_limit=None)).encode()
    data, meta = schema.shard_files([b"1|1.0\n"], [6], config)
    assert data == [b"n|x\n", b"1|1.0\n"]
    assert b"".join(meta)[:12] == (1).to_bytes(4, "little") + bytes([4, 0, 0, 0, 10, 0, 0, 0])
    with pytest.raises(ShardTooLargeError, match="offsets are 32-bit"):
        schema.shard_files([b"", b""], [3 << 30, 1 << 30], config)


@pytest.mark.parametrize(
    ("fmt", "kwargs", "message"),
    [
        ("parquet", {}, "unknown split format"),
        ("csv", {"columns": {1: "int"}}, "column names must be str"),
        ("csv", {"columns": {"a\ud800": "int"}}, "lone surrogate"),
        ("json", {"columns": {"a": "uint8"}}, "shards hold only str, int, float"),
    ],
)
def test_bad_schemas(fmt: str, kwargs: dict[str, Any], message: str):
    with pytest.raises(ConfigurationError, match=message):
        SplitSchema(fmt, kwargs.get("columns", COLUMNS), newline="\n")


def test_csv_and_tsv_ignore_a_separator_and_xsv_keeps_its_own():
    assert SplitSchema("csv", COLUMNS, newline="\n", separator="|").separator == ","
    assert SplitSchema("tsv", COLUMNS, newline="\n").separator == "\t"
    assert SplitSchema("xsv", COLUMNS, newline="\n", separator="::").separator == "::"
    assert SplitSchema("json", COLUMNS, newline="\n", separator="|").separator is None
