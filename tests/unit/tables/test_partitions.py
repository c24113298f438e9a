"""Partition columns read from key=value folders, as Spark and pyarrow name them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardstream.errors import ShardFormatError
from shardstream.tables.partitions import HIVE_NULL, Partitioning, folder_values


def test_folder_values_are_unquoted_and_nulls_read_as_none():
    key = f"year=2024/kind=a%2Fb%3Dc/day={HIVE_NULL}/not-a-partition/part-0.parquet"
    assert folder_values(key) == [("year", "2024"), ("kind", "a/b=c"), ("day", None)]
    assert folder_values("part-0.parquet") == []
    assert folder_values("=x/part.parquet") == []  # no name: not a partition folder


def test_integers_are_int64_and_anything_else_text():
    keys = ["y=2023/k=a/f.parquet", "y=-1/k=7/f.parquet", f"y={HIVE_NULL}/k=b/f.parquet"]
    parts = Partitioning.of(keys, source="ds")
    assert parts.names == ("y", "k")
    assert parts.types == ("int64", "string")
    assert [parts.row(n) for n in range(3)] == [
        {"y": 2023, "k": "a"},
        {"y": -1, "k": "7"},
        {"y": None, "k": "b"},
    ]


def test_an_unpartitioned_dataset_has_no_partition_columns():
    parts = Partitioning.of(["a.parquet", "sub/b.parquet"], source="ds")
    assert (parts.names, parts.row(1)) == ((), {})


@pytest.mark.parametrize(
    "keys",
    [
        ["y=1/a.parquet", "b.parquet"],  # some files outside the folders
        ["y=1/a.parquet", "z=1/b.parquet"],  # other names
        ["y=1/k=a/a.parquet", "k=a/y=1/b.parquet"],  # another order
        ["y=1/y=2/a.parquet"],  # one name twice
    ],
)
def test_files_must_share_their_partition_folders(keys: list[str]):
    with pytest.raises(ShardFormatError, match="partition folder"):
        Partitioning.of(keys, source="ds")


@given(st.lists(st.integers(-(10**12), 10**12) | st.text("ab/=% ", min_size=1), min_size=1))
def test_values_read_back_as_written(values: list[object]):
    from urllib.parse import quote

    keys = [f"v={quote(str(value), safe='')}/f{n}.parquet" for n, value in enumerate(values)]
    parts = Partitioning.of(keys, source="ds")
    numbers = all(isinstance(value, int) for value in values)
    assert parts.types == ("int64" if numbers else "string",)
    read = [parts.row(n)["v"] for n in range(len(values))]
    assert read == (values if numbers else [str(value) for value in values])
