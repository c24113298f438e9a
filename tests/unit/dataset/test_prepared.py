"""What a dataset's first use loads: an index's sample counts are checked before any plan.

An index is untrusted: a count it claims must fit the shard's offset table before an epoch
plan (arrays sized by the count) is built from it.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest
from tests.parquet_data import write_parquet
from tests.split_data import write_split_dataset
from tests.streaming_data import COLUMNS, write_dataset

from shardstream import LocalDataset, Stream, StreamingDataset
from shardstream.errors import EmptyStreamError, IndexFormatError, ShardFormatError
from shardstream.format.mds import MDSSchema, shard_header


def tamper(root: Path, samples: int) -> Path:
    """Make ``root``'s index.json claim ``samples`` samples for every shard."""
    path = root / "index.json"
    index = json.loads(path.read_text())
    for shard in index["shards"]:
        shard["samples"] = samples
    path.write_text(json.dumps(index))
    return path


def refused_with_little_memory(dataset: StreamingDataset, pattern: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(IndexFormatError, match=pattern):
            dataset.prepare()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # a plan of the claimed 2**26 samples is 512 MiB an array


@pytest.mark.parametrize("where", ["local", "remote"])
def test_an_index_claiming_2_26_samples_for_a_100_sample_shard_is_refused(
    tmp_path: Path, where: str
):
    root = write_dataset(tmp_path / "ds", 100, size_limit=1 << 20)
    index = tamper(root, 2**26)
    if where == "local":
        dataset = StreamingDataset(local=str(root), batch_size=4)
        named = re.escape(str(index))
    else:
        dataset = StreamingDataset(remote=str(root), local=str(tmp_path / "cache"), batch_size=4)
        named = "index.json"
    pattern = rf"{named}, shard 0 \(shard\.00000\.mds\): samples is 67108864, but a \d+-byte"
    refused_with_little_memory(dataset, pattern)


def test_64_shards_claiming_the_largest_uint32_count_are_refused(tmp_path: Path):
    root = write_dataset(tmp_path / "ds", 64, size_limit=1)  # a shard per sample
    assert len(json.loads((root / "index.json").read_text())["shards"]) == 64
    index = tamper(root, 2**32 - 1)
    pattern = re.escape(f"{index}, shard 0 (shard.00000.mds): samples is 4294967295")
    refused_with_little_memory(StreamingDataset(local=str(root), batch_size=4), pattern)


def test_an_honest_index_still_loads(tmp_path: Path):
    root = write_dataset(tmp_path / "ds", 100, size_limit=1 << 20)
    dataset = StreamingDataset(local=str(root), batch_size=4)
    assert dataset.num_samples == 100
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(100))


# --- streams without samples --------------------------------------------------------------------


def empty_index(root: Path, shards: int) -> Path:
    """An MDS folder whose index lists ``shards`` shards that claim no samples (or none)."""
    write_dataset(root, max(shards, 1), size_limit=1)  # a shard per sample
    index = json.loads((root / "index.json").read_text())
    schema = MDSSchema(COLUMNS)
    empty = shard_header(schema.config_bytes(compression=None, hashes=[], size_limit=1), [])
    for shard in index["shards"][:shards]:  # emptied, as their headers say too
        (root / shard["raw_data"]["basename"]).write_bytes(empty)
        shard.update(samples=0, hashes=[], raw_data={**shard["raw_data"], "bytes": len(empty)})
        shard["raw_data"]["hashes"] = {}
    index["shards"] = index["shards"][:shards]
    (root / "index.json").write_text(json.dumps(index))
    return root


@pytest.mark.parametrize("shards", [0, 3])
@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_stream_without_samples_is_an_error_naming_it(tmp_path: Path, where: str, shards: int):
    empty = empty_index(tmp_path / "empty", shards)
    full = write_dataset(tmp_path / "full", 10)
    if where == "local":
        streams = [Stream(local=str(full)), Stream(local=str(empty))]
        index = empty / "index.json"
    else:
        streams = [Stream(remote=str(full), local=str(tmp_path / "c0")),
                   Stream(remote=str(empty), local=str(tmp_path / "c1"))]  # fmt: skip
        index = tmp_path / "c1" / "index.json"
    dataset = StreamingDataset(streams=streams, batch_size=4)  # no I/O yet: the error comes ...
    with pytest.raises(EmptyStreamError) as info:
        dataset.prepare()  # ... at first use
    message = str(info.value)
    assert message.startswith(f"stream 1 ({empty}) holds no samples")
    assert f"its index {index} lists {shards} shards and no samples" in message
    assert isinstance(info.value, RuntimeError)  # what the reference raises
    with pytest.raises(EmptyStreamError):
        len(dataset)


