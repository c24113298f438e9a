"""The reference's introspection of a StreamingDataset: tables, shards, the cache calls, Streams.

The values are checked against the reference itself in tests/interop/test_reference_api.py;
here, against what the written datasets hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from tests.streaming_data import write_dataset

from shardstream import Stream, StreamingDataset
from shardstream.dataset.introspection import ShardInfo

A, B = 60, 25  # samples of the two streams


@pytest.fixture(scope="module")
def remotes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("remotes")
    a = write_dataset(base / "a", A, size_limit=1024)
    b = write_dataset(base / "b", B, size_limit=1024, first=A, compression="zstd")
    return a, b


def two_streams(
    remotes: tuple[Path, Path], cache: Path, a: float | None = None, b: int | None = None,
    **kwargs: object,
) -> StreamingDataset:  # fmt: skip
    streams = [
        Stream(remote=str(remotes[0]), local=str(cache / "a"), repeat=a),
        Stream(remote=str(remotes[1]), local=str(cache / "b"), choose=b),
    ]
    return StreamingDataset(streams=streams, batch_size=4, **kwargs)  # type: ignore[arg-type]


def shard_counts(root: Path) -> list[int]:
    return [shard["samples"] for shard in json.loads((root / "index.json").read_text())["shards"]]


def test_the_tables_describe_the_streams_end_to_end(remotes: tuple[Path, Path], tmp_path: Path):
    ds = two_streams(remotes, tmp_path)
    per_a, per_b = shard_counts(remotes[0]), shard_counts(remotes[1])
    per_shard = per_a + per_b
    assert ds.samples_per_shard.tolist() == per_shard
    assert ds.sample_offset_per_shard.tolist() == np.cumsum([0, *per_shard[:-1]]).tolist()
    assert ds.stream_per_shard.tolist() == [0] * len(per_a) + [1] * len(per_b)
    assert ds.shards_per_stream.tolist() == [len(per_a), len(per_b)]
    assert ds.shard_offset_per_stream.tolist() == [0, len(per_a)]
    assert ds.samples_per_stream.tolist() == [A, B]
    assert ds.sample_offset_per_stream.tolist() == [0, A]
    assert (ds.num_samples, ds.size, ds.num_shards, ds.num_streams) == (
        A + B, A + B, len(per_shard), 2,
    )  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["samples_per_shard", "sample_offset_per_shard", "stream_per_shard", "shards_per_stream",
     "shard_offset_per_stream", "samples_per_stream", "sample_offset_per_stream"],
)  # fmt: skip
def test_each_table_is_a_read_only_int64_array(
    remotes: tuple[Path, Path], tmp_path: Path, name: str
):
    ds = two_streams(remotes, tmp_path)
    table = getattr(ds, name)
    assert isinstance(table, np.ndarray)
    assert table.dtype == np.int64
    with pytest.raises(ValueError, match="read-only"):
        table[0] = 7
    assert ds[A + B - 1]["id"] == A + B - 1  # reading works on tables of its own


def test_shards_carry_the_reference_readers_attributes(remotes: tuple[Path, Path], tmp_path: Path):
    ds = two_streams(remotes, tmp_path)
    shards = ds.shards
    assert len(shards) == ds.num_shards
    assert all(isinstance(shard, ShardInfo) for shard in shards)
    first, last = shards[0], shards[-1]
    assert [len(shard) for shard in shards] == ds.samples_per_shard.tolist()
    assert first.size == first.samples
    assert first.column_names == ["id", "payload"]
    assert first.column_encodings == ["int", "bytes"]
    assert first.column_sizes == [8, None]
    assert first.hashes == ["xxh64"]
    assert first.size_limit == 1024
    assert (first.compression, first.zip_data, first.get_zip_size()) == (None, None, None)
    assert first.get_max_size() == first.get_raw_size() == first.raw_data.bytes
    assert first.dirname == str(tmp_path / "a")
    assert first.split == ""
    assert last.compression == "zstd"
    assert last.zip_data is not None
    assert last.get_max_size() == last.raw_data.bytes + last.zip_data.bytes
    assert last.get_persistent_size(keep_zip=False) == last.raw_data.bytes
    assert last.get_persistent_size(keep_zip=True) == last.get_max_size()
    assert last.file_pairs == [(last.raw_data, last.zip_data)]


def test_a_shards_dirname_and_split_name_its_files(tmp_path: Path):
    remote = write_dataset(tmp_path / "remote" / "train", 30)
    ds = StreamingDataset(
        remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), split="train",
        batch_size=4,
    )  # fmt: skip
    ds.prepare_shard(0)
    shard = ds.shards[0]
    assert (shard.dirname, shard.split) == (str(tmp_path / "cache"), "train")
    assert os.path.isfile(os.path.join(shard.dirname, shard.split, shard.raw_data.basename))
    assert remote.is_dir()


def test_prepare_shard_fetches_and_evict_shard_deletes(remotes: tuple[Path, Path], tmp_path: Path):
    ds = two_streams(remotes, tmp_path)
    last = ds.num_shards - 1
    shard = ds.shards[last]
    path = tmp_path / "b" / shard.raw_data.basename
    assert not path.exists()
    ds.prepare_shard(last)
    assert path.stat().st_size == shard.raw_data.bytes  # decompressed, whole
    ds.prepare_shard(-1)  # present: marked used, nothing fetched
    ds.evict_shard(last)
    assert not path.exists()
    assert not (tmp_path / "b" / shard.zip_data.basename).exists()  # type: ignore[union-attr]
    first = int(ds.sample_offset_per_shard[last])
    assert ds[first]["id"] == first  # a read fetches it again
    assert path.exists()


def test_a_local_only_streams_shards_are_never_evicted(remotes: tuple[Path, Path]):
    ds = StreamingDataset(local=str(remotes[0]), batch_size=4)
    files = sorted(os.listdir(remotes[0]))
    ds.prepare_shard(0)
    ds.evict_shard(0)
    assert sorted(os.listdir(remotes[0])) == files


@pytest.mark.parametrize("shard_id", [-1000, 1000, 1.0, "0"])
def test_a_shard_id_out_of_range_is_an_index_error(
    remotes: tuple[Path, Path], tmp_path: Path, shard_id: object
):
    ds = two_streams(remotes, tmp_path)
    with pytest.raises(IndexError, match=rf"shard id {shard_id!r} is out of range for \d+ shards"):
        ds.prepare_shard(shard_id)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="out of range"):
        ds.evict_shard(shard_id)  # type: ignore[arg-type]


# --- Streams settled in place -------------------------------------------------------------------


def test_absolute_weights_are_settled_on_the_callers_streams(
    remotes: tuple[Path, Path], tmp_path: Path
):
    ds = two_streams(remotes, tmp_path, a=2, b=10)
    a, b = ds.streams
    assert (a.proportion, a.repeat, a.choose) == (None, 2, None)  # before loading: as given
    ds.prepare()
    assert ds.epoch_size == 2 * A + 10
    assert (a.choose, b.choose) == (2 * A, 10)
    assert (a.repeat, b.repeat) == (2.0, 10 / B)
    assert (a.proportion, b.proportion) == (2 * A / (2 * A + 10), 10 / (2 * A + 10))
    assert type(a.choose) is np.int64
    assert type(a.repeat) is np.float64
    assert type(a.proportion) is np.float64
    assert (a.weight.repeat, b.weight.choose) == (2, 10)  # what decides the next load


def test_proportions_are_settled_normalised(remotes: tuple[Path, Path], tmp_path: Path):
    a, b = remotes
    streams = [Stream(remote=str(a), local=str(tmp_path / "a"), proportion=3),
               Stream(remote=str(b), local=str(tmp_path / "b"), proportion=1)]  # fmt: skip
    ds = StreamingDataset(streams=streams, epoch_size=40, batch_size=4)
    ds.prepare()
    assert ds.streams[0] is streams[0]
    assert [s.proportion for s in streams] == [0.75, 0.25]
    assert [s.choose for s in streams] == [30, 10]
    assert [s.repeat for s in streams] == [30 / A, 10 / B]


def test_without_weights_an_epoch_size_is_split_by_stream_size(
    remotes: tuple[Path, Path], tmp_path: Path
):
    ds = two_streams(remotes, tmp_path, epoch_size=170)
    ds.prepare()
    a, b = ds.streams
    assert (a.proportion, b.proportion) == (A / (A + B), B / (A + B))
    assert int(a.choose) + int(b.choose) == 170  # type: ignore[arg-type]
    assert (a.repeat, b.repeat) == (a.choose / A, b.choose / B)  # type: ignore[operator]


def test_the_datasets_split_reaches_streams_without_copying_them(tmp_path: Path):
    write_dataset(tmp_path / "remote" / "val", 12)
    stream = Stream(remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"))
    ds = StreamingDataset(streams=[stream], split="val", batch_size=4)
    assert ds.streams[0] is stream
    assert ds.num_samples == 12
    assert stream.split is None  # the dataset's split is a default, applied when resolved
    assert stream.choose == 12
