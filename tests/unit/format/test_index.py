from __future__ import annotations

import copy
import gc
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.spec import MDS_KEYS

from shardstream.errors import IndexFormatError, UnsafePathError
from shardstream.format.index import (
    INDEX_BASENAME,
    INDEX_VERSION,
    FileInfo,
    ShardEntry,
    _json_index,
    _plain_mds_entry,
    _typed_index,
    dump_index,
    most_samples,
    parse_index,
    safe_basename,
)

SOURCE = "/data/ds/index.json"


def mds_entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "column_encodings": ["ndarray:float32:2", "str", "int"],
        "column_names": ["a", "s", "x"],
        "column_sizes": [8, None, 8],
        "compression": "zstd:5",
        "format": "mds",
        "hashes": ["sha1"],
        "raw_data": {"basename": "shard.00000.mds", "bytes": 282, "hashes": {"sha1": "ab12"}},
        "samples": 2,
        "size_limit": 67108864,
        "version": 2,
        "zip_data": {"basename": "shard.00000.mds.zstd", "bytes": 205, "hashes": {"sha1": "cd34"}},
    }
    entry.update(changes)
    return entry


def index_text(*entries: dict[str, Any], **top: Any) -> str:
    return json.dumps({"shards": list(entries), "version": 2, **top})


def parse_one(entry: dict[str, Any]) -> ShardEntry:
    (parsed,) = parse_index(index_text(entry), source=SOURCE)
    return parsed


def expect_error(
    entry: dict[str, Any], message: str, error: type[Exception] = IndexFormatError
) -> None:
    with pytest.raises(error, match=re.escape(f"{SOURCE}, shard 0") + ".*" + message):
        parse_one(entry)


def test_constants():
    assert INDEX_BASENAME == "index.json"
    assert INDEX_VERSION == 2


def test_parse_an_mds_entry():
    entry = parse_one(mds_entry())
    assert entry.format == "mds"
    assert entry.samples == 2
    assert list(entry.columns.items()) == [("a", "ndarray:float32:2"), ("s", "str"), ("x", "int")]
    assert entry.column_sizes == (8, None, 8)
    assert entry.compression == "zstd:5"
    assert entry.hashes == ("sha1",)
    assert entry.size_limit == 67108864
    assert entry.raw_data == FileInfo("shard.00000.mds", 282, {"sha1": "ab12"})
    assert entry.zip_data == FileInfo("shard.00000.mds.zstd", 205, {"sha1": "cd34"})
    assert entry.data_file is entry.zip_data


def test_uncompressed_entry_stores_the_raw_file():
    entry = parse_one(mds_entry(compression=None, zip_data=None, size_limit=None, hashes=[]))
    assert entry.data_file is entry.raw_data
    assert entry.compression is None
    assert entry.size_limit is None


def test_column_order_of_the_index_is_kept():
    entry = parse_one(
        mds_entry(
            column_names=["x", "a", "s"],
            column_encodings=["int", "ndarray:float32:2", "str"],
            column_sizes=[8, 8, None],
        )
    )
    assert list(entry.columns) == ["x", "a", "s"]


def test_to_json_has_exactly_the_documented_keys_and_round_trips():
    raw = mds_entry()
    entry = parse_one(raw)
    assert set(entry.to_json()) == MDS_KEYS
    assert entry.to_json() == raw


def test_dump_index_is_sorted_json_that_parses_back():
    entries = parse_index(index_text(mds_entry(), mds_entry(samples=0)), source=SOURCE)
    data = dump_index(entries)
    assert isinstance(data, bytes)
    obj = json.loads(data)
    assert obj["version"] == 2
    assert data == json.dumps(obj, sort_keys=True).encode()
    assert parse_index(data, source=SOURCE) == entries


def test_dump_of_no_entries():
    assert json.loads(dump_index([])) == {"shards": [], "version": 2}
    assert parse_index(dump_index([]), source=SOURCE) == []


def test_unknown_top_level_keys_are_ignored():
    assert len(parse_index(index_text(mds_entry(), writer="other"), source=SOURCE)) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not valid JSON"),
        (b"\xff\xfe", "is not valid JSON"),
        ("[]", "must be an object with a 'shards' list"),
        ('{"version": 2}', "must be an object with a 'shards' list"),
        ('{"shards": {}, "version": 2}', "must be an object with a 'shards' list"),
        ('{"shards": []}', "has version None; only MDS index version 2"),
        ('{"shards": [], "version": 1}', "has version 1; only MDS index version 2"),
        ('{"shards": [], "version": "2"}', "has version '2'"),
    ],
)
def test_bad_index_documents(text: str | bytes, message: str):
    with pytest.raises(IndexFormatError, match=re.escape(SOURCE) + " " + re.escape(message)):
        parse_index(text, source=SOURCE)


