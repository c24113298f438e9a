"""Datasets written by mosaicml-streaming 0.13 read by shardstream, and the other way round.

Where both libraries get identical input, their index.json and shard files must be identical
byte for byte; each test that allows a difference says why.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from shardstream import LocalDataset
from shardstream.format.index import FileInfo, ShardEntry, dump_index, parse_index
from shardstream.format.mds import MDSSchema, shard_header
from tests.interop.cases import COLUMNS, LOSSY_COLUMNS, make_samples, normalize
from tests.interop.conftest import (
    MDS_CASES,
    SPLIT_CASES,
    STORE_REWRITE,
    STORE_REWRITE_CASE,
    Interop,
    write_ours,
)

pytestmark = pytest.mark.interop

NOT_IDENTICAL = ("merged", "empty_first_shard", "split_json_tiny_limit")  # each test says why
BYTE_IDENTICAL = [c["name"] for c in MDS_CASES + SPLIT_CASES if c["name"] not in NOT_IDENTICAL]


def _case(name: str) -> dict[str, Any]:
    return next(case for case in MDS_CASES + SPLIT_CASES if case["name"] == name)


def _expected(case: dict[str, Any]) -> list[Any]:
    return [normalize(sample) for sample in make_samples(case)]


def _ours_read(folder: Path) -> list[Any]:
    # Decompress into a scratch folder so the datasets under comparison stay as written.
    with tempfile.TemporaryDirectory() as cache:
        dataset = LocalDataset(folder, cache_dir=cache, allow_unsafe_types=True)
        samples = [normalize(dataset[i]) for i in range(len(dataset))]
        dataset.close()
        return samples


def _assert_samples_match(actual: list[Any], expected: list[Any]) -> None:
    assert len(actual) == len(expected)
    for number, (got, want) in enumerate(zip(actual, expected, strict=True)):
        for column, value in want.items():
            if column in LOSSY_COLUMNS:
                # Lossy: same number of images, each of the same size and mode.
                got_items = got[column] if isinstance(got[column], list) else [got[column]]
                want_items = value if isinstance(value, list) else [value]
                if column in ("jpeg_array", "jpegarray"):
                    assert len(got_items) == len(want_items), (number, column)
                    continue
                assert [g[:3] for g in got_items] == [w[:3] for w in want_items], (number, column)
            else:
                assert got[column] == value, (number, column)


def build_empty_shard_dataset(out: Path) -> None:
    """A dataset whose first shard holds zero samples, built with shardstream's format layer."""
    case = _case("empty_first_shard")
    write_ours({**case, "name": "tmp"}, out)
    entries = parse_index((out / "index.json").read_bytes(), source="index.json")
    schema = MDSSchema(COLUMNS["simple"])
    empty = shard_header(schema.config_bytes(compression=None, hashes=[], size_limit=100), [])
    (out / "shard.empty.mds").write_bytes(empty)
    first = ShardEntry(
        format="mds", samples=0, raw_data=FileInfo("shard.empty.mds", len(empty), {}),
        zip_data=None, compression=None, hashes=(), size_limit=100,
        columns=schema.columns, column_sizes=tuple(schema.sizes),
    )  # fmt: skip
    (out / "index.json").write_bytes(dump_index([first, *entries]))


@pytest.mark.parametrize("name", [c["name"] for c in MDS_CASES])
def test_shardstream_reads_what_the_reference_wrote(interop: Interop, name: str) -> None:
    _assert_samples_match(_ours_read(interop.ref / name), _expected(_case(name)))


@pytest.mark.parametrize("name", [c["name"] for c in MDS_CASES])
def test_reference_reads_what_shardstream_wrote(interop: Interop, name: str) -> None:
    _assert_samples_match(interop.ref_read(name), _expected(_case(name)))
    # Both readers decode the very same bytes to the very same values, lossy columns included.
    assert interop.ref_read(name) == _ours_read(interop.ours / name)


@pytest.mark.parametrize("name", [c["name"] for c in SPLIT_CASES])
def test_shardstream_reads_reference_split_formats(interop: Interop, name: str) -> None:
    # JSON lines, CSV, TSV and XSV shards written by the reference's JSONWriter, CSVWriter, ...
    assert _ours_read(interop.ref / name) == _expected(_case(name))


@pytest.mark.parametrize("name", [c["name"] for c in SPLIT_CASES])
def test_reference_reads_split_formats_shardstream_wrote(interop: Interop, name: str) -> None:
    assert interop.ref_read(name) == _expected(_case(name))
    assert _ours_read(interop.ours / name) == _expected(_case(name))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", BYTE_IDENTICAL)
