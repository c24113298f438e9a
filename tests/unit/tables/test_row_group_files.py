"""Row groups fetched as byte ranges into compact files, and read back at their offsets."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.parquet_data import table

from shardstream.errors import ShardFormatError, ShardNotFoundError
from shardstream.format.index import FileInfo, ShardEntry
from shardstream.storage import DownloadOptions, LocalStore
from shardstream.tables.layout import parse_metadata
from shardstream.tables.layout_index import is_parquet_key, local_layouts, sync_layouts
from shardstream.tables.row_group_files import (
    RowGroupFetcher,
    _SpanFile,
    read_row_group,
    row_group_basename,
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "remote"
    (root / "year=2024").mkdir(parents=True)
    pq.write_table(table(0, 300), root / "year=2024" / "a.parquet", row_group_size=70)
    return root


def entry_for(basename: str, size: int) -> ShardEntry:
    return ShardEntry(
        format="parquet", samples=1, raw_data=FileInfo(basename, size), zip_data=None,
        compression=None, hashes=(), size_limit=None, columns={},
    )  # fmt: skip


@pytest.mark.parametrize("part_size", [1 << 20, 257])  # one request, or many small ranges
def test_a_fetched_row_group_reads_back_like_the_file(source: Path, tmp_path: Path, part_size: int):
    store = LocalStore(str(source))
    local = tmp_path / "cache"
    options = DownloadOptions(part_size=part_size, retry=0)
    (layout,) = sync_layouts(store, str(local), options)
    assert layout.key == "year=2024/a.parquet"
    metadata = parse_metadata(layout.footer, source=layout.key)
    original = pq.ParquetFile(source / layout.key)
    for group in layout.row_groups:
        basename = row_group_basename(layout, group.index)
        fetcher = RowGroupFetcher({basename: (layout.key, group)})
        dest = local / basename
        fetcher.fetch(store, entry_for(basename, group.nbytes), str(dest), options)
        assert dest.stat().st_size == group.nbytes
        assert not [p for p in dest.parent.iterdir() if ".tmp-" in p.name]
        read = read_row_group(
            str(dest), metadata, group, size=layout.size, compact=True,
            columns=["name", "tokens"], source="t",
        )  # fmt: skip
        assert read.equals(original.read_row_group(group.index, columns=["name", "tokens"]))


def test_reads_outside_the_span_are_refused(source: Path, tmp_path: Path):
    (layout,) = local_layouts(str(source))
    group = layout.row_groups[1]
    data = (source / layout.key).read_bytes()
    compact = tmp_path / "rg"
    compact.write_bytes(data[group.start : group.end])
    with _SpanFile(str(compact), group, layout.size) as handle:
        handle.seek(group.start + 3)
        assert handle.read(5) == data[group.start + 3 : group.start + 8]
        assert handle.seek(0, os.SEEK_END) == layout.size
        handle.seek(group.end)
        with pytest.raises(OSError, match="outside the cached row group"):
            handle.read(1)


def test_a_missing_or_changed_file_is_reported(source: Path, tmp_path: Path):
    (layout,) = local_layouts(str(source))
    metadata = parse_metadata(layout.footer, source="x")
    group = layout.row_groups[0]
    with pytest.raises(ShardNotFoundError, match="is missing"):
        read_row_group(str(tmp_path / "nope"), metadata, group, size=layout.size, compact=True,
                       columns=None, source="x")  # fmt: skip
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00" * group.nbytes)
    with pytest.raises(ShardFormatError, match="rg 0 does not decode"):
        read_row_group(str(garbage), metadata, group, size=layout.size, compact=True,
                       columns=None, source="rg 0")  # fmt: skip
    path = source / layout.key
    with open(path, "ab") as handle:
        handle.write(b"more")
    with pytest.raises(ShardFormatError, match="changed during the run"):
        read_row_group(str(path), metadata, group, size=layout.size, compact=False,
                       columns=None, source="x")  # fmt: skip


def test_long_footers_take_a_second_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from shardstream.tables import footers

    monkeypatch.setattr(footers, "FOOTER_TAIL", 64)
    root = tmp_path / "remote"
    root.mkdir()
    pq.write_table(table(0, 50), root / "a.parquet", row_group_size=10)
    (layout,) = sync_layouts(LocalStore(str(root)), str(tmp_path / "cache"), DownloadOptions())
    data = (root / "a.parquet").read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    assert layout.footer == data[-8 - length :]
    assert len(layout.row_groups) == 5


def test_data_files_are_told_from_the_rest():
    assert is_parquet_key("part-0.parquet")
    assert is_parquet_key("year=2024/part-0.snappy.parquet")
    assert not is_parquet_key("_SUCCESS")
    assert not is_parquet_key("_temporary/0/part-0.parquet")
    assert not is_parquet_key(".part-0.parquet.crc")
    assert not is_parquet_key("index.json")


def test_a_remote_parquet_folder_is_checked_with_one_listing_not_a_request_per_file(
    tmp_path: Path,
):
    root = tmp_path / "remote"
    root.mkdir()
    for k in range(6):
        pq.write_table(table(10 * k, 10), root / f"part-{k}.parquet")
    store = LocalStore(str(root))
    calls: list[str] = []
    for name in ("info", "list_info", "get_range", "get_bytes"):
        method = getattr(store, name)

        def counted(*args: object, _name: str = name, _method: object = method) -> object:
            calls.append(_name)
            return _method(*args)  # type: ignore[operator]

        setattr(store, name, counted)
    local = str(tmp_path / "cache")
    assert len(sync_layouts(store, local, DownloadOptions())) == 6
    assert calls.count("list_info") == 1
    assert "info" not in calls
    calls.clear()
    sync_layouts(store, local, DownloadOptions())  # footers known: the listing alone
    assert calls == ["list_info"]