def test_a_parquet_stream_without_rows_is_an_error_naming_it(tmp_path: Path):
    root = write_parquet(tmp_path / "pq", [(0, 10)])
    with pytest.raises(
        EmptyStreamError, match=rf"stream 0 \({root}\) holds no samples: its folder"
    ):
        StreamingDataset(local=str(root), batch_size=4).prepare()


# --- a shard's count against its own header ------------------------------------------------------

FORMATS = ["mds", "json", "csv", "tsv", "xsv"]


def three_shards(root: Path, fmt: str) -> Path:
    """Three shards of five samples each, ids 0-14."""
    if fmt == "mds":
        write_dataset(root, 15, size_limit=1)  # a shard per sample ...
        index = json.loads((root / "index.json").read_text())
        assert len(index["shards"]) == 15
        merged = write_dataset(root.parent / f"{root.name}-5", 15, size_limit=5 * 56 + 200)
        counts = [s["samples"] for s in json.loads((merged / "index.json").read_text())["shards"]]
        assert counts == [5, 5, 5], counts  # ... or five, with this limit
        return merged
    return write_split_dataset(root, fmt, shards=3, per_shard=5)


def claim(root: Path, shard: int, samples: int) -> str:
    """Make index.json claim ``samples`` samples for shard ``shard``; return its file's name."""
    path = root / "index.json"
    index = json.loads(path.read_text())
    index["shards"][shard]["samples"] = samples
    path.write_text(json.dumps(index))
    return str(index["shards"][shard]["raw_data"]["basename"])


def opened(tmp_path: Path, root: Path, where: str) -> StreamingDataset:
    if where == "local":
        return StreamingDataset(local=str(root), batch_size=1)
    return StreamingDataset(remote=str(root), local=str(tmp_path / "cache"), batch_size=1)


@pytest.mark.parametrize("where", ["local", "remote"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_shard_the_index_calls_empty_that_holds_samples_is_refused_naming_it(
    tmp_path: Path, fmt: str, where: str
):
    # No sample id maps to a shard of 0 samples, so no read opens it: its samples would be
    # skipped unseen. It is opened when the dataset loads, before any sample is handed over.
    root = three_shards(tmp_path / "ds", fmt)
    name = claim(root, 1, 0)
    dataset = opened(tmp_path, root, where)
    with pytest.raises(ShardFormatError, match=rf"{re.escape(name)}.* 5 samples .* says 0"):
        dataset.prepare()
    if where == "local":
        with pytest.raises(ShardFormatError, match=re.escape(name)):
            len(LocalDataset(root))


@pytest.mark.parametrize("where", ["local", "remote"])
@pytest.mark.parametrize("claimed", [4, 6])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_count_the_shards_header_denies_is_refused_before_any_of_its_samples(
    tmp_path: Path, fmt: str, claimed: int, where: str
):
    root = three_shards(tmp_path / "ds", fmt)
    name = claim(root, 1, claimed)
    dataset = opened(tmp_path, root, where)
    served: list[int] = []
    with pytest.raises(ShardFormatError, match=rf"{re.escape(name)}.* 5 samples .* says {claimed}"):
        served.extend(int(sample["id"]) for sample in dataset)
    assert served == list(range(5))  # shard 0's, in order: none of shard 1's
    if where == "local":
        local = LocalDataset(root)
        assert len(local) == 10 + claimed  # the index's word, until the shard is opened ...
        with pytest.raises(ShardFormatError, match=re.escape(name)):
            local[5]  # ... which refuses it before handing over a sample


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_truly_empty_shard_as_the_reference_writes_them_is_read(tmp_path: Path, where: str):
    root = write_dataset(tmp_path / "ds", 10)
    schema = MDSSchema(COLUMNS)
    empty = shard_header(schema.config_bytes(compression=None, hashes=[], size_limit=2048), [])
    (root / "shard.empty.mds").write_bytes(empty)
    index = json.loads((root / "index.json").read_text())
    blank = {
        **index["shards"][0],
        "samples": 0,
        "raw_data": {"basename": "shard.empty.mds", "bytes": len(empty), "hashes": {}},
        "hashes": [],
    }
    index["shards"] = [blank, *index["shards"], blank]
    (root / "index.json").write_text(json.dumps(index))
    assert sorted(int(sample["id"]) for sample in opened(tmp_path, root, where)) == list(range(10))