@pytest.mark.parametrize("key", sorted(MDS_KEYS - {"format"}))
def test_missing_key(key: str):
    entry = mds_entry()
    del entry[key]
    expect_error(entry, re.escape(f"missing ['{key}'], unexpected []"))


def test_extra_key():
    expect_error(mds_entry(extra=1), re.escape("missing [], unexpected ['extra']"))


@pytest.mark.parametrize("fmt", ["parquet", None, 3, "MDS"])
def test_unknown_format(fmt: Any):
    expect_error(mds_entry(format=fmt), rf"unknown shard format {re.escape(repr(fmt))}")


def test_missing_format():
    entry = mds_entry()
    del entry["format"]
    expect_error(entry, "unknown shard format None")


def test_entry_must_be_an_object():
    with pytest.raises(IndexFormatError, match="shard 1: a shard entry must be an object, got"):
        parse_index(index_text(mds_entry(), ["list"]), source=SOURCE)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"version": 3}, "shard version must be 2, got 3"),
        ({"samples": -1}, "samples must be a non-negative integer, got -1"),
        ({"samples": "2"}, "samples must be a non-negative integer, got '2'"),
        ({"samples": True}, "samples must be a non-negative integer, got True"),
        ({"samples": 2.0}, "samples must be a non-negative integer, got 2.0"),
        ({"compression": 5}, "compression must be a string or null, got 5"),
        ({"size_limit": "64mb"}, "size_limit must be an integer or null"),
        ({"hashes": "sha1"}, "hashes must be a list of names"),
        ({"hashes": [1]}, "hashes must be a list of names"),
        ({"compression": None}, "zip_data must be present exactly when compressed"),
        ({"zip_data": None}, "zip_data must be present exactly when compressed"),
        (
            {"raw_data": None},
            "raw_data: expected an object with exactly basename, bytes and hashes",
        ),
        ({"raw_data": {"basename": "a", "bytes": 1}}, "raw_data: expected an object with exactly"),
        (
            {"raw_data": {"basename": "a", "bytes": -1, "hashes": {}}},
            "raw_data: bytes must be a non-negative integer, got -1",
        ),
        (
            {"raw_data": {"basename": "a", "bytes": "1", "hashes": {}}},
            "raw_data: bytes must be a non-negative integer",
        ),
        (
            {"raw_data": {"basename": "a", "bytes": 1, "hashes": ["sha1"]}},
            "raw_data: hashes must map names to hex digests",
        ),
        (
            {"raw_data": {"basename": "a", "bytes": 1, "hashes": {"sha1": 5}}},
            "raw_data: hashes must map names to hex digests",
        ),
        (
            {"zip_data": {"basename": 5, "bytes": 1, "hashes": {}}},
            "zip_data: basename must be a non-empty string, got 5",
        ),
        (
            {"raw_data": {"basename": "", "bytes": 1, "hashes": {}}},
            "raw_data: basename must be a non-empty string, got ''",
        ),
        (
            {"column_names": ["a", "s"]},
            "column_names and column_encodings must be lists of strings of equal length",
        ),
        ({"column_names": ["a", "a", "x"]}, "with unique names"),
        ({"column_encodings": "int"}, "column_names and column_encodings must be lists"),
        (
            {"column_encodings": ["int", 5, "int"]},
            "column_names and column_encodings must be lists of strings",
        ),
        ({"column_sizes": [8, None]}, "column_sizes must hold one size or null per column"),
        ({"column_sizes": [8, None, -8]}, "column_sizes must hold one size or null per column"),
        ({"column_sizes": [8, None, "8"]}, "column_sizes must hold one size or null per column"),
        ({"column_sizes": None}, "column_sizes must hold one size or null per column"),
    ],
)
def test_wrong_types_and_values(changes: dict[str, Any], message: str):
    expect_error(mds_entry(**changes), re.escape(message))


@pytest.mark.parametrize(
    "basename",
    [
        "/etc/passwd",
        "../shard.00000.mds",
        "a/../../shard.00000.mds",
        "7/../shard.00000.mds",
        "./shard.00000.mds",
        "a//b.mds",
        "dir/",
        "a\\b.mds",
        "..\\x.mds",
        "C:/shard.mds",
        "c:shard.mds",
        "shard\x00.mds",
        "..",
    ],
)
def test_unsafe_basenames_are_refused(basename: str):
    for key in ("raw_data", "zip_data"):
        entry = mds_entry()
        entry[key] = {**entry[key], "basename": basename}
        expect_error(
            entry,
            f"{key}: basename {re.escape(repr(basename))} is not a plain relative path",
            UnsafePathError,
        )


