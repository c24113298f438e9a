"""A state dict knows its dataset, and each of its values is checked before it sizes anything."""

from __future__ import annotations

import logging
import re
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.dataset.resume_state import (
    MAX_CANONICAL_NODES,
    STATE_VERSION,
    data_fingerprint,
)
from shardstream.errors import ConfigurationError

LOGGER = "shardstream.dataset.resume_state"
REFERENCE_KEYS = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")


@pytest.fixture(scope="module")
def rows_5000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("a") / "ds", 5000, size_limit=1 << 16, payload=4)


@pytest.fixture(scope="module")
def rows_3000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("b") / "ds", 3000, size_limit=1 << 16, payload=4)


def dataset(root: Path, **kwargs: Any) -> StreamingDataset:
    options: dict[str, Any] = {"batch_size": 8, "shuffle": True, "num_canonical_nodes": 2}
    options.update(kwargs)
    return StreamingDataset(local=str(root), **options)


def reference_state(**changes: int) -> dict[str, int]:
    """A state dict as mosaicml-streaming writes it: its five keys only."""
    state = {"epoch": 0, "sample_in_epoch": 640, "num_canonical_nodes": 2, "shuffle_seed": 9176}
    return {**state, "initial_physical_nodes": 1, **changes}


def test_a_state_records_its_version_and_data(rows_5000: Path):
    ds = dataset(rows_5000)
    state = ds.state_dict(640, from_beginning=True)
    assert state["version"] == STATE_VERSION == 2
    assert state["num_samples"] == 5000
    assert re.fullmatch(r"[0-9a-f]{16}", state["fingerprint"])
    assert set(REFERENCE_KEYS) <= set(state)
    dataset(rows_5000).load_state_dict(state)  # the same data: no complaint


def test_a_state_of_5000_rows_is_refused_by_a_dataset_of_3000(rows_5000: Path, rows_3000: Path):
    state = dataset(rows_5000).state_dict(640, from_beginning=True)
    other = dataset(rows_3000)
    expected = (
        rf"its fingerprint is '{state['fingerprint']}' \(5000 samples\), this dataset's is "
        rf"'{other.state_dict(0, True)['fingerprint']}' \(3000 samples\).*"
        + re.escape("load_state_dict(state, strict=False)")
    )
    with pytest.raises(ConfigurationError, match=expected):
        other.load_state_dict(state)
    with pytest.raises(ConfigurationError, match=expected):  # and through the loader
        StreamingDataLoader(other, batch_size=8).load_state_dict(state)


def test_strict_false_forces_the_state_in_with_a_warning(
    rows_5000: Path, rows_3000: Path, caplog: pytest.LogCaptureFixture
):
    state = dataset(rows_5000).state_dict(640, from_beginning=True)
    other = dataset(rows_3000)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        StreamingDataLoader(other, batch_size=8).load_state_dict(state, strict=False)
    assert "saved on other data" in caplog.text
    assert other.state_dict(0, from_beginning=False)["sample_in_epoch"] == 640


def test_the_fingerprint_is_of_the_data_not_of_its_folder(rows_3000: Path, tmp_path: Path):
    state = dataset(rows_3000).state_dict(64, from_beginning=True)
    copy = Path(shutil.copytree(rows_3000, tmp_path / "copy"))
    dataset(copy).load_state_dict(state)
    moved = StreamingDataset(remote=str(copy), local=str(tmp_path / "cache"), batch_size=8)
    assert moved.state_dict(0, True)["fingerprint"] == state["fingerprint"]


def test_the_fingerprint_follows_counts_names_and_stream_order(rows_3000: Path):
    shards = dataset(rows_3000)._prepare().datasets[0].shards
    one = data_fingerprint([shards])
    assert one == data_fingerprint([list(shards)])
    assert data_fingerprint([shards[:-1]]) != one
    assert data_fingerprint([shards[:1], shards[1:]]) != one
    assert data_fingerprint([shards[1:], shards[:1]]) != data_fingerprint([shards[:1], shards[1:]])


