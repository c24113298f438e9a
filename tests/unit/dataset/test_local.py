from __future__ import annotations

import gc
import json
import os
import pickle
import re
import struct
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream import LocalDataset, MDSWriter, ReadPolicy
from shardstream.cache.layout import in_place_cache
from shardstream.errors import (
    ChecksumError,
    ConfigurationError,
    IndexFormatError,
    SampleKeyError,
    ShardFormatError,
    ShardNotFoundError,
    UnsafeEncodingError,
    UnsafePathError,
)
from shardstream.format.mds import MDSSchema, shard_header

COLUMNS = {"id": "int", "text": "str", "vec": "ndarray:int16"}
N = 25


def sample(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "text": "x" * (i % 5) + str(i),
        "vec": np.arange(i % 4 + 1, dtype=np.int16) * i,
    }


def same(actual: dict[str, Any], i: int) -> bool:
    expected = sample(i)
    return (
        actual.keys() == expected.keys()
        and actual["id"] == expected["id"]
        and actual["text"] == expected["text"]
        and np.array_equal(actual["vec"], expected["vec"])
    )


def write(out: Path, n: int = N, columns: dict[str, str] | None = None, **kwargs: Any) -> Path:
    kwargs.setdefault("size_limit", 400)
    with MDSWriter(out=out, columns=columns or COLUMNS, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))
    return out


def index_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "index.json").read_text())  # type: ignore[no-any-return]


def set_index(folder: Path, index: dict[str, Any]) -> None:
    (folder / "index.json").write_text(json.dumps(index))


@pytest.fixture
def ds_path(tmp_path: Path) -> Path:
    path = write(tmp_path / "ds")
    assert len(index_of(path)["shards"]) > 3
    return path


# --- access -------------------------------------------------------------------------------------


def test_len_and_int_access(ds_path: Path):
    ds = LocalDataset(ds_path)
    assert len(ds) == N
    assert ds.size == N
    assert ds.root == str(ds_path)
    for i in range(N):
        assert same(ds[i], i)


def test_negative_ids(ds_path: Path):
    ds = LocalDataset(ds_path)
    assert same(ds[-1], N - 1)
    assert same(ds[-N], 0)
    assert same(ds.get_item(-3), N - 3)


@pytest.mark.parametrize("key", [np.int64(7), np.uint8(3), np.int32(-2)])
def test_numpy_integer_ids(ds_path: Path, key: Any):
    assert same(LocalDataset(ds_path)[key], int(key) % N)


@pytest.mark.parametrize(
    "key",
    [slice(None), slice(3, 9), slice(None, None, -4), slice(-5, None), slice(20, 100), slice(5, 2)],
)
def test_slices(ds_path: Path, key: slice):
    got = LocalDataset(ds_path)[key]
    ids = range(N)[key]
    assert len(got) == len(ids)
    assert all(same(s, i) for s, i in zip(got, ids, strict=True))


@pytest.mark.parametrize(
    "key", [[0, 24, 3, 3], (5, -1), np.array([9, 1, 17]), np.array([], np.int64), []]
)
def test_sequences_of_ids(ds_path: Path, key: Any):
    got = LocalDataset(ds_path)[key]
    ids = [int(i) % N for i in key]
    assert len(got) == len(ids)
    assert all(same(s, i) for s, i in zip(got, ids, strict=True))


@pytest.mark.parametrize("sample_id", [N, N + 100, -N - 1, -(10**6)])
def test_out_of_range_names_the_id(ds_path: Path, sample_id: int):
    ds = LocalDataset(ds_path)
    with pytest.raises(IndexError, match=rf"sample id {sample_id} is out of range for {N} samples"):
        ds[sample_id]
    with pytest.raises(IndexError, match=rf"sample id {sample_id} is out"):
        ds[[0, sample_id]]


@pytest.mark.parametrize(
    "key", [1.5, "3", np.array([[1.0, 2.0]]), [0.5], [[1], ["2"]], np.array([True, False]), None]
)
def test_bad_keys(ds_path: Path, key: Any):
    # A TypeError, and the ValueError the reference raises.
    with pytest.raises(SampleKeyError, match="indexed by a sample id") as info:
        LocalDataset(ds_path)[key]
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("key", [[[0, 1], [2]], np.array([[3, 4], [5, -1]]), ([1], (2, 3))])
def test_nested_keys_give_nested_lists(ds_path: Path, key: Any):
    def ids(part: Any) -> Any:
        if isinstance(part, (int, np.integer)):
            return int(part) % N
        return [ids(item) for item in part]

    def got_ids(part: Any) -> Any:
        return int(part["id"]) if isinstance(part, dict) else [got_ids(item) for item in part]

    assert got_ids(LocalDataset(ds_path)[key]) == ids(key)


