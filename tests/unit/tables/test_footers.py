"""The footer stage: a footer read once while its layout is held, read again once it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.errors import ShardFormatError
from shardstream.storage import DownloadOptions
from shardstream.storage.local import LocalStore
from shardstream.tables.footers import (
    fetch_footer,
    key_value_metadata,
    local_layout,
    store_layout,
    write_metadata_file,
)


def write(path: Path, rows: int, group: int) -> None:
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), path, row_group_size=group)


def test_a_held_layout_is_taken_again_and_a_rewritten_file_is_read_again(tmp_path: Path):
    write(tmp_path / "a.parquet", 20, 10)
    first = local_layout(str(tmp_path), "a.parquet")
    assert local_layout(str(tmp_path), "a.parquet") is first
    write(tmp_path / "a.parquet", 20, 5)  # rewritten: other row groups
    again = local_layout(str(tmp_path), "a.parquet")
    assert again is not first
    assert [group.rows for group in again.row_groups] == [5, 5, 5, 5]
    assert [group.rows for group in first.row_groups] == [10, 10]


def test_a_store_layout_equals_the_local_one_and_is_shared(tmp_path: Path):
    write(tmp_path / "a.parquet", 30, 7)
    store = LocalStore(str(tmp_path))
    size = os.path.getsize(tmp_path / "a.parquet")
    remote = store_layout(store, "a.parquet", size, "tag", DownloadOptions())
    assert store_layout(store, "a.parquet", size, "tag", DownloadOptions()) is remote
    local = local_layout(str(tmp_path), "a.parquet")
    assert (remote.footer, remote.row_groups) == (local.footer, local.row_groups)


def test_a_file_that_is_not_parquet_is_named(tmp_path: Path):
    (tmp_path / "x.parquet").write_bytes(b"not parquet at all, no magic")
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShardFormatError, match=r"x.parquet is not a Parquet file"):
        fetch_footer(store, "x.parquet", 28, DownloadOptions(), source=store.url("x.parquet"))
    with pytest.raises(ShardFormatError, match=r"x.parquet is not a Parquet file"):
        local_layout(str(tmp_path), "x.parquet")


def test_a_metadata_file_round_trips_its_key_value_metadata(tmp_path: Path):
    schema = pa.schema([("id", pa.int64())]).with_metadata({b"k": b"v"})
    write_metadata_file(schema, str(tmp_path / "_common_metadata"))
    data = (tmp_path / "_common_metadata").read_bytes()
    assert key_value_metadata(data, source="m")[b"k"] == b"v"
    with pytest.raises(ShardFormatError, match="m is not a Parquet metadata file"):
        key_value_metadata(b"garbage", source="m")