def test_a_reference_state_loads_with_a_warning_that_it_cannot_be_checked(
    rows_3000: Path, caplog: pytest.LogCaptureFixture
):
    ds = dataset(rows_3000)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ds.load_state_dict(reference_state())
    assert "has no fingerprint" in caplog.text
    assert "cannot be checked" in caplog.text
    assert ds.state_dict(0, from_beginning=False)["sample_in_epoch"] == 640


def test_a_reference_state_past_the_epoch_is_refused(rows_3000: Path):
    ds = dataset(rows_3000)
    with pytest.raises(ConfigurationError, match=r"sample_in_epoch is 4000, but an epoch .* 3000"):
        ds.load_state_dict(reference_state(sample_in_epoch=4000))
    ds.load_state_dict(reference_state(sample_in_epoch=3000 + 8))  # the last batch topped up
    ds.load_state_dict(reference_state(sample_in_epoch=4000), strict=False)


def refused(ds: StreamingDataset, state: dict[str, Any], pattern: str) -> None:
    ds.prepare()  # the index, loaded before the state is measured
    tracemalloc.start()
    try:
        with pytest.raises(ConfigurationError, match=pattern):
            ds.load_state_dict(state)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_a_billion_canonical_nodes_are_refused_before_any_plan(rows_3000: Path):
    state = reference_state(num_canonical_nodes=10**9)
    pattern = rf"num_canonical_nodes is 1000000000; it must be from 1 to {MAX_CANONICAL_NODES}"
    refused(dataset(rows_3000), state, pattern)
    state = dataset(rows_3000).state_dict(0, True) | {"num_canonical_nodes": 10**9}
    refused(dataset(rows_3000), state, "num_canonical_nodes is 1000000000")


@pytest.mark.parametrize("key", ["shuffle_seed", "epoch"])
def test_a_seed_or_epoch_past_64_bits_is_refused_by_name(rows_3000: Path, key: str):
    refused(dataset(rows_3000), reference_state(**{key: 2**64}), rf"{key} is {2**64}; .*64-bit")


def test_a_seed_past_64_bits_is_refused_by_the_constructor(rows_3000: Path):
    with pytest.raises(ConfigurationError, match="shuffle_seed must be below 2\\*\\*64"):
        dataset(rows_3000, shuffle_seed=2**64)
    assert dataset(rows_3000, shuffle_seed=2**64 - 1).shuffle_seed == 2**64 - 1


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"version": 3}, "version is 3; this shardstream reads versions up to 2"),
        ({"initial_physical_nodes": 10**9}, "initial_physical_nodes is 1000000000"),
        ({"initial_physical_nodes": "1"}, "initial_physical_nodes is '1'"),
        ({"num_canonical_nodes": 0}, "num_canonical_nodes is 0"),
    ],
)
def test_bad_values_are_named(rows_3000: Path, changes: dict[str, Any], pattern: str):
    refused(dataset(rows_3000), reference_state(**changes), pattern)


def test_an_overridden_shuffle_seed_is_a_warning_naming_both(
    rows_3000: Path, caplog: pytest.LogCaptureFixture
):
    state = dataset(rows_3000, shuffle_seed=5).state_dict(8, from_beginning=True)
    ds = dataset(rows_3000, shuffle_seed=7)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ds.load_state_dict(state)
    (record,) = [r for r in caplog.records if "shuffle_seed" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "shuffle_seed=5 overrides shuffle_seed=7" in record.getMessage()
    assert ds.shuffle_seed == ds.shuffle_config.seed == 5


def test_overridden_canonical_nodes_are_a_warning_naming_both(
    rows_3000: Path, caplog: pytest.LogCaptureFixture
):
    state = dataset(rows_3000, num_canonical_nodes=4).state_dict(8, from_beginning=True)
    given = dataset(rows_3000, num_canonical_nodes=2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        given.load_state_dict(state)
        dataset(rows_3000, num_canonical_nodes=None).load_state_dict(state)  # none was given
    messages = [r.getMessage() for r in caplog.records if "num_canonical_nodes" in r.getMessage()]
    assert messages == [
        "the state dict's num_canonical_nodes=4 overrides num_canonical_nodes=2 of the dataset, "
        "to resume the saved order"
    ]
    assert given.num_canonical_nodes == 4