def test_iteration_visits_every_sample_in_order(ds_path: Path):
    got = list(LocalDataset(ds_path))
    assert len(got) == N
    assert all(same(s, i) for i, s in enumerate(got))


def test_shards_are_the_index_entries(ds_path: Path):
    ds = LocalDataset(ds_path)
    shards = ds.shards
    assert [s.raw_data.basename for s in shards] == [
        s["raw_data"]["basename"] for s in index_of(ds_path)["shards"]
    ]
    assert sum(s.samples for s in shards) == N
    shards.clear()  # a copy: the dataset is unchanged
    assert len(ds.shards) > 3


def test_close_and_context_manager(ds_path: Path):
    with LocalDataset(ds_path) as ds:
        first = ds[0]
        ds.close()
        assert same(ds[N - 1], N - 1)
    assert same(first, 0)
    assert same(ds[1], 1)  # shards are opened again after close


def test_nothing_is_read_until_first_use(tmp_path: Path):
    ds = LocalDataset(tmp_path / "not-yet")
    write(tmp_path / "not-yet", 3)
    assert len(ds) == 3


def test_decoded_arrays_outlive_close(ds_path: Path):
    ds = LocalDataset(ds_path)
    vec = ds[N - 1]["vec"]
    ds.close()
    del ds
    np.testing.assert_array_equal(vec, sample(N - 1)["vec"])


def test_pickle_after_use(ds_path: Path):
    ds = LocalDataset(ds_path, validate_hash=None)
    assert same(ds[3], 3)
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy) == N
    assert all(same(copy[i], i) for i in (N - 1, 0, 12))
    assert same(ds[4], 4)


def test_pickle_before_use(ds_path: Path):
    copy = pickle.loads(pickle.dumps(LocalDataset(ds_path)))
    assert same(copy[-1], N - 1)


def test_pickle_of_a_compressed_dataset_with_a_cache(tmp_path: Path):
    path = write(tmp_path / "ds", compression="zstd")
    ds = LocalDataset(path, cache_dir=tmp_path / "cache")
    assert same(ds[0], 0)
    copy = pickle.loads(pickle.dumps(ds))
    assert all(same(copy[i], i) for i in range(N))


# --- splits and paths ---------------------------------------------------------------------------


def test_split(tmp_path: Path):
    write(tmp_path / "root" / "train", 7)
    write(tmp_path / "root" / "val", 2)
    assert len(LocalDataset(tmp_path / "root", "train")) == 7
    val = LocalDataset(str(tmp_path / "root"), split="val")
    assert val.root == os.path.join(str(tmp_path / "root"), "val")
    assert same(val[1], 1)


@pytest.mark.parametrize("split", ["../other", "/abs", "a/../../b"])
def test_unsafe_split(tmp_path: Path, split: str):
    with pytest.raises(UnsafePathError, match=re.escape(f"split: basename {split!r}")):
        LocalDataset(tmp_path, split=split)


def test_missing_index(tmp_path: Path):
    with pytest.raises(ShardNotFoundError, match=rf"{tmp_path}/index.json does not exist") as info:
        len(LocalDataset(tmp_path))
    assert isinstance(info.value, FileNotFoundError)


def test_missing_shard(ds_path: Path):
    os.remove(ds_path / "shard.00002.mds")
    ds = LocalDataset(ds_path)
    assert same(ds[0], 0)
    starts = np.cumsum([0] + [s.samples for s in ds.shards])
    with pytest.raises(
        ShardNotFoundError, match=rf"shard file {ds_path}/shard.00002.mds is missing"
    ) as info:
        ds[int(starts[2])]
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize("basename", ["../shard.00000.mds", "/etc/passwd", "a/../../x.mds"])
def test_unsafe_basename_in_the_index(ds_path: Path, basename: str):
    index = index_of(ds_path)
    index["shards"][1]["raw_data"]["basename"] = basename
    set_index(ds_path, index)
    with pytest.raises(
        UnsafePathError, match=rf"{ds_path}/index.json, shard 1: raw_data: basename"
    ):
        len(LocalDataset(ds_path))


