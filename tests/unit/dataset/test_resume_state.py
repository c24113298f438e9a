"""A state dict knows its dataset, and each of its values is checked before it sizes anything."""

from __future__ import annotations

import logging
import re
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import ids_of, write_dataset

from shardstream import Stream, StreamingDataLoader, StreamingDataset
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
        ({"version": 3}, "version is 3; this shardstream reads versions 1 to 2"),
        ({"version": 0}, "version is 0; this shardstream reads versions 1 to 2"),
        ({"version": -5}, "version is -5; this shardstream reads versions 1 to 2"),
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


# --- the settings of the order --------------------------------------------------------------

ORDER = {
    "shuffle": True, "shuffle_algo": "py1e", "shuffle_block_size": None,
    "batching_method": "random", "sampling_method": "balanced", "sampling_granularity": 1,
    "epoch_size": 1000,
}  # fmt: skip


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two streams of 1200 and 800 samples (ids 0.. and 1200..), ~40 samples a shard."""
    root = tmp_path_factory.mktemp("two")
    return write_dataset(root / "a", 1200), write_dataset(root / "b", 800, first=1200)


def mixed(streams: tuple[Path, Path], proportions: tuple[float, float] = (0.5, 0.5), **kwargs: Any):
    """Half of each stream's share drawn anew each epoch: every setting of the order counts."""
    options: dict[str, Any] = {**ORDER, "batch_size": 8, "num_canonical_nodes": 2, **kwargs}
    parts = [
        Stream(local=str(root), proportion=p) for root, p in zip(streams, proportions, strict=True)
    ]
    return StreamingDataset(streams=parts, **options)


def order_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and "overrides" in r.getMessage()
    ]


CHANGES = [
    ("shuffle", True, False),
    ("shuffle_algo", "py1e", "py1s"),
    ("shuffle_block_size", 100, 300),
    ("batching_method", "random", "stratified"),
    ("sampling_method", "balanced", "fixed"),
    ("sampling_granularity", 1, 50),
    ("epoch_size", 1000, 1200),
]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("key", "saved", "given"), CHANGES)
def test_a_setting_of_the_order_changed_since_the_save_resumes_the_saved_order(
    two_streams: tuple[Path, Path], caplog: pytest.LogCaptureFixture,
    key: str, saved: Any, given: Any, workers: int,
):  # fmt: skip
    first = StreamingDataLoader(
        mixed(two_streams, **{key: saved}), batch_size=8, num_workers=workers
    )
    batches = iter(first)
    taken = ids_of(next(batches) for _ in range(5))
    state = first.state_dict()
    rest = ids_of(batches)
    resumed_set = mixed(two_streams, **{key: given})
    resumed = StreamingDataLoader(resumed_set, batch_size=8, num_workers=workers)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        resumed.load_state_dict(state)
    again = ids_of(resumed)
    assert set(taken).isdisjoint(again)  # nothing twice
    assert again == rest  # the saved order, not the dataset's own
    assert order_warnings(caplog) == [
        f"the state dict's {key}={saved!r} overrides {key}={given!r} of the dataset, to resume "
        "the saved order"
    ]
    assert state[key] == resumed_set.state_dict(0, from_beginning=False)[key] == saved


def test_every_setting_changed_at_once_is_one_warning_and_the_saved_order(
    two_streams: tuple[Path, Path], caplog: pytest.LogCaptureFixture
):
    saved: dict[str, Any] = {key: value for key, value, _ in CHANGES}
    given: dict[str, Any] = {key: value for key, _, value in CHANGES}
    first = StreamingDataLoader(
        mixed(two_streams, **saved, shuffle_seed=1), batch_size=8, num_workers=2
    )
    batches = iter(first)
    for _ in range(3):
        next(batches)
    state = first.state_dict()
    rest = ids_of(batches)
    resumed = StreamingDataLoader(
        mixed(two_streams, **given, shuffle_seed=2), batch_size=8, num_workers=2
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        resumed.load_state_dict(state)
    (message,) = order_warnings(caplog)
    for key, old, new in [*CHANGES, ("shuffle_seed", 1, 2)]:
        assert f"{key}={old!r} overrides {key}={new!r}" in message
    assert ids_of(resumed) == rest


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("shuffle_algo", "py9", r"shuffle_algo is 'py9'; it must be one of"),
        # Unhashable values: a TypeError from a set lookup on e03e338, not the key's name.
        ("shuffle_algo", ["py1e"], r"shuffle_algo is \['py1e'\]; it must be one of"),
        ("sampling_method", {"fixed": 1}, r"sampling_method is \{'fixed': 1\}"),
        ("batching_method", 3, r"batching_method is 3; it must be one of"),
        ("shuffle", "yes", r"shuffle is 'yes'; it must be True or False"),
        ("epoch_size", 0, r"epoch_size is 0; it must be an integer >= 1 or None"),
        ("shuffle_block_size", True, r"shuffle_block_size is True"),
        ("sampling_granularity", None, r"sampling_granularity is None"),
        ("sampling_method", "rare", r"sampling_method is 'rare'"),
        ("choose_per_stream", [500, "500"], r"choose_per_stream is \[500, '500'\]"),
        ("global_batch_size", 0, r"global_batch_size is 0; it must be an integer >= 1"),
    ],
)
def test_a_bad_setting_of_the_order_is_refused_by_name_and_changes_nothing(
    two_streams: tuple[Path, Path], key: str, value: Any, pattern: str
):
    state = mixed(two_streams, shuffle_algo="py1s").state_dict(16, from_beginning=True)
    ds = mixed(two_streams)
    with pytest.raises(ConfigurationError, match=pattern):
        ds.load_state_dict(state | {key: value})
    assert (ds.shuffle_algo, ds.shuffle_config.algo) == ("py1e", "py1e")
    assert ds.state_dict(0, from_beginning=False)["sample_in_epoch"] == 0


