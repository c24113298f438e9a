"""A cached shard that does not match its index is downloaded once more, then reported."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.errors import ChecksumError, ShardFormatError

SAMPLES = 60


def stored_files(root: Path) -> list[str]:
    index = json.loads((root / "index.json").read_text())
    return [(s["zip_data"] or s["raw_data"])["basename"] for s in index["shards"]]


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def ids(ds: StreamingDataset) -> list[int]:
    return sorted(int(sample["id"]) for sample in ds)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "remote", SAMPLES)


def test_a_corrupt_cached_shard_is_fetched_again(
    remote: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    local = tmp_path / "cache"
    first = StreamingDataset(remote=str(remote), local=str(local), batch_size=4,
                             validate_hash="xxh64")  # fmt: skip
    assert ids(first) == list(range(SAMPLES))
    victim = stored_files(remote)[0]
    flip_a_byte(local / victim)  # the cache's copy rots; the remote is fine
    again = StreamingDataset(remote=str(remote), local=str(local), batch_size=4,
                             validate_hash="xxh64")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        assert ids(again) == list(range(SAMPLES))
    assert f"downloading it once more from {remote / victim}" in caplog.text
    assert (local / victim).read_bytes() == (remote / victim).read_bytes()


def test_a_remote_shard_that_never_matches_is_reported_with_its_url(remote: Path, tmp_path: Path):
    victim = stored_files(remote)[1]
    flip_a_byte(remote / victim)
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), batch_size=4,
                          validate_hash="xxh64")  # fmt: skip
    with pytest.raises(ChecksumError, match="downloaded twice from") as caught:
        ids(ds)
    assert str(remote / victim) in str(caught.value)
    assert victim in str(caught.value)


def test_a_truncated_remote_shard_is_a_format_error_naming_it(remote: Path, tmp_path: Path):
    victim = remote / stored_files(remote)[0]
    victim.write_bytes(victim.read_bytes()[:-7])
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), batch_size=4)
    with pytest.raises(ShardFormatError, match=str(victim.name)):
        ids(ds)


def test_a_local_only_dataset_is_never_deleted_when_corrupt(remote: Path, tmp_path: Path):
    copy = tmp_path / "only-copy"
    shutil.copytree(remote, copy)
    victim = copy / stored_files(copy)[0]
    flip_a_byte(victim)
    before = victim.read_bytes()
    ds = StreamingDataset(local=str(copy), batch_size=4, validate_hash="xxh64")
    with pytest.raises(ChecksumError, match=victim.name):
        ids(ds)
    assert victim.read_bytes() == before