def test_unsafe_path_error_is_an_index_format_error():
    with pytest.raises(IndexFormatError, match="the index is corrupt or hostile"):
        safe_basename("../../x", where="here")


@pytest.mark.parametrize(
    "basename", ["shard.00000.mds", "7/shard.00003.mds.zstd", "a/b/c.mds", "shard.123456.mds"]
)
def test_relative_basenames_in_subfolders_are_allowed(basename: str):
    assert safe_basename(basename, where="here") == basename
    entry = mds_entry(compression=None, zip_data=None)
    entry["raw_data"] = {**entry["raw_data"], "basename": basename}
    assert parse_one(entry).raw_data.basename == basename


def test_safe_basename_names_the_place():
    with pytest.raises(UnsafePathError, match="split: basename '/abs'"):
        safe_basename("/abs", where="split")
    with pytest.raises(
        IndexFormatError, match=r"split: basename must be a non-empty string, got None"
    ):
        safe_basename(None, where="split")


# --- split formats ---------------------------------------------------------------------------


def split_entry(fmt: str, **changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "compression": None,
        "format": fmt,
        "hashes": [],
        "newline": "\n",
        "raw_data": {"basename": f"shard.00000.{fmt}", "bytes": 10, "hashes": {}},
        "raw_meta": {"basename": f"shard.00000.{fmt}.meta", "bytes": 20, "hashes": {}},
        "samples": 1,
        "size_limit": None,
        "version": 2,
        "zip_data": None,
        "zip_meta": None,
    }
    if fmt == "json":
        entry["columns"] = {"id": "int", "text": "str"}
    else:
        entry["column_names"] = ["id", "text"]
        entry["column_encodings"] = ["int", "str"]
    if fmt == "xsv":
        entry["separator"] = "|"
    entry.update(changes)
    return entry


@pytest.mark.parametrize(
    ("fmt", "separator"), [("csv", ","), ("tsv", "\t"), ("xsv", "|"), ("json", None)]
)
def test_parse_split_entries(fmt: str, separator: str | None):
    entry = parse_one(split_entry(fmt))
    assert entry.format == fmt
    assert dict(entry.columns) == {"id": "int", "text": "str"}
    assert entry.separator == separator
    assert entry.newline == "\n"
    assert entry.raw_meta == FileInfo(f"shard.00000.{fmt}.meta", 20, {})
    assert entry.zip_meta is None


def test_split_entry_newline_defaults():
    assert parse_one(split_entry("csv", newline=None)).newline == "\n"
    assert parse_one(split_entry("csv", newline="\r\n")).newline == "\r\n"


def test_xsv_needs_a_separator():
    expect_error(split_entry("xsv", separator=""), "an xsv shard needs a non-empty separator")
    expect_error(split_entry("xsv", separator=None), "an xsv shard needs a non-empty separator")


def test_split_entries_check_their_keys_and_meta():
    entry = split_entry("json")
    del entry["raw_meta"]
    expect_error(entry, re.escape("missing ['raw_meta']"))
    expect_error(split_entry("csv", separator=","), re.escape("unexpected ['separator']"))
    expect_error(split_entry("json", columns=["id"]), "columns must map names to encodings")
    expect_error(
        split_entry("tsv", raw_meta={"basename": "../m", "bytes": 1, "hashes": {}}),
        "raw_meta: basename",
        UnsafePathError,
    )


@pytest.mark.parametrize("fmt", ["json", "csv", "tsv", "xsv"])
def test_split_entries_are_written_back_as_read(fmt):
    raw = split_entry(fmt)
    assert parse_one(raw).to_json() == raw


def test_entries_are_frozen():
    entry = parse_one(mds_entry())
    with pytest.raises(AttributeError):
        entry.samples = 3  # type: ignore[misc]
    changed = copy.deepcopy(mds_entry())
    changed["samples"] = 3
    assert parse_one(changed) != entry


# --- hostile input (found by tests/property/test_fuzz_reader.py) -----------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"shards": [], "version": ' + "2" * 5000 + "}",  # past int()'s 4300-digit limit
        '{"shards": ' + "[" * 50000 + "]" * 50000 + ', "version": 2}',  # past the recursion limit
    ],
)
def test_json_that_python_refuses_is_an_index_format_error(text: str):
    with pytest.raises(IndexFormatError, match=re.escape(SOURCE) + " is not valid JSON"):
        parse_index(text, source=SOURCE)