def test_streams_weighted_otherwise_are_refused_naming_choose_per_stream(
    two_streams: tuple[Path, Path], caplog: pytest.LogCaptureFixture
):
    state = mixed(two_streams).state_dict(16, from_beginning=True)
    assert state["choose_per_stream"] == [500, 500]
    ds = mixed(two_streams, (0.7, 0.3), shuffle_algo="py1s")
    with pytest.raises(
        ConfigurationError, match=r"choose_per_stream is \[500, 500\].*\[700, 300\]"
    ):
        ds.load_state_dict(state)
    assert ds.shuffle_algo == "py1s"  # a refused state changes nothing
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ds.load_state_dict(state, strict=False)
    assert "loading it anyway (strict=False)" in caplog.text
    assert ds.state_dict(0, from_beginning=False)["sample_in_epoch"] == 16


def test_a_reference_state_resumes_with_the_dataset_s_own_settings(
    two_streams: tuple[Path, Path], caplog: pytest.LogCaptureFixture
):
    ds = mixed(two_streams, shuffle_algo="py1s")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ds.load_state_dict(reference_state(sample_in_epoch=16))
    assert order_warnings(caplog) == []
    assert ds.shuffle_algo == "py1s"


@pytest.mark.parametrize("method", ["per_stream", "device_per_stream", "stratified"])
def test_another_global_batch_size_is_refused_where_it_orders_the_epoch(
    two_streams: tuple[Path, Path], caplog: pytest.LogCaptureFixture, method: str
):
    state = mixed(two_streams, batching_method=method).state_dict(80, from_beginning=True)
    assert state["global_batch_size"] == 8
    ds = mixed(two_streams, batching_method=method, batch_size=16)
    with pytest.raises(ConfigurationError, match=r"global_batch_size is 8, this dataset's is 16"):
        ds.load_state_dict(state)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ds.load_state_dict(state, strict=False)
    assert "loading it anyway (strict=False)" in caplog.text


@pytest.mark.parametrize("workers", [0, 2])
def test_random_batching_resumes_exactly_on_another_global_batch_size(
    two_streams: tuple[Path, Path], workers: int
):
    first = StreamingDataLoader(mixed(two_streams), batch_size=8, num_workers=workers)
    batches = iter(first)
    taken = ids_of(next(batches) for _ in range(10))
    state = first.state_dict()
    rest = ids_of(batches)
    resumed = StreamingDataLoader(mixed(two_streams, batch_size=16), batch_size=16)
    resumed.load_state_dict(state)
    again = ids_of(resumed)
    assert set(taken).isdisjoint(again)
    assert sorted(again) == sorted(rest)


def test_a_state_of_an_older_shardstream_says_its_order_cannot_be_checked(
    two_streams: tuple[Path, Path], caplog: pytest.LogCaptureFixture
):
    state = mixed(two_streams).state_dict(16, from_beginning=True)
    added = {*ORDER, "choose_per_stream", "global_batch_size"}
    older = {key: value for key, value in state.items() if key not in added}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        mixed(two_streams).load_state_dict(older)
    assert "does not record the settings of the order" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        mixed(two_streams).load_state_dict(state)
    assert caplog.text == ""


def test_a_state_is_written_and_restored_from_settings_and_data_alone(rows_3000: Path):
    """The position a state holds goes in and comes out as a Position: a stage's state later."""
    from shardstream.dataset.prepared import PreparedDataset
    from shardstream.dataset.resume_state import Position, restore, write_state
    from shardstream.dataset.settings import DatasetSettings
    from shardstream.sampling import Topology

    saved = DatasetSettings.of(local=str(rows_3000), batch_size=8, shuffle=True, shuffle_seed=3)
    data = PreparedDataset.load(saved)
    topology = Topology(nodes=2, ranks_per_node=1, rank=0)
    state = write_state(Position(2, 96), saved, data, topology=topology, initial_nodes=None)
    assert state == dataset(
        rows_3000, shuffle_seed=3, num_canonical_nodes=None, rank=0, world_size=2, ranks_per_node=1
    ).state_dict(96, True) | {"epoch": 2}
    other = DatasetSettings.of(local=str(rows_3000), batch_size=8, rank=0, world_size=2,
                               ranks_per_node=1)  # fmt: skip
    loads: list[DatasetSettings] = []

    def load(settings: DatasetSettings) -> PreparedDataset:
        loads.append(settings)
        return data

    restored = restore(state, other, load, strict=True)
    assert restored.position == Position(2, 96)
    assert restored.initial_physical_nodes == 2
    assert (restored.settings.shuffle, restored.settings.shuffle_seed) == (True, 3)
    assert restored.settings.num_canonical_nodes == 2
    assert (other.shuffle, other.shuffle_seed) == (False, 9176)  # frozen: a new one came out
    assert [dict(s.table_pins) for s in loads] == [{}]


def test_a_state_saved_right_after_loading_one_is_the_loaded_one(rows_3000: Path):
    """Read in the rank process, then loaded: the epoch read before is no longer current."""
    saved = dataset(rows_3000).state_dict(96, from_beginning=True) | {"epoch": 4}
    ds = dataset(rows_3000)
    assert len([int(sample["id"]) for sample in ds]) == 3000
    ds.load_state_dict(saved)
    again = ds.state_dict(0, from_beginning=False)
    assert (again["epoch"], again["sample_in_epoch"]) == (4, 96)
    ds.set_epoch(6)
    assert ds.state_dict(0, from_beginning=False)["epoch"] == 6
