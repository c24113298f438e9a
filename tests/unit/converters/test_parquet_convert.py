"""Parquet files written as MDS through the tables' stages: as pyarrow's dataset scan wrote them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from shardstream import LocalDataset
from shardstream.converters import arrow_to_mds
from shardstream.converters.parquet import parquet_files_to_mds
from shardstream.errors import ConfigurationError, ShardFormatError


def table(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "text": pa.array([f"row-{i}" for i in ids], pa.string()),
            "vec": pa.array([[float(i)] * (1 + i % 3) for i in ids], pa.list_(pa.float32())),
            "kind": pa.array([f"k{i % 3}" for i in ids]).dictionary_encode(),
        }
    )


def files(root: Path) -> list[str]:
    """Three files in partition folders (not read as columns), one empty, one with more columns."""
    for folder in ("year=2024", "year=2025"):
        (root / folder).mkdir(parents=True)
    pq.write_table(table(0, 50), root / "year=2024" / "a.parquet", row_group_size=16)
    pq.write_table(table(50, 1).slice(0, 0), root / "year=2025" / "b.parquet")
    extra = table(50, 33).append_column("more", pa.array(range(33), pa.int8()))
    pq.write_table(extra, root / "year=2025" / "c.pq", row_group_size=5)
    return [
        str(root / key) for key in ("year=2024/a.parquet", "year=2025/b.parquet", "year=2025/c.pq")
    ]


def test_the_shards_are_those_a_pyarrow_dataset_scan_wrote(tmp_path: Path):
    paths = files(tmp_path / "in")
    out, expected = tmp_path / "out", tmp_path / "expected"
    written = parquet_files_to_mds(paths, str(out), where="in", size_limit=512, progress=False)
    scan = ds.dataset(paths, format="parquet")
    arrow_to_mds(
        scan.scanner().to_reader(), str(expected), where="in", size_limit=512, progress=False,
        total_rows=scan.count_rows(),
    )  # fmt: skip
    assert written == 83
    names = sorted(path.name for path in out.iterdir())
    assert len(names) > 3
    assert names == sorted(path.name for path in expected.iterdir())
    for name in names:
        assert (out / name).read_bytes() == (expected / name).read_bytes(), name


def test_a_file_lacking_a_column_of_the_first_is_named(tmp_path: Path):
    paths = files(tmp_path / "in")
    with pytest.raises(ConfigurationError, match=r"\['more'\] not in in/year=2025/b.parquet"):
        parquet_files_to_mds(paths[::-1], str(tmp_path / "out"), where="in", progress=False)
    assert not (tmp_path / "out" / "index.json").exists()


def test_files_without_rows_are_refused_as_the_writer_refuses_them(tmp_path: Path):
    pq.write_table(table(0, 1).slice(0, 0), tmp_path / "empty.parquet")
    with pytest.raises(ConfigurationError, match="has no rows to write"):
        parquet_files_to_mds(
            [str(tmp_path / "empty.parquet")], str(tmp_path / "out"), where="x", progress=False
        )


def test_a_column_in_another_type_is_cast_as_the_scan_casts_it(tmp_path: Path):
    pq.write_table(pa.table({"a": pa.array([1, 2], pa.int64())}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"a": pa.array([3], pa.int32())}), tmp_path / "2.parquet")
    paths = [str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")]
    written = parquet_files_to_mds(paths, str(tmp_path / "out"), where="in", progress=False)
    assert written == 3
    assert [LocalDataset(str(tmp_path / "out"))[i]["a"] for i in range(3)] == [1, 2, 3]


def test_a_value_the_cast_would_change_is_refused_naming_the_file(tmp_path: Path):
    pq.write_table(pa.table({"a": pa.array([1], pa.int32())}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"a": pa.array([2**40], pa.int64())}), tmp_path / "2.parquet")
    paths = [str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")]
    with pytest.raises(ShardFormatError, match=r"in/2.parquet: its columns do not cast .*a: int32"):
        parquet_files_to_mds(paths, str(tmp_path / "out"), where="in", progress=False)
    assert not (tmp_path / "out" / "index.json").exists()
