from __future__ import annotations

import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.parquet_data import table

from shardstream.errors import IndexFormatError, ShardFormatError
from shardstream.tables.layout import (
    dump_layouts,
    footer_length,
    layout_from_footer,
    parse_layouts,
)


def footer_of(path: Path) -> bytes:
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    return data[-8 - length :]


@pytest.mark.parametrize("compression", ["none", "zstd", "snappy"])
def test_row_group_spans_match_the_column_chunks(tmp_path: Path, compression: str):
    path = tmp_path / "t.parquet"
    pq.write_table(table(0, 95), path, row_group_size=40, compression=compression)
    size = path.stat().st_size
    layout = layout_from_footer("t.parquet", size, "e1", footer_of(path))
    meta = pq.ParquetFile(path).metadata
    assert [g.rows for g in layout.row_groups] == [40, 40, 15]
    assert layout.columns == ("id", "score", "name", "blob", "tokens")
    assert layout.types[0] == "int64"
    previous_end = 4
    for group in layout.row_groups:
        chunks = meta.row_group(group.index)
        total = sum(chunks.column(c).total_compressed_size for c in range(chunks.num_columns))
        assert group.nbytes == total  # the chunks lie end to end
        assert group.start >= previous_end
        previous_end = group.end
    assert previous_end <= size - len(layout.footer)


def test_empty_row_groups_are_left_out(tmp_path: Path):
    path = tmp_path / "t.parquet"
    with pq.ParquetWriter(path, table(0, 1).schema) as writer:
        writer.write_table(table(0, 0))
        writer.write_table(table(0, 5))
    layout = layout_from_footer("t", path.stat().st_size, None, footer_of(path))
    assert [g.rows for g in layout.row_groups] == [5]


def test_a_file_without_the_magic_is_not_parquet():
    with pytest.raises(ShardFormatError, match=r"x\.bin is not a Parquet file"):
        footer_length(b"0123456789abcdef", size=16, source="x.bin")
    with pytest.raises(ShardFormatError, match="not a Parquet file"):
        footer_length(b"PAR1", size=4, source="x.bin")
    with pytest.raises(ShardFormatError, match="truncated"):
        footer_length(struct.pack("<I", 1000) + b"PAR1", size=100, source="x.bin")


def test_a_corrupt_footer_is_named():
    with pytest.raises(ShardFormatError, match=r"y\.parquet: the Parquet footer does not parse"):
        layout_from_footer("y.parquet", 100, None, b"garbage!" + struct.pack("<I", 8) + b"PAR1")


def test_the_derived_index_round_trips(tmp_path: Path):
    layouts = []
    for number in range(3):
        path = tmp_path / f"{number}.parquet"
        pq.write_table(table(number * 10, 10 + number), path, row_group_size=4)
        layouts.append(
            layout_from_footer(path.name, path.stat().st_size, f"tag{number}", footer_of(path))
        )
    assert parse_layouts(dump_layouts(layouts), source="i.json") == layouts
    with pytest.raises(IndexFormatError, match=r"i\.json"):
        parse_layouts(b'{"version": 99, "files": []}', source="i.json")
    with pytest.raises(IndexFormatError, match=r"i\.json"):
        parse_layouts(b"[]", source="i.json")
