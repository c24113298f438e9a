"""StreamingDataset and StreamingDataLoader in one process (and DataLoader worker processes).

The "remote" here is a local folder read through LocalStore, so every path of the cache runs
(download into the cache folder, locks, eviction) without a server; the S3 and multi-node
versions are in tests/integration.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.streaming_data import global_batches, ids_of, write_dataset
from torch.utils.data import DataLoader

from shardstream import Stream, StreamingDataLoader, StreamingDataset
from shardstream.errors import CacheLimitError, ConfigurationError, TopologyError

SAMPLES = 300


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote") / "ds", SAMPLES)


@pytest.fixture(scope="module")
def zipped_remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("zremote") / "ds", SAMPLES, compression="zstd")


def dataset(remote: Path, local: Path, **kwargs: object) -> StreamingDataset:
    options: dict[str, object] = {"batch_size": 4, "shuffle": True, "num_canonical_nodes": 2}
    options.update(kwargs)
    return StreamingDataset(remote=str(remote), local=str(local), **options)  # type: ignore[arg-type]


def epoch_ids(ds: StreamingDataset) -> list[int]:
    return [int(sample["id"]) for sample in ds]


def test_one_epoch_yields_every_sample_once_shuffled(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache")
    ids = epoch_ids(ds)
    assert sorted(ids) == list(range(SAMPLES))
    assert ids != sorted(ids)
    assert (len(ds), ds.size, ds.num_samples) == (SAMPLES, SAMPLES, SAMPLES)


def test_shards_land_in_the_cache_whole(zipped_remote: Path, tmp_path: Path):
    local = tmp_path / "cache"
    ds = dataset(zipped_remote, local, validate_hash="xxh64")
    assert sorted(epoch_ids(ds)) == list(range(SAMPLES))
    names = sorted(p.name for p in local.iterdir() if p.is_file())
    assert "index.json" in names
    assert not [n for n in names if ".tmp-" in n]
    assert not [n for n in names if n.endswith(".zstd")]  # keep_zip=False drops them
    assert len([n for n in names if n.endswith(".mds")]) == ds.num_shards


def test_keep_zip_keeps_the_compressed_files(zipped_remote: Path, tmp_path: Path):
    local = tmp_path / "cache"
    ds = dataset(zipped_remote, local, keep_zip=True)
    epoch_ids(ds)
    assert len(list(local.glob("*.mds.zstd"))) == ds.num_shards


def test_epochs_differ_and_each_is_whole(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache")
    first, second = epoch_ids(ds), epoch_ids(ds)
    assert sorted(second) == list(range(SAMPLES))
    assert first != second
    ds.set_epoch(0)
    assert epoch_ids(ds) == first


def test_the_same_seed_gives_the_same_order_in_another_cache(remote: Path, tmp_path: Path):
    assert epoch_ids(dataset(remote, tmp_path / "a")) == epoch_ids(dataset(remote, tmp_path / "b"))


@pytest.mark.parametrize(("world", "per_node"), [(2, 1), (2, 2), (4, 2), (3, 3)])
def test_global_batches_do_not_depend_on_the_ranks(
    remote: Path, tmp_path: Path, world: int, per_node: int
):
    batch = 12 // world  # the global batch stays 12
    single = dataset(remote, tmp_path / "one", batch_size=12, rank=0, world_size=1)
    reference = global_batches([epoch_ids(single)], 12)
    per_rank = [
        epoch_ids(
            dataset(remote, tmp_path / f"node{rank // per_node}", batch_size=batch, rank=rank,
                    world_size=world, ranks_per_node=per_node)
        )
        for rank in range(world)
    ]  # fmt: skip
    assert len({len(ids) for ids in per_rank}) == 1  # every rank yields as many samples
    assert global_batches(per_rank, batch) == reference
    flat = collections.Counter(i for ids in per_rank for i in ids)
    assert set(flat) == set(range(SAMPLES))
    assert sum(flat.values()) - SAMPLES == -SAMPLES % world  # only the reported repeats


def test_dataloader_workers_do_not_change_the_batches(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache")
    in_process = ids_of(StreamingDataLoader(ds, batch_size=4, num_workers=0))
    ds2 = dataset(remote, tmp_path / "cache")
    with_workers = ids_of(StreamingDataLoader(ds2, batch_size=4, num_workers=2))
    assert with_workers == in_process
    assert sorted(with_workers) == list(range(SAMPLES))


def test_spawned_workers_read_the_same_batches(remote: Path, tmp_path: Path):
    expected = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4))
    ds = dataset(remote, tmp_path / "c")
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert ids_of(loader) == expected


def test_persistent_workers_advance_the_epoch(remote: Path, tmp_path: Path):
    plain = dataset(remote, tmp_path / "cache")
    expected = [ids_of(StreamingDataLoader(plain, batch_size=4)) for _ in range(2)]
    ds = dataset(remote, tmp_path / "cache")
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    assert [ids_of(loader) for _ in range(2)] == expected
    assert expected[0] != expected[1]


def test_workers_started_anew_each_epoch_advance_the_epoch(remote: Path, tmp_path: Path):
    plain = dataset(remote, tmp_path / "cache")
    expected = [ids_of(StreamingDataLoader(plain, batch_size=4)) for _ in range(3)]
    ds = dataset(remote, tmp_path / "cache")
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2)  # a plain DataLoader would too
    assert [ids_of(loader) for _ in range(3)] == expected


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_continues_exactly(remote: Path, tmp_path: Path, workers: int):
    full = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4))
    ds = dataset(remote, tmp_path / "c")
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=workers)
    seen: list[int] = []
    for batch in loader:
        seen += [int(i) for i in batch["id"]]
        if len(seen) == 40:
            state = loader.state_dict()
            break
    assert (state["epoch"], state["sample_in_epoch"]) == (0, 40)
    resumed = dataset(remote, tmp_path / "c")
    again = StreamingDataLoader(resumed, batch_size=4, num_workers=workers)
    again.load_state_dict(state)
    rest = ids_of(again)
    assert seen + rest == full
    assert again.state_dict()["sample_in_epoch"] == SAMPLES  # counted from the resume point
    next_epoch = ids_of(again)  # after the resumed epoch comes the next one, whole
    assert sorted(next_epoch) == list(range(SAMPLES))


def test_resume_on_another_rank_count(remote: Path, tmp_path: Path):
    single = dataset(remote, tmp_path / "one", batch_size=12)
    reference = global_batches([epoch_ids(single)], 12)
    state = dataset(remote, tmp_path / "one", batch_size=12).state_dict(
        num_samples=36, from_beginning=True
    )
    per_rank = []
    for rank in range(3):
        ds = dataset(remote, tmp_path / "three", batch_size=4, rank=rank, world_size=3,
                     ranks_per_node=3)  # fmt: skip
        ds.load_state_dict(state)
        per_rank.append(epoch_ids(ds))
    assert global_batches(per_rank, 4) == reference[3:]


ODD = 117  # samples of a dataset that splits evenly over neither the batch nor most ranks


@pytest.fixture(scope="module")
def odd_remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("odd") / "ds", ODD, size_limit=512)


def batch_ids(loader: Any) -> list[list[int]]:
    return [[int(i) for i in batch["id"]] for batch in loader]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_one_device_yields_each_sample_once_then_a_short_batch(
    odd_remote: Path, tmp_path: Path, workers: int, drop_last: bool
):
    ds = dataset(odd_remote, tmp_path / "c")  # batch 4
    loader = DataLoader(ds, batch_size=4, num_workers=workers, drop_last=drop_last)
    batches = batch_ids(loader)
    assert len(ds) == ODD
    assert len(loader) == len(batches)
    whole, rest = divmod(ODD, 4)
    assert [len(b) for b in batches] == [4] * whole + ([] if drop_last else [rest])
    ids = [i for b in batches for i in b]
    assert len(set(ids)) == len(ids)  # nothing repeated
    assert len(ids) == (whole * 4 if drop_last else ODD)


@pytest.mark.parametrize(
    ("nodes", "per_node", "batch"), [(1, 2, 4), (2, 2, 4), (1, 3, 4), (2, 4, 2), (1, 8, 4)]
)
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_get_equal_batches_and_repeat_only_to_be_equal(
    odd_remote: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    nodes: int,
    per_node: int,
    batch: int,
    drop_last: bool,
):
    world = nodes * per_node
    datasets = [
        dataset(odd_remote, tmp_path / f"node{rank // per_node}", batch_size=batch, rank=rank,
                world_size=world, ranks_per_node=per_node)
        for rank in range(world)
    ]  # fmt: skip
    share = -(-ODD // world)  # the reference's len(): the epoch over the ranks, rounded up
    assert {len(ds) for ds in datasets} == {share}
    with caplog.at_level("INFO", logger="shardstream.dataset.streaming"):
        per_rank = [batch_ids(DataLoader(ds, batch_size=batch, drop_last=drop_last))
                    for ds in datasets]  # fmt: skip
    whole, rest = divmod(share, batch)
    expected = [batch] * whole + ([rest] if rest and not drop_last else [])
    assert all([len(b) for b in batches] == expected for batches in per_rank)
    if drop_last:
        return
    delivered = collections.Counter(i for batches in per_rank for b in batches for i in b)
    padding = share * world - ODD  # fewer than the ranks: the fewest that make them equal
    assert set(delivered) == set(range(ODD))
    assert sum(delivered.values()) == ODD + padding
    assert padding < world
    said = [r.getMessage() for r in caplog.records if "repeated" in r.getMessage()]
    assert said == ([f"epoch 0: {padding} samples are repeated so that each of the {world} "
                     "ranks gets as many"] if padding else [])  # fmt: skip


@pytest.mark.parametrize("workers", [0, 1])
def test_the_padding_line_is_said_once_per_dataset_not_each_epoch(
    odd_remote: Path, tmp_path: Path, workers: int
):
    ds = dataset(odd_remote, tmp_path / "c", rank=0, world_size=2, ranks_per_node=2)
    # A file, not caplog: forked DataLoader workers log in processes of their own.
    handler = logging.FileHandler(tmp_path / "log.txt")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("shardstream.dataset.streaming")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        for epoch in range(3):
            ds.set_epoch(epoch)  # as a training loop may: the note is still said once
            loader = DataLoader(ds, batch_size=4, num_workers=workers,
                                multiprocessing_context="fork" if workers else None)  # fmt: skip
            batch_ids(loader)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
    lines = (tmp_path / "log.txt").read_text().splitlines()
    said = [line[: line.index(":")] for line in lines if "repeated" in line]
    assert said == ["INFO epoch 0", "DEBUG epoch 1", "DEBUG epoch 2"]


def test_a_mid_epoch_resume_onto_other_ranks_keeps_the_short_last_step(
    odd_remote: Path, tmp_path: Path
):
    def loaders(world: int, batch: int, local: Path) -> list[StreamingDataLoader]:
        datasets = [
            dataset(odd_remote, local, batch_size=batch, rank=rank, world_size=world,
                    ranks_per_node=world)
            for rank in range(world)
        ]  # fmt: skip
        return [StreamingDataLoader(ds, batch_size=batch) for ds in datasets]

    def steps(per_rank: list[list[list[int]]]) -> list[collections.Counter[int]]:
        return [collections.Counter(i for batches in per_rank for i in batches[k])
                for k in range(len(per_rank[0]))]  # fmt: skip

    order = ids_of(StreamingDataLoader(dataset(odd_remote, tmp_path / "a"), batch_size=4))
    # Global batch 8 over 2 ranks: 15 steps, the last of 6 (5 samples left and 1 repeat).
    whole = steps([batch_ids(loader) for loader in loaders(2, 4, tmp_path / "a")])
    assert [sum(step.values()) for step in whole] == [8] * 14 + [6]
    two = loaders(2, 4, tmp_path / "a")
    iterators = [iter(loader) for loader in two]
    for iterator in iterators:
        for _ in range(5):
            next(iterator)
    state = two[0].state_dict()
    assert state["sample_in_epoch"] == 40
    four = loaders(4, 2, tmp_path / "b")  # the same global batch over 4 ranks: 3 repeats
    for loader in four:
        loader.load_state_dict(state)
    resumed = steps([batch_ids(loader) for loader in four])
    assert resumed[:-1] == whole[5:-1]
    first = collections.Counter(order[:3])
    assert resumed[-1] == whole[-1] - collections.Counter(order[:1]) + first
    assert sum(resumed[-1].values()) == 8  # 5 samples left, and 3 repeats: 2 for each rank


def test_a_resume_state_at_the_end_starts_the_next_epoch(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "c")
    second = dataset(remote, tmp_path / "c")
    second.set_epoch(1)
    ds.load_state_dict({"epoch": 0, "sample_in_epoch": SAMPLES, "num_canonical_nodes": 2,
                        "shuffle_seed": 9176})  # fmt: skip
    assert epoch_ids(ds) == epoch_ids(second)


def test_bad_state_dicts_are_refused(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "c")
    with pytest.raises(ConfigurationError, match="lacks"):
        ds.load_state_dict({"epoch": 0})
    with pytest.raises(ConfigurationError, match="bad values"):
        ds.load_state_dict({"epoch": -2, "sample_in_epoch": 0, "num_canonical_nodes": 1,
                            "shuffle_seed": 1})  # fmt: skip


def test_the_references_state_from_before_its_first_epoch_resumes_nothing(
    remote: Path, tmp_path: Path
):
    fresh = dataset(remote, tmp_path / "c")
    ds = dataset(remote, tmp_path / "c")
    # What mosaicml-streaming's state_dict(0, False) returns before its first epoch.
    ds.load_state_dict({"epoch": -1, "sample_in_epoch": 0, "num_canonical_nodes": 5,
                        "shuffle_seed": 1, "initial_physical_nodes": None})  # fmt: skip
    assert epoch_ids(ds) == epoch_ids(fresh)


@pytest.mark.parametrize(("world", "batch"), [(1, 4), (1, 7), (3, 4), (4, 5)])
def test_len_is_what_each_rank_yields(remote: Path, tmp_path: Path, world: int, batch: int):
    def rank(r: int) -> StreamingDataset:
        return dataset(
            remote, tmp_path / "c", batch_size=batch, rank=r, world_size=world,
            ranks_per_node=world,
        )  # fmt: skip

    counts = {len(rank(r)) for r in range(world)}
    assert counts == {len(epoch_ids(rank(0)))}


def test_getitem_fetches_the_shard(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache")
    assert ds[123]["id"] == 123
    assert ds[-1]["id"] == SAMPLES - 1
    with pytest.raises(IndexError):
        ds[SAMPLES]


def test_local_only_data_is_read_in_place(remote: Path, tmp_path: Path):
    copy = tmp_path / "data"
    shutil.copytree(remote, copy)
    ds = StreamingDataset(local=str(copy), batch_size=4)
    assert sorted(epoch_ids(ds)) == list(range(SAMPLES))
    assert sorted(ids_of(StreamingDataLoader(ds, batch_size=4, num_workers=2))) == list(
        range(SAMPLES)
    )
    ds.load_state_dict(ds.state_dict(8, from_beginning=True))
    # The user's data folder is read, never written: run files go to the user's cache root.
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in remote.iterdir())


def test_mixing_streams_by_proportion(tmp_path: Path):
    a = write_dataset(tmp_path / "a", 100)
    b = write_dataset(tmp_path / "b", 100, first=1000)
    ds = StreamingDataset(
        streams=[Stream(remote=str(a), local=str(tmp_path / "ca"), proportion=3),
                 Stream(remote=str(b), local=str(tmp_path / "cb"), proportion=1)],
        epoch_size=200, batch_size=4, shuffle=True,
    )  # fmt: skip
    ids = epoch_ids(ds)
    assert len(ids) == 200
    assert sum(i < 1000 for i in ids) == 150
    assert (ds.epoch_size, ds.num_samples) == (200, 200)


@pytest.mark.parametrize(
    ("batch_size", "stream", "expected"),
    [(8, 1, r"gives 3 of the epoch's 103 samples, a share of a global batch of 8 that rounds"),
     (128, 0, r"gives 100 samples to the epoch, fewer than the 12\d places it takes in each "
              r"global batch of 128")],
)  # fmt: skip
def test_stratified_batching_refuses_a_stream_too_small_for_a_batch(
    tmp_path: Path, batch_size: int, stream: int, expected: str
):
    roots = [write_dataset(tmp_path / "big", 100), write_dataset(tmp_path / "tiny", 3, first=100)]
    ds = StreamingDataset(
        streams=[Stream(remote=str(roots[0]), local=str(tmp_path / "cb")),
                 Stream(remote=str(roots[1]), local=str(tmp_path / "ct"))],
        batch_size=batch_size, batching_method="stratified",
    )  # fmt: skip
    named = rf"stratified batching: stream {stream} \({roots[stream]}\) "
    with pytest.raises(ConfigurationError, match=named + expected):
        next(iter(ds))
    with pytest.raises(ValueError, match=named):  # the class the reference raises
        next(iter(ds))


@pytest.mark.parametrize(
    ("method", "unit"),
    [("per_stream", "global batch of 8"), ("device_per_stream", "device batch of 8")],
)
def test_per_stream_batching_refuses_a_stream_too_small_for_a_batch(
    tmp_path: Path, method: str, unit: str
):
    roots = [write_dataset(tmp_path / "big", 100), write_dataset(tmp_path / "tiny", 3, first=100)]
    ds = StreamingDataset(
        streams=[Stream(remote=str(roots[0]), local=str(tmp_path / "cb")),
                 Stream(remote=str(roots[1]), local=str(tmp_path / "ct"))],
        batch_size=8, batching_method=method,
    )  # fmt: skip
    expected = rf"{method} batching: stream 1 \({roots[1]}\) gives 3 samples .* one {unit}"
    with pytest.raises(ValueError, match=expected):  # the class the reference raises
        next(iter(ds))


def test_cache_limit_bounds_the_cache_and_evicts_least_recent(remote: Path, tmp_path: Path):
    local = tmp_path / "cache"
    probe = dataset(remote, tmp_path / "probe")
    epoch_ids(probe)
    shards = [p.stat().st_size for p in (tmp_path / "probe").glob("*.mds")]
    kept = folder_bytes(tmp_path / "probe") - sum(shards)  # the cached index and state count
    limit = 3 * max(shards) + kept
    ds = dataset(remote, local, cache_limit=limit, predownload=4)
    assert 0 < read_whole_epoch(ds, lambda: cached_bytes(local)) <= limit
    assert ds._prepare().cache.usage() <= limit


def test_cache_limit_counts_everything_the_cache_keeps(remote: Path, tmp_path: Path):
    """The cached index, locks and records count too: the folder never holds more than the limit."""
    local = tmp_path / "cache"
    largest = max(p.stat().st_size for p in remote.glob("*.mds"))
    limit = 3 * largest + (remote / "index.json").stat().st_size // 2
    ds = dataset(remote, local, cache_limit=limit, predownload=4)
    assert 0 < read_whole_epoch(ds, lambda: folder_bytes(local)) <= limit
    assert folder_bytes(local) <= ds._prepare().cache.usage() <= limit


def read_whole_epoch(ds: StreamingDataset, measure: Callable[[], int]) -> int:
    """Read an epoch, checking it holds every sample once; the peak of ``measure()`` meanwhile."""
    peak = 0
    ids = []
    for sample in ds:
        ids.append(int(sample["id"]))
        peak = max(peak, measure())
    assert sorted(ids) == list(range(SAMPLES))
    return peak


def folder_bytes(local: Path) -> int:
    """Bytes of every file under ``local`` now, whatever it is."""
    total = 0
    for folder, _, names in os.walk(local):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def cached_bytes(local: Path) -> int:
    """Bytes of shard files in ``local`` now (files may vanish while we look: eviction runs)."""
    total = 0
    for path in local.glob("*.mds"):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def test_a_cache_limit_below_the_largest_shard_fails_at_start(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache", cache_limit=100)
    with pytest.raises(CacheLimitError, match="cache_limit=100"):
        next(iter(ds))


def test_local_only_shards_are_never_evicted(remote: Path, tmp_path: Path):
    copy = tmp_path / "data"
    shutil.copytree(remote, copy)
    before = sorted(p.name for p in copy.glob("*.mds"))
    ds = StreamingDataset(local=str(copy), batch_size=4, cache_limit=1)
    assert sorted(epoch_ids(ds)) == list(range(SAMPLES))
    assert sorted(p.name for p in copy.glob("*.mds")) == before


def test_a_changed_remote_index_is_fetched_again(tmp_path: Path):
    remote = write_dataset(tmp_path / "remote", 48)
    local = tmp_path / "cache"
    assert sorted(epoch_ids(dataset(remote, local))) == list(range(48))
    shutil.rmtree(remote)
    write_dataset(remote, 60, first=500)  # the same shard names, other bytes
    assert sorted(epoch_ids(dataset(remote, local))) == list(range(500, 560))


def test_two_datasets_in_one_process_keep_their_own_epochs(remote: Path, tmp_path: Path):
    train = dataset(remote, tmp_path / "cache")
    val = dataset(remote, tmp_path / "cache")
    train_loader = StreamingDataLoader(train, batch_size=4, num_workers=2)
    val_loader = StreamingDataLoader(val, batch_size=4, num_workers=2)
    first = ids_of(train_loader)
    assert ids_of(val_loader) == first  # val's first epoch, not train's second
    assert ids_of(train_loader) != first


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batching_method": "other"}, "batching_method"),
        ({"partition_algo": "other"}, "partition_algo"),
        ({"sampling_method": "other"}, "sampling_method"),
        ({"batch_size": 0}, "batch_size"),
        ({"shuffle_algo": "other"}, "shuffle_algo"),
        ({"validate_hash": "nope"}, "validate_hash"),
        ({"cache_limit": "lots"}, "cache_limit"),
        ({"epoch_size": "many"}, "epoch_size"),
    ],
)
def test_bad_arguments_name_themselves(tmp_path: Path, kwargs: dict[str, object], message: str):
    with pytest.raises(ConfigurationError, match=message):
        StreamingDataset(remote="s3://bucket/ds", local=str(tmp_path), **kwargs)  # type: ignore[arg-type]


def test_the_constructor_does_no_io(tmp_path: Path):
    StreamingDataset(remote="s3://bucket/nowhere", local=str(tmp_path / "cache"), batch_size=1)
    assert not (tmp_path / "cache").exists()


def test_iterating_without_batch_size_says_what_to_do(remote: Path, tmp_path: Path):
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "c"))
    with pytest.raises(ConfigurationError, match="batch_size"):
        next(iter(ds))


def test_streams_exclude_remote(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="not both"):
        StreamingDataset(streams=[Stream(local=str(tmp_path))], remote="s3://b/d")


def test_a_launcher_that_disagrees_is_named(remote: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    ds = dataset(remote, tmp_path / "c", world_size=2)
    with pytest.raises(TopologyError, match="WORLD_SIZE"):
        len(ds)


SHM = "/dev/shm"  # noqa: S108 - where named POSIX shared memory shows on Linux


def test_no_shared_memory_is_used(remote: Path, tmp_path: Path):
    before = set(os.listdir(SHM)) if os.path.isdir(SHM) else set()
    ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4, num_workers=2))
    after = set(os.listdir(SHM)) if os.path.isdir(SHM) else set()
    assert not [name for name in after - before if "shardstream" in name or "_locals" in name]


def test_shards_are_let_go_after_their_last_use(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache", shuffle_block_size=60)
    samples = iter(ds)
    batch_size = 4
    first = [int(next(samples)["id"]) for _ in range(40 * batch_size)]
    reader = ds._prepare().reader
    assert reader is not None
    starts = reader.shard_starts

    def shard_list(ids: list[int]) -> list[int]:
        return [int(s) for s in np.searchsorted(starts, ids, side="right") - 1]

    def shards_of(ids: list[int]) -> set[int]:
        return set(shard_list(ids))

    held = set(reader.open.shards())
    rest = [int(sample["id"]) for sample in samples]
    assert sorted(first + rest) == list(range(SAMPLES))
    # Open mid-epoch: only shards the rest of the epoch reads, or the batch just read.
    assert held <= shards_of(rest) | shards_of(first[-batch_size:])
    assert len(held) < len(starts) - 1  # and not every shard
    # The epoch over, only shards last read in its final eighth stay mapped (for the next).
    order = first + rest
    rows = len(order) // batch_size
    last = {shard: k // batch_size for k, shard in enumerate(shard_list(order))}
    late = {shard for shard, row in last.items() if row >= rows * 7 // 8}
    assert set(reader.open.shards()) <= late


def test_a_resumed_run_reads_the_node_order_its_first_run_kept(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from shardstream.cache import STATE_FOLDER
    from shardstream.sampling import sequence

    full = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4))
    kept = sorted(p.name for p in (tmp_path / "c" / STATE_FOLDER / "plans").iterdir())
    assert len(kept) == 2  # py1e, two canonical nodes: one file each
    computed: list[int] = []
    original = sequence.node_order_at

    def node_order_at(*args: object, **kwargs: object) -> object:
        computed.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sequence, "node_order_at", node_order_at)
    resumed = dataset(remote, tmp_path / "c")
    resumed.load_state_dict(resumed.state_dict(100, from_beginning=True))
    again = StreamingDataLoader(resumed, batch_size=4)
    assert ids_of(again) == full[100:]
    assert computed == []  # both nodes' orders read back
    next_epoch = ids_of(again)  # a new epoch is computed, and replaces the old files
    assert sorted(next_epoch) == list(range(SAMPLES))
    assert computed
    now = sorted(p.name for p in (tmp_path / "c" / STATE_FOLDER / "plans").iterdir())
    assert len(now) == 2
    assert not set(now) & set(kept)


def test_a_local_only_dataset_keeps_no_node_order(remote: Path, tmp_path: Path):
    data = tmp_path / "data"
    shutil.copytree(remote, data)
    before = sorted(str(p) for p in data.rglob("*"))
    ds = StreamingDataset(local=str(data), batch_size=4, shuffle=True)
    assert sorted(epoch_ids(ds)) == list(range(SAMPLES))
    assert sorted(str(p) for p in data.rglob("*")) == before


def test_under_a_cache_limit_no_node_order_is_kept(remote: Path, tmp_path: Path):
    from shardstream.cache import STATE_FOLDER

    ds = dataset(remote, tmp_path / "c", cache_limit="10mb")
    assert sorted(epoch_ids(ds)) == list(range(SAMPLES))
    assert not (tmp_path / "c" / STATE_FOLDER / "plans").exists()
    unlimited = dataset(remote, tmp_path / "d")
    assert sorted(epoch_ids(unlimited)) == list(range(SAMPLES))
    assert (tmp_path / "d" / STATE_FOLDER / "plans").is_dir()  # the control


def test_run_files_of_data_read_in_place_go_to_a_private_cache_root(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "user"))
    data = write_dataset(tmp_path / "ds", 40)
    ds = StreamingDataset(local=str(data), batch_size=4)
    assert sorted(ids_of(StreamingDataLoader(ds, batch_size=4, num_workers=1))) == list(range(40))
    assert os.listdir(tmp_path / "user") == ["runs"]
    assert (tmp_path / "user").stat().st_mode & 0o777 == 0o700  # as a remote's default cache