def test_index_with_missing_and_extra_keys(ds_path: Path):
    index = index_of(ds_path)
    del index["shards"][0]["samples"]
    set_index(ds_path, index)
    with pytest.raises(IndexFormatError, match=r"shard 0: .*missing \['samples'\]"):
        len(LocalDataset(ds_path))
    index["shards"][0]["samples"] = 5
    index["shards"][0]["surprise"] = True
    set_index(ds_path, index)
    with pytest.raises(IndexFormatError, match=r"shard 0: .*unexpected \['surprise'\]"):
        len(LocalDataset(ds_path))


def test_index_with_an_unknown_format_or_version(ds_path: Path):
    index = index_of(ds_path)
    index["shards"][0]["format"] = "parquet"
    set_index(ds_path, index)
    with pytest.raises(IndexFormatError, match="unknown shard format 'parquet'"):
        len(LocalDataset(ds_path))
    set_index(ds_path, {**index, "version": 3})
    with pytest.raises(IndexFormatError, match="has version 3"):
        len(LocalDataset(ds_path))


def test_column_sizes_that_disagree_with_the_encodings(ds_path: Path):
    index = index_of(ds_path)
    index["shards"][2]["column_sizes"] = [8, None, 4]
    set_index(ds_path, index)
    with pytest.raises(
        IndexFormatError, match=r"shard 2: column_sizes \[8, None, 4\] disagree with the encodings"
    ):
        len(LocalDataset(ds_path))


# --- corrupt shards ----------------------------------------------------------------------------


def test_truncated_shard(ds_path: Path):
    path = ds_path / "shard.00000.mds"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ShardFormatError, match=rf"{path} is \d+ bytes but index.json says"):
        LocalDataset(ds_path)[0]


def test_corrupt_offsets(ds_path: Path):
    path = ds_path / "shard.00000.mds"
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 3)  # off[0] inside the header
    path.write_bytes(bytes(data))
    with pytest.raises(ShardFormatError, match=rf"{path}: corrupt offset table"):
        LocalDataset(ds_path)[0]


def test_shard_count_disagrees_with_the_index(ds_path: Path):
    index = index_of(ds_path)
    index["shards"][0]["samples"] += 1
    set_index(ds_path, index)
    with pytest.raises(
        ShardFormatError, match=r"shard.00000.mds: the shard holds \d+ samples but index.json says"
    ):
        LocalDataset(ds_path)[0]


def test_validate_hash(tmp_path: Path):
    path = write(tmp_path / "ds", hashes=["sha256", "xxh3_64"])
    assert all(same(s, i) for i, s in enumerate(LocalDataset(path, validate_hash="xxh3_64")))
    shard = path / "shard.00001.mds"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    ds = LocalDataset(path, validate_hash="sha256")
    assert same(ds[0], 0)
    with pytest.raises(
        ChecksumError, match=rf"{shard}: sha256 digest is [0-9a-f]+ but index.json says"
    ):
        list(ds)


def test_validate_hash_not_in_the_index(ds_path: Path):
    with pytest.raises(
        ConfigurationError, match=r"validate_hash='md5', but index.json records only no digests"
    ):
        LocalDataset(ds_path, validate_hash="md5")[0]


def test_validate_hash_unknown_algorithm(ds_path: Path):
    with pytest.raises(ConfigurationError, match=r"validate_hash='crc' is not a known algorithm"):
        LocalDataset(ds_path, validate_hash="crc")


# --- compressed shards --------------------------------------------------------------------------


def test_compressed_shards_go_to_the_cache_dir_and_are_reused(tmp_path: Path):
    path = write(tmp_path / "ds", compression="zstd:3")
    cache = tmp_path / "cache"
    before = sorted(os.listdir(path))
    ds = LocalDataset(path, cache_dir=cache)
    assert all(same(s, i) for i, s in enumerate(ds))
    names = [s.raw_data.basename for s in ds.shards]
    assert sorted(os.listdir(cache)) == sorted(names)  # no temporaries left behind
    assert sorted(os.listdir(path)) == before
    stamps = {name: (cache / name).stat().st_mtime_ns for name in names}
    for name in os.listdir(path):
        if name != "index.json":
            os.remove(path / name)  # a second open must not need the compressed files
    again = LocalDataset(path, cache_dir=cache)
    assert all(same(s, i) for i, s in enumerate(again))
    assert {name: (cache / name).stat().st_mtime_ns for name in names} == stamps


