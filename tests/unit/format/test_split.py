from __future__ import annotations

import json
import re
import struct
from typing import Any

import pytest

from shardstream.errors import IndexFormatError, ShardFormatError
from shardstream.format.index import ShardEntry, parse_index
from shardstream.format.split import SplitShardView

SOURCE = "/ds/shard.00000.csv"


def entry(fmt: str, samples: int, **changes: Any) -> ShardEntry:
    obj: dict[str, Any] = {
        "compression": None,
        "format": fmt,
        "hashes": [],
        "newline": "\n",
        "raw_data": {"basename": f"shard.00000.{fmt}", "bytes": 1 << 20, "hashes": {}},
        "raw_meta": {"basename": f"shard.00000.{fmt}.meta", "bytes": 1 << 20, "hashes": {}},
        "samples": samples,
        "size_limit": None,
        "version": 2,
        "zip_data": None,
        "zip_meta": None,
    }
    if fmt == "json":
        obj["columns"] = {"id": "int", "score": "float", "text": "str"}
    else:
        obj["column_names"] = ["id", "score", "text"]
        obj["column_encodings"] = ["int", "float", "str"]
    if fmt == "xsv":
        obj["separator"] = "|"
    obj.update(changes)
    (parsed,) = parse_index(json.dumps({"shards": [obj], "version": 2}), source="index.json")
    return parsed


def meta_file(offsets: list[int], config: bytes = b"{}") -> bytes:
    return struct.pack(f"<{len(offsets) + 1}I", len(offsets) - 1, *offsets) + config


def split_files(lines: list[str], header: str = "") -> tuple[bytes, bytes]:
    """A data file (optional header line first, as the reference writes csv) and its meta file."""
    chunks = [line.encode() for line in lines]
    offsets = [len(header.encode())]
    for chunk in chunks:
        offsets.append(offsets[-1] + len(chunk))
    return header.encode() + b"".join(chunks), meta_file(offsets)


ROWS = [(0, 0.5, "zero"), (1, -2.25, "one"), (22, 1e-3, "twenty two é")]


@pytest.mark.parametrize(("fmt", "separator"), [("csv", ","), ("tsv", "\t"), ("xsv", "|")])
def test_delimited_shards(fmt: str, separator: str):
    lines = [separator.join(map(str, row)) + "\n" for row in ROWS]
    data, meta = split_files(lines, header=separator.join(["id", "score", "text"]) + "\n")
    view = SplitShardView(data, meta, entry(fmt, 3), source=SOURCE)
    assert len(view) == 3
    for i, (number, score, text) in enumerate(ROWS):
        sample = view[i]
        assert sample == {"id": number, "score": score, "text": text}
        assert type(sample["id"]) is int
        assert type(sample["score"]) is float
        assert view.get(i) == sample


def test_custom_newline():
    lines = [",".join(map(str, row)) + "\r\n" for row in ROWS]
    data, meta = split_files(lines)
    view = SplitShardView(data, meta, entry("csv", 3, newline="\r\n"), source=SOURCE)
    assert view[2]["text"] == "twenty two é"


def test_json_lines_shard():
    records = [{"id": n, "score": s, "text": t} for n, s, t in ROWS]
    data, meta = split_files([json.dumps(r, sort_keys=True) + "\n" for r in records])
    view = SplitShardView(data, meta, entry("json", 3), source=SOURCE)
    assert [view[i] for i in range(3)] == records


def test_empty_split_shard():
    view = SplitShardView(b"", meta_file([0]), entry("csv", 0), source=SOURCE)
    assert len(view) == 0


def test_meta_file_truncated():
    with pytest.raises(ShardFormatError, match=f"{SOURCE}: the .meta file is truncated"):
        SplitShardView(b"", b"\x00\x00", entry("csv", 0), source=SOURCE)


def test_meta_file_count_disagrees_with_the_index():
    data, meta = split_files(["1,2.0,a\n"])
    with pytest.raises(
        ShardFormatError, match=f"{SOURCE}: the .meta file lists 1 samples but index.json says 2"
    ):
        SplitShardView(data, meta, entry("csv", 2), source=SOURCE)


def test_meta_file_offset_table_cut_short():
    data, meta = split_files(["1,2.0,a\n", "2,3.0,b\n"])
    with pytest.raises(ShardFormatError, match="lists 2 samples"):
        SplitShardView(data, meta[:8], entry("csv", 2), source=SOURCE)


def test_offsets_past_the_data_file():
    data, meta = split_files(["1,2.0,a\n", "2,3.0,b\n"])
    with pytest.raises(ShardFormatError, match=f"{SOURCE}: corrupt offsets in the .meta file"):
        SplitShardView(data[:-1], meta, entry("csv", 2), source=SOURCE)


def test_decreasing_offsets():
    meta = meta_file([0, 8, 4])
    with pytest.raises(ShardFormatError, match="corrupt offsets"):
        SplitShardView(b"1,2.0,a\n2,3.0,b\n", meta, entry("csv", 2), source=SOURCE)


def test_unsupported_column_encoding_names_the_column():
    shard = entry("csv", 0, column_encodings=["int", "float", "bytes"])
    with pytest.raises(
        IndexFormatError,
        match=f"{SOURCE}: column 'text' has encoding 'bytes'; csv shards hold only",
    ):
        SplitShardView(b"", meta_file([0]), shard, source=SOURCE)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1,2.0\n", "2 fields for 3 columns"),
        ("1,2.0,a,b\n", "4 fields for 3 columns"),
        ("x,2.0,a\n", "invalid literal for int"),
        ("1,abc,a\n", "could not convert string to float"),
    ],
)
def test_bad_delimited_samples_name_the_sample(line: str, message: str):
    data, meta = split_files(["1,2.0,ok\n", line])
    view = SplitShardView(data, meta, entry("csv", 2), source=SOURCE)
    assert view[0]["text"] == "ok"
    with pytest.raises(ShardFormatError, match=f"{SOURCE}, sample 1: cannot decode: .*{message}"):
        view[1]


@pytest.mark.parametrize(
    ("line", "message"), [("[1, 2]\n", "a JSON sample must be an object"), ("{oops\n", "Expecting")]
)
def test_bad_json_samples_name_the_sample(line: str, message: str):
    data, meta = split_files([line])
    view = SplitShardView(data, meta, entry("json", 1), source=SOURCE)
    with pytest.raises(ShardFormatError, match=f"sample 0: cannot decode: {message}"):
        view[0]


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_invalid_utf8_is_a_shard_format_error(fmt: str):
    data = b"1,2.0,\xff\n" if fmt == "csv" else b'{"text": "\xff"}\n'
    view = SplitShardView(data, meta_file([0, len(data)]), entry(fmt, 1), source=SOURCE)
    with pytest.raises(ShardFormatError, match=f"{SOURCE}, sample 0: cannot decode: .*utf-8"):
        view[0]


def test_json_nested_too_deep_is_a_shard_format_error():  # found by test_fuzz_reader.py
    data, meta = split_files(["[" * 50000 + "\n"])
    view = SplitShardView(data, meta, entry("json", 1), source=SOURCE)
    with pytest.raises(ShardFormatError, match=re.escape(SOURCE) + ", sample 0: cannot decode"):
        view.get(0)