@pytest.mark.parametrize("samples", [2**32, 2**63 - 1, 2**63, 2**64])
def test_sample_count_past_uint32_is_refused(samples: int):
    expect_error(mds_entry(samples=samples), f"samples is {samples}, but a shard stores its count")


def test_largest_uint32_sample_count_parses():
    table = {"basename": "shard.00000.mds", "bytes": 4 * (2**32 + 1), "hashes": {}}
    assert parse_one(mds_entry(samples=2**32 - 1, raw_data=table)).samples == 2**32 - 1


def test_a_count_the_offset_table_cannot_hold_is_refused_on_every_path():
    # 282 bytes hold a count and at most 69 offsets: 68 samples.
    assert most_samples(282) == 68
    assert parse_one(mds_entry(samples=68)).samples == 68
    lie = mds_entry(samples=2**26)
    message = (
        f"{SOURCE}, shard 0 (shard.00000.mds): samples is 67108864, but a 282-byte file holds "
        "the offsets of at most 68; index.json is corrupt"
    )
    for entry in (mds_entry(samples=69), lie):
        with pytest.raises(IndexFormatError, match=re.escape(message[:40])):
            parse_one(entry)
    with pytest.raises(IndexFormatError, match=re.escape(message)):
        parse_one(lie)
    assert _typed_index(index_text(lie)) is None  # the quick paths hand it to the full checks
    assert _plain_mds_entry(lie) is None
    with pytest.raises(IndexFormatError, match=re.escape(message)):
        _json_index(index_text(lie), SOURCE)


def test_sixty_four_shards_claiming_the_largest_uint32_count_are_refused():
    entries = [mds_entry(samples=2**32 - 1) for _ in range(64)]
    with pytest.raises(IndexFormatError, match=re.escape(f"{SOURCE}, shard 0 (shard.00000.mds)")):
        parse_index(index_text(*entries), source=SOURCE)


@pytest.mark.parametrize("fmt", ["json", "csv", "tsv", "xsv"])
def test_a_split_shard_count_is_bounded_by_its_meta_file(fmt: str):
    entry = split_entry(fmt, samples=3)  # a 20-byte .meta file: a count and 4 offsets at most
    assert parse_one(entry).samples == 3
    entry["samples"] = 4
    expect_error(entry, re.escape(f"(shard.00000.{fmt}.meta): samples is 4, but a 20-byte file"))


@pytest.mark.parametrize("basename", ["\ud800", "shard\udcff.mds"])
def test_basename_that_is_not_valid_unicode_is_refused(basename: str):
    entry = mds_entry()
    entry["raw_data"] = {**entry["raw_data"], "basename": basename}
    expect_error(entry, "raw_data: basename .* is not valid Unicode")


def test_basename_nested_too_deep_is_refused():
    assert safe_basename("a/" * 63 + "b", where="here") == "a/" * 63 + "b"
    with pytest.raises(IndexFormatError, match=r"here: basename .* is 64 folders deep; at most 63"):
        safe_basename("a/" * 64 + "b", where="here")


# --- the quick path for plain MDS entries agrees with the full checks ------------------------

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["mds", "zstd", "shard.00000.mds", "a/b.mds", "../x", ".hidden", 2, 0]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)


def _mutate(entry: dict[str, Any], path: list[str], value: Any, drop: bool) -> dict[str, Any]:
    out = copy.deepcopy(entry)
    target = out
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            return out
        target = target[key]
    if drop:
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value
    return out


_PATHS = [[key] for key in MDS_KEYS] + [
    [file, key] for file in ("raw_data", "zip_data") for key in ("basename", "bytes", "hashes")
]


@settings(max_examples=400, deadline=None)
@given(
    path=st.sampled_from(_PATHS),
    value=_JSON_VALUES,
    drop=st.booleans(),
    compressed=st.booleans(),
)
def test_the_quick_path_accepts_only_what_the_full_checks_accept(
    path: list[str], value: Any, drop: bool, compressed: bool
):
    base = mds_entry() if compressed else mds_entry(compression=None, zip_data=None)
    entry = _mutate(base, path, value, drop)
    # Parsed as the second entry, after a valid one made its column set known.
    text = json.dumps({"shards": [base, entry], "version": 2})
    quick = _plain_mds_entry(json.loads(text)["shards"][1])
    try:
        full: ShardEntry | None = ShardEntry.from_json(json.loads(text)["shards"][1], where="x")
    except IndexFormatError:
        full = None
    if quick is not None:
        assert full is not None, entry
        assert quick == full
    typed = _typed_index(text)  # the index decoded into msgspec structs
    if typed is not None:
        assert full is not None, entry
        assert typed[1] == full
    if full is not None:  # what the full checks accept parses the same either way
        assert parse_index(text, source=SOURCE)[1] == full


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40), at=st.integers(0, 2000), cut=st.booleans())
def test_the_typed_path_accepts_only_what_the_json_path_accepts(data: bytes, at: int, cut: bool):
    # Bytes of a real index replaced or cut short: wherever the typed decoder returns entries,
    # the JSON path returns the same; wherever the JSON path refuses the text, it gives up.
    text = index_text(mds_entry(), mds_entry(compression=None, zip_data=None)).encode()
    at = min(at, len(text))
    mutated = text[:at] + data if cut else text[:at] + data + text[at + len(data) :]
    assert_typed_agrees(mutated)


