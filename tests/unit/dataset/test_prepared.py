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
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.errors import IndexFormatError


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