def test_compressed_split_uses_a_split_folder_in_the_cache(tmp_path: Path):
    write(tmp_path / "root" / "train", 5, compression="gz")
    ds = LocalDataset(tmp_path / "root", "train", cache_dir=tmp_path / "cache")
    assert same(ds[4], 4)
    assert os.listdir(tmp_path / "cache" / "train") == ["shard.00000.mds"]


def test_compressed_shards_read_in_place_go_to_a_cache_of_their_own(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "user"))
    folder = write(tmp_path / "root" / "train", 5, compression="gz")
    before = sorted(os.listdir(folder))
    ds = LocalDataset(tmp_path / "root", "train")
    assert all(same(s, i) for i, s in enumerate(ds))
    assert sorted(os.listdir(folder)) == before
    assert os.listdir(in_place_cache(str(folder))) == ["shard.00000.mds"]


def test_corrupt_compressed_shard(tmp_path: Path):
    path = write(tmp_path / "ds", compression="zstd")
    shard = path / "shard.00000.mds.zstd"
    shard.write_bytes(b"\x00" * shard.stat().st_size)
    with pytest.raises(ShardFormatError, match=rf"{shard} is not valid zstd data"):
        LocalDataset(path, cache_dir=tmp_path / "cache")[0]


# --- unsafe types and custom layouts -------------------------------------------------------------


def test_pkl_is_refused_unless_allowed(tmp_path: Path):
    path = tmp_path / "ds"
    with MDSWriter(out=path, columns={"obj": "pkl", "id": "int"}) as writer:
        writer.write({"obj": {"a": {1, 2}}, "id": 1})
    with pytest.raises(
        UnsafeEncodingError,
        match=r"shard 0: column 'obj' uses the 'pkl' encoding.*allow_unsafe_types=True",
    ):
        len(LocalDataset(path))
    assert LocalDataset(path, allow_unsafe_types=True)[0] == {"id": 1, "obj": {"a": {1, 2}}}


def test_merged_index_with_sub_folders_and_an_empty_shard(tmp_path: Path):
    root = tmp_path / "merged"
    write(root / "0", 4, size_limit=None)
    write(root / "1", 3, size_limit=None)
    schema = MDSSchema(COLUMNS)
    config = schema.config_bytes(compression=None, hashes=[], size_limit=None)
    empty = shard_header(config, [])
    (root / "e").mkdir()
    (root / "e" / "shard.00000.mds").write_bytes(empty)
    first, second = index_of(root / "0")["shards"][0], index_of(root / "1")["shards"][0]
    first["raw_data"]["basename"] = "0/shard.00000.mds"
    second["raw_data"]["basename"] = "1/shard.00000.mds"
    blank = {
        **first,
        "samples": 0,
        "raw_data": {"basename": "e/shard.00000.mds", "bytes": len(empty), "hashes": {}},
    }
    set_index(root, {"shards": [blank, first, blank, second, blank], "version": 2})
    ds = LocalDataset(root)
    assert len(ds) == 7
    ids = [s["id"] for s in ds]
    assert ids == [0, 1, 2, 3, 0, 1, 2]
    assert [ds[i]["id"] for i in range(7)] == ids
    assert ds[-1]["id"] == 2