def test_identical_input_gives_identical_bytes(interop: Interop, name: str) -> None:
    ours, ref = _files(interop.ours / name), _files(interop.ref / name)
    assert sorted(ours) == sorted(ref)
    if _case(name)["writer"].get("compression", "").startswith("gz"):
        # gzip headers carry a modification time and an OS byte: the reference stamps the
        # current time and OS 255 ("unknown"); shardstream writes time 0, so its output is
        # reproducible, through zlib, which writes OS 3. The deflate streams are identical, and
        # so is every index field but the compressed file's digests.
        for file in ours:
            if file.endswith(".gz"):
                assert gzip.decompress(ours[file]) == gzip.decompress(ref[file])
                assert ours[file][4:8] == b"\0\0\0\0"
                assert ours[file][:4] + ours[file][10:] == ref[file][:4] + ref[file][10:]
        ours_index, ref_index = json.loads(ours["index.json"]), json.loads(ref["index.json"])
        for shard in ours_index["shards"] + ref_index["shards"]:
            for key in ("zip_data", "zip_meta"):
                if key in shard:
                    shard[key]["hashes"] = {}
        assert ours_index == ref_index
        return
    for file in ours:
        assert ours[file] == ref[file], file


def test_exact_limit_fills_shards_to_the_byte(interop: Interop) -> None:
    limit = _case("exact_limit")["writer"]["size_limit"]
    for folder in (interop.ours, interop.ref):
        shards = json.loads((folder / "exact_limit" / "index.json").read_bytes())["shards"]
        assert [s["samples"] for s in shards] == [3, 3, 3, 1]
        assert [s["raw_data"]["bytes"] for s in shards[:3]] == [limit] * 3


def test_oversized_samples_get_a_shard_of_their_own(interop: Interop) -> None:
    for folder in (interop.ours, interop.ref):
        shards = json.loads((folder / "oversized_sample" / "index.json").read_bytes())["shards"]
        big = [s for s in shards if s["raw_data"]["bytes"] > 2048]
        assert big
        assert all(s["samples"] == 1 for s in big)
        assert sum(s["samples"] for s in shards) == 12


def test_merged_index_matches_the_reference(interop: Interop) -> None:
    # Partition files are byte-identical; the merged index.json differs only in key order (the
    # reference's merge_index does not sort keys), so compare it parsed.
    ours, ref = _files(interop.ours / "merged"), _files(interop.ref / "merged")
    assert sorted(ours) == sorted(ref)
    for file in ours:
        if file != "index.json":
            assert ours[file] == ref[file], file
    assert json.loads(ours["index.json"]) == json.loads(ref["index.json"])
    basenames = [s["raw_data"]["basename"] for s in json.loads(ours["index.json"])["shards"]]
    assert all("/" in basename for basename in basenames)


def test_zero_sample_shards(interop: Interop) -> None:
    # With a size limit smaller than the shard config, the reference flushes an empty first
    # shard; shardstream never writes an empty shard, but reads them, and builds byte-identical
    # ones with its format layer (read back by the reference in test_reference_reads...).
    ref_shards = json.loads((interop.ref / "empty_first_shard" / "index.json").read_bytes())
    assert ref_shards["shards"][0]["samples"] == 0
    ours = json.loads((interop.ours / "empty_first_shard" / "index.json").read_bytes())
    assert all(s["samples"] > 0 for s in ours["shards"])
    ref_empty = (interop.ref / "empty_first_shard" / "shard.00000.mds").read_bytes()
    assert (interop.ours / "with_empty_shard" / "shard.empty.mds").read_bytes() == ref_empty
    expected = _expected(_case("empty_first_shard"))
    assert interop.ref_read("with_empty_shard") == expected
    assert _ours_read(interop.ours / "with_empty_shard") == expected


def test_reference_reads_a_dataset_rewritten_on_a_store(interop: Interop) -> None:
    # Shards named per write (shard.<token>.00000.mds.zstd): the reference takes every name from
    # the index, and sees only the second write's samples.
    folder = interop.ours / STORE_REWRITE
    index = json.loads((folder / "index.json").read_bytes())
    names = {shard["zip_data"]["basename"] for shard in index["shards"]}
    assert all(re.fullmatch(r"shard\.[0-9a-f]{12}\.\d{5}\.mds\.zstd", name) for name in names)
    assert set(_files(folder)) == {*names, "index.json"}  # the first write's shards are gone
    expected = _expected(_case(STORE_REWRITE_CASE))
    _assert_samples_match(interop.ref_read(STORE_REWRITE), expected)
    assert _ours_read(folder) == interop.ref_read(STORE_REWRITE)


def test_split_writers_never_write_an_empty_shard(interop: Interop) -> None:
    # Every sample is over the limit: the reference flushes an empty shard before the first
    # one, shardstream does not; its shards are the reference's others, byte for byte.
    ref, ours = (
        _files(interop.ref / "split_json_tiny_limit"),
        _files(interop.ours / "split_json_tiny_limit"),
    )
    ref_shards = json.loads(ref["index.json"])["shards"]
    ours_shards = json.loads(ours["index.json"])["shards"]
    assert [s["samples"] for s in ref_shards] == [0, 1, 1, 1, 1]
    assert [s["samples"] for s in ours_shards] == [1, 1, 1, 1]
    for number in range(4):
        for suffix in ("json", "json.meta"):
            assert ours[f"shard.{number:05}.{suffix}"] == ref[f"shard.{number + 1:05}.{suffix}"]
