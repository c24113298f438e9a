"""DatasetSettings: the reference's arguments in, checked once, frozen; the dataset reads them.

The dataset's attributes are its settings: writing one is checked like the argument, keeps
the shuffle and the loaded data in step, and an invalid value changes nothing.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import write_dataset

from shardstream import Stream, StreamingDataset
from shardstream.dataset.settings import DatasetSettings
from shardstream.errors import ConfigurationError

#: StreamingDataset's arguments as 2345338 took them: name, default, in order (all by keyword).
REFERENCE_ARGUMENTS: list[tuple[str, Any]] = [
    ("streams", None), ("remote", None), ("local", None), ("split", None),
    ("download_retry", 2), ("download_timeout", 60), ("validate_hash", None),
    ("keep_zip", False), ("epoch_size", None), ("predownload", None), ("cache_limit", None),
    ("sampling_method", "balanced"), ("sampling_granularity", 1), ("partition_algo", "relaxed"),
    ("num_canonical_nodes", None), ("batch_size", None), ("shuffle", False),
    ("shuffle_algo", "py1e"), ("shuffle_seed", 9176), ("shuffle_block_size", None),
    ("batching_method", "random"), ("allow_unsafe_types", False), ("replication", None),
    ("rank", None), ("world_size", None), ("ranks_per_node", None), ("topology", None),
    ("download_concurrency", 8), ("zero_copy", False), ("columns", None), ("read_policy", None),
    ("stream_name", "stream"), ("stream_config", None), ("format", None), ("version", None),
]  # fmt: skip


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote") / "ds", 120)


def arguments(function: Any) -> list[tuple[str, Any]]:
    parameters = list(inspect.signature(function).parameters.values())
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters if p.name != "self")
    return [(p.name, p.default) for p in parameters if p.name != "self"]


def test_the_dataset_takes_the_reference_arguments_and_the_settings_the_same():
    assert arguments(StreamingDataset.__init__) == REFERENCE_ARGUMENTS
    assert arguments(DatasetSettings.of) == REFERENCE_ARGUMENTS


def test_settings_are_frozen_and_building_them_touches_no_disk(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "cache-root"))
    ds = StreamingDataset(
        remote="s3://no-such-bucket/ds", local=str(tmp_path / "cache"), split="train",
        epoch_size="1k", cache_limit="1mb", batch_size=4,
    )  # fmt: skip
    assert os.listdir(tmp_path) == []
    settings = ds.settings
    assert (settings.requested_epoch_size, settings.cache_limit, settings.split) == (
        1000, 1 << 20, "train",
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.batch_size = 8  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(settings)).batch_size == 4


def test_an_invalid_argument_names_itself_in_the_order_it_did(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="sampling_method="):
        StreamingDataset(local=str(tmp_path), cache_limit="lots", sampling_method="bad")
    with pytest.raises(ConfigurationError, match="pass either streams"):
        StreamingDataset(streams=[Stream(local=str(tmp_path))], local=str(tmp_path), batch_size=0)
    with pytest.raises(ConfigurationError, match="unknown shuffle_algo 'nope'"):
        StreamingDataset(local=str(tmp_path), shuffle_algo="nope", epoch_size="lots")
    with pytest.raises(ConfigurationError, match="columns must be a list of column names"):
        StreamingDataset(streams=[Stream(local=str(tmp_path))], columns="id")


def test_an_attribute_written_is_checked_and_a_bad_value_changes_nothing(tmp_path: Path):
    ds = StreamingDataset(local=str(tmp_path), batch_size=4, shuffle_seed=3)
    before = ds.settings
    with pytest.raises(ConfigurationError, match="shuffle_seed must be below 2"):
        ds.shuffle_seed = 2**64
    with pytest.raises(ConfigurationError, match="batch_size must be an integer >= 1"):
        ds.batch_size = 0
    with pytest.raises(ConfigurationError, match="unknown shuffle_algo"):
        ds.shuffle_algo = "nope"
    assert ds.settings is before


def test_the_shuffle_follows_a_seed_written_to_the_dataset(tmp_path: Path):
    ds = StreamingDataset(local=str(tmp_path), batch_size=4, shuffle=True)
    ds.shuffle_seed = 5
    ds.shuffle_algo = "py1s"
    assert (ds.shuffle_config.seed, ds.shuffle_config.algo) == (5, "py1s")
    assert ds.settings.shuffle_seed == 5


def test_a_setting_the_loaded_data_depends_on_loads_it_again(remote: Path, tmp_path: Path):
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "c"), batch_size=4)
    assert ds.epoch_size == 120
    loaded = ds._prepare()
    ds.batch_size = 8  # the data does not depend on it: kept
    assert ds._prepare() is loaded
    ds.requested_epoch_size = 50
    assert ds.epoch_size == 50
    assert len([int(s["id"]) for s in ds]) == 50


def test_the_dataset_reads_the_same_with_its_settings_written_or_given(remote: Path, tmp_path):
    given = StreamingDataset(
        remote=str(remote), local=str(tmp_path / "a"), batch_size=4, shuffle=True,
        shuffle_seed=11, num_canonical_nodes=2,
    )  # fmt: skip
    written = StreamingDataset(remote=str(remote), local=str(tmp_path / "b"), batch_size=4)
    written.shuffle, written.shuffle_seed, written.num_canonical_nodes = True, 11, 2
    assert [int(s["id"]) for s in given] == [int(s["id"]) for s in written]


def test_streams_written_are_checked(tmp_path: Path):
    ds = StreamingDataset(local=str(tmp_path), batch_size=4)
    with pytest.raises(ConfigurationError, match="streams is empty"):
        ds.streams = []
    with pytest.raises(ConfigurationError, match="must be shardstream Streams"):
        ds.streams = [str(tmp_path)]  # type: ignore[list-item]
    other = Stream(local=str(tmp_path / "other"))
    ds.streams = [other]
    assert ds.streams == [other]
    ds.shuffle = 1  # type: ignore[assignment]
    assert ds.shuffle is True