def assert_typed_agrees(text: bytes | str) -> None:
    """Where the typed path returns entries, the JSON path accepts the text and agrees."""
    typed = _typed_index(text)
    try:
        full: list[ShardEntry] | None = _json_index(text, SOURCE)
    except IndexFormatError:
        full = None
    if typed is not None:
        assert typed == full


@settings(max_examples=300, deadline=None)
@given(
    at=st.integers(0, 3),
    path=st.sampled_from(_PATHS),
    value=_JSON_VALUES,
    drop=st.booleans(),
    compressed=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_the_typed_path_checks_every_entry_not_only_the_first(
    at: int, path: list[str], value: Any, drop: bool, compressed: list[bool]
):
    # The typed path checks some fields over all entries at once and others only when they
    # change from one entry to the next: a fault in any entry must still be caught.
    entries = [mds_entry() if z else mds_entry(compression=None, zip_data=None) for z in compressed]
    entries[at] = _mutate(entries[at], path, value, drop)
    assert_typed_agrees(json.dumps({"shards": entries, "version": 2}))


@pytest.mark.parametrize("name", ["a\nb.mds", "shard.00000.mds\n", "\nshard.mds"])
def test_a_basename_with_a_newline_is_not_taken_for_two(name: str):
    # The typed path checks every basename with one match over them joined by newlines: a
    # newline inside one makes it give up, and the JSON path keeps the name whole.
    entries = [mds_entry(compression=None, zip_data=None) for _ in range(3)]
    entries[1]["raw_data"]["basename"] = name
    text = json.dumps({"shards": entries, "version": 2})
    assert _typed_index(text) is None
    assert parse_index(text, source=SOURCE)[1].raw_data.basename == name


def test_an_empty_basename_is_refused_by_both_paths():
    entries = [mds_entry(compression=None, zip_data=None) for _ in range(3)]
    entries[2]["raw_data"]["basename"] = ""
    text = json.dumps({"shards": entries, "version": 2})
    assert _typed_index(text) is None
    with pytest.raises(IndexFormatError):
        parse_index(text, source=SOURCE)


def test_the_typed_path_takes_a_plain_index_and_gives_up_on_others():
    plain = index_text(mds_entry(), mds_entry(compression=None, zip_data=None))
    typed = _typed_index(plain)
    assert typed is not None
    assert typed == [ShardEntry.from_json(e, where="x") for e in json.loads(plain)["shards"]]
    extra_key = json.loads(plain)
    extra_key["shards"][1]["extra"] = 1
    assert _typed_index(json.dumps(extra_key)) is None
    with pytest.raises(IndexFormatError, match="unexpected"):  # the JSON path says what is wrong
        parse_index(json.dumps(extra_key), source=SOURCE)
    climbing = json.loads(plain)
    climbing["shards"][0]["raw_data"]["basename"] = "../x.mds"
    assert _typed_index(json.dumps(climbing)) is None
    with pytest.raises(UnsafePathError):
        parse_index(json.dumps(climbing), source=SOURCE)


def test_the_quick_path_takes_plain_entries():
    parse_index(index_text(mds_entry()), source=SOURCE)  # the column set is now known
    entry = mds_entry(raw_data={"basename": "7/shard.00003.mds", "bytes": 282, "hashes": {}})
    quick = _plain_mds_entry(entry)
    assert quick is not None
    assert quick == ShardEntry.from_json(mds_entry(raw_data=entry["raw_data"]), where="x")
    assert _plain_mds_entry(mds_entry(raw_data={**entry["raw_data"], "basename": "é.mds"})) is None


@pytest.mark.parametrize("enabled", [True, False])
def test_parsing_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    # parse_index pauses the collector while it builds its many objects (see its comment).
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert len(parse_index(index_text(mds_entry(), mds_entry()), source=SOURCE)) == 2
        assert gc.isenabled() is enabled
        with pytest.raises(IndexFormatError):
            parse_index("{not json", source=SOURCE)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