def test_json_and_csv_shards(tmp_path: Path):
    root = tmp_path / "ds"
    root.mkdir()

    def split_shard(
        name: str, lines: list[str], header: str = ""
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        data = header.encode() + "".join(lines).encode()
        offsets = [len(header.encode())]
        for line in lines:
            offsets.append(offsets[-1] + len(line.encode()))
        meta = struct.pack(f"<{len(offsets) + 1}I", len(lines), *offsets) + b"{}"
        (root / name).write_bytes(data)
        (root / f"{name}.meta").write_bytes(meta)
        return (
            {"basename": name, "bytes": len(data), "hashes": {}},
            {"basename": f"{name}.meta", "bytes": len(meta), "hashes": {}},
        )

    common: dict[str, Any] = {
        "compression": None,
        "hashes": [],
        "newline": "\n",
        "size_limit": None,
        "version": 2,
        "zip_data": None,
        "zip_meta": None,
    }
    raw, meta = split_shard(
        "shard.00000.json", ['{"id": 0, "text": "a"}\n', '{"id": 1, "text": "b"}\n']
    )
    json_entry = {
        **common,
        "format": "json",
        "columns": {"id": "int", "text": "str"},
        "raw_data": raw,
        "raw_meta": meta,
        "samples": 2,
    }
    raw, meta = split_shard("shard.00001.csv", ["2,c\n", "3,d\n", "4,e\n"], header="id,text\n")
    csv_entry = {
        **common,
        "format": "csv",
        "column_names": ["id", "text"],
        "column_encodings": ["int", "str"],
        "raw_data": raw,
        "raw_meta": meta,
        "samples": 3,
    }
    set_index(root, {"shards": [json_entry, csv_entry], "version": 2})
    ds = LocalDataset(root)
    assert list(ds) == [{"id": i, "text": t} for i, t in enumerate("abcde")]
    assert ds[3] == {"id": 3, "text": "d"}


def test_zero_copy_returns_memoryviews_with_the_same_content(tmp_path):
    from shardstream import LocalDataset, MDSWriter

    with MDSWriter(out=str(tmp_path / "ds"), columns={"b": "bytes", "i": "int"}) as writer:
        for i in range(20):
            writer.write({"b": bytes([i]) * i, "i": i})
    copied = LocalDataset(tmp_path / "ds")
    viewed = LocalDataset(tmp_path / "ds", zero_copy=True)
    for i in range(20):
        assert type(copied[i]["b"]) is bytes
        assert isinstance(viewed[i]["b"], memoryview)
        assert bytes(viewed[i]["b"]) == copied[i]["b"] == bytes([i]) * i
        assert viewed[i]["i"] == i


# --- hostile index.json (found by tests/property/test_fuzz_reader.py) ------------------------


def test_compressed_shards_decompressing_to_one_name_are_refused(tmp_path: Path):
    # Shards of the same size: shard 1 would silently read shard 0's cached decompressed copy.
    columns = {"id": "int"}
    path = write(
        tmp_path / "ds", columns=columns, compression="zstd", size_limit=200, extra_keys="drop"
    )
    index = index_of(path)
    assert index["shards"][0]["raw_data"]["bytes"] == index["shards"][1]["raw_data"]["bytes"]
    index["shards"][1]["raw_data"]["basename"] = index["shards"][0]["raw_data"]["basename"]
    set_index(path, index)
    with pytest.raises(
        IndexFormatError,
        match=r"shard 0: a compressed file is decompressed to 'shard.00000.mds', which names",
    ):
        LocalDataset(path)[0]


def test_a_compressed_shard_is_never_decompressed_over_index_json(tmp_path: Path):
    path = write(tmp_path / "ds", compression="zstd")
    index = index_of(path)
    index["shards"][1]["raw_data"]["basename"] = "index.json"
    set_index(path, index)
    with pytest.raises(IndexFormatError, match=r"shard 1: .* decompressed to 'index.json'"):
        len(LocalDataset(path))
    assert index_of(path) == index


def test_uncompressed_shards_may_share_a_file(tmp_path: Path):
    path = write(tmp_path / "ds", size_limit=None)
    index = index_of(path)
    index["shards"] = index["shards"] * 2
    set_index(path, index)
    ds = LocalDataset(path)
    assert [s["id"] for s in ds] == list(range(N)) * 2


def test_a_sample_count_past_the_int64_range_is_an_index_format_error(tmp_path: Path):
    path = write(tmp_path / "ds")
    index = index_of(path)
    index["shards"][0]["samples"] = 2**63
    set_index(path, index)
    with pytest.raises(IndexFormatError, match="samples is 9223372036854775808"):
        len(LocalDataset(path))


@pytest.mark.parametrize(
    ("size", "count", "zero_copy", "kind", "copy", "whole"),
    [
        (1 << 10, 100, False, "MDSShardView", False, True),  # read whole into bytes
        (1 << 10, 9000, False, "MDSShardView", True, True),  # a cache's copy over 8 MiB: mapped
        (1 << 10, 9000, True, "MDSShardView", True, True),
        (1 << 10, 9000, False, "MDSShardView", False, True),  # in place, small: read whole
        (1 << 10, 9000, True, "MDSShardView", False, True),
        (1 << 10, 9000, False, "MDSFileView", False, False),  # in place, over the bound
        (1 << 10, 9000, True, "MDSFileView", False, False),
        (40 << 10, 220, False, "MDSFileView", True, True),  # large samples: read with pread
    ],
)
def test_a_released_shard_is_freed_at_once_not_by_the_cycle_collector(
    tmp_path: Path, size: int, count: int, zero_copy: bool, kind: str, copy: bool, whole: bool
):
    # A view in a reference cycle kept its shard mapped after release until Python's cycle
    # collector happened to run: each epoch mapped its shards again, and resident memory grew.
    root = tmp_path / "ds"
    with MDSWriter(out=root, columns={"blob": "bytes", "n": "int"}, size_limit=1 << 26) as writer:
        for k in range(count):
            writer.write({"blob": bytes([k % 256]) * size, "n": k})
    bound = ReadPolicy.in_place_whole_bytes * whole  # 0: the dataset is over it
    policy = ReadPolicy(zero_copy=zero_copy, in_place_whole_bytes=bound)
    ds = LocalDataset(root, cache_dir=root if copy else None, policy=policy)
    view = ds.shard_view(0)
    assert type(view).__name__ == kind
    assert view.get(2)["n"] == 2
    assert list(view.read_columns([0, 1, 2])[1]) == [0, 1, 2]
    assert len(view.read_columns([0, 1, 2], views=True)[0]) == 3
    freed = weakref.ref(view)
    del view
    gc.disable()
    try:
        ds.release(0)
        assert freed() is None
    finally:
        gc.enable()


def test_a_small_dataset_read_in_place_is_read_whole_unless_the_route_says_not(tmp_path: Path):
    # Shards over read_whole_bytes of small samples: read whole (a dataset this small), as
    # bytes another process reads as cheaply (so a batch of them may go by id); with pread
    # once a route says not (a worker whose loader reads its batches by id).
    root = tmp_path / "ds"
    with MDSWriter(out=root, columns={"blob": "bytes", "n": "int"}, size_limit=1 << 16) as writer:
        for k in range(400):
            writer.write({"blob": bytes([k % 256]) * 1000, "n": k})
    ds = LocalDataset(root, policy=ReadPolicy(read_whole_bytes=0))
    whole = ds.shard_view(0)
    assert type(whole).__name__ == "MDSShardView"
    assert not whole.in_memory
    ds.read_whole_in_place(False)
    assert ds.shard_view(0) is whole  # open already: kept as it is
    assert ds.first_view(1) is None  # nothing read whole: nothing to read with pread first
    by_pread = ds.shard_view(1)
    assert type(by_pread).__name__ == "MDSFileView"
    ds.read_whole_in_place(True)
    first = ds.first_view(2)
    assert type(first).__name__ == "MDSFileView"  # a first batch's, not kept
    assert type(ds.shard_view(2)).__name__ == "MDSShardView"
    assert [ds[i]["n"] for i in range(400)] == list(range(400))


def test_a_loader_holds_a_small_in_place_dataset_s_shards_and_knows_when_a_file_changed(
    tmp_path: Path,
):
    root = tmp_path / "ds"
    with MDSWriter(out=root, columns={"blob": "bytes", "n": "int"}, size_limit=1 << 16) as writer:
        for k in range(400):
            writer.write({"blob": bytes([k % 256]) * 1000, "n": k})
    ds = LocalDataset(root, policy=ReadPolicy(read_whole_bytes=0))
    shards = len(ds.shards)
    assert ds.held_for_workers() == list(range(shards))  # each read whole by every process
    # Over the bound, from a cache's copies, or told not to: none is held.
    assert LocalDataset(root, policy=ReadPolicy(in_place_whole_bytes=0)).held_for_workers() == []
    assert LocalDataset(root, cache_dir=root).held_for_workers() == []
    off = ReadPolicy(read_whole_bytes=0, inherit_whole=False)
    assert LocalDataset(root, policy=off).held_for_workers() == []
    assert not ds.changed(0)  # not open: nothing held
    path = root / ds.shards[0].raw_data.basename
    os.utime(path, ns=(10**18, 10**18))  # the rewrite below shows whatever the clock's grain
    view = ds.shard_view(0)
    assert not ds.changed(0)
    data = path.read_bytes()
    path.write_bytes(data[:1000] + bytes(1) + data[1001:])  # same size and inode, one byte
    assert ds.changed(0)  # what the view holds is not what the file holds
    ds.release(0)
    assert ds.shard_view(0) is not view
    assert not ds.changed(0)  # read again: what the file holds now
    path.unlink()
    assert ds.changed(0)  # gone
