"""The reader's bookkeeping over an epoch plan."""

from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tests.streaming_data import write_dataset

from shardstream import ReadPolicy, StreamingDataset
from shardstream.cache.range_gate import RangeGate
from shardstream.cache.shard_cache import ShardCache
from shardstream.cache.shard_files import ShardFiles
from shardstream.pipeline.fetch import last_uses, locate


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=40).filter(lambda s: sum(s) > 0),
    count=st.sampled_from([1, 700, 5000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_located_ids_agree_with_a_binary_search(sizes, count, seed):
    # A shuffled plan's ids over shards of any sizes, empty ones too: the shard of each id is
    # the last one starting at or before it, its index the id's distance from that start.
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = np.random.default_rng(seed).integers(0, int(starts[-1]), count).reshape(-1, 1)
    shards, local, needed, needed_at = locate(starts, ids)
    expected = np.searchsorted(starts, ids, side="right") - 1
    assert np.array_equal(shards, expected)
    assert np.array_equal(local, ids - starts[expected])
    flat = expected.reshape(-1).tolist()
    assert needed == list(dict.fromkeys(flat))  # each shard once, in order of first need
    assert needed_at == [flat.index(shard) for shard in needed]


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(np.int64, st.integers(0, 72), elements=st.integers(0, 9)),
    st.integers(1, 6),
)
def test_each_shard_is_done_after_the_last_row_that_uses_it(shards, width):
    done = last_uses(shards, width)  # rows of ``width``, the last one maybe short
    rows = [shards[at : at + width] for at in range(0, len(shards), width)]
    released = [shard for row in sorted(done) for shard in done[row]]
    assert sorted(released) == sorted(set(shards.tolist()))  # each shard once
    for row, finished in done.items():
        for shard in finished:
            assert shard in rows[row]
            assert all(shard not in later for later in rows[row + 1 :])


def _epoch_touches(dataset: StreamingDataset, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The shards the reader marks as used (``ShardCache.touch``) over one epoch."""
    touched: list[int] = []
    original = ShardCache.touch

    def touch(cache: ShardCache, shard: int) -> None:
        touched.append(shard)
        original(cache, shard)

    monkeypatch.setattr(ShardCache, "touch", touch)
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(200))
    monkeypatch.undo()
    return touched


def test_shards_are_marked_used_unless_just_fetched(tmp_path, monkeypatch):
    remote = write_dataset(tmp_path / "remote", 200, size_limit=1024)
    local = tmp_path / "cache"
    dataset = StreamingDataset(remote=str(remote), local=str(local), shuffle=True, batch_size=8)
    assert not list(local.glob("**/shard.*.mds"))  # nothing fetched by constructing
    assert _epoch_touches(dataset, monkeypatch) == []  # every file's time is its fetch's
    files = sorted(local.glob("**/shard.*.mds"))
    assert len(files) > 5
    for path in files:  # an old copy: the next epoch must mark each shard as used, once
        os.utime(path, (1_000_000, 1_000_000))
    touched = _epoch_touches(dataset, monkeypatch)
    assert sorted(touched) == list(range(len(files)))
    assert all(path.stat().st_mtime > 1_000_000 for path in files)


def _hold_ranges(state: str, holding, stop) -> None:
    with RangeGate(state).reading():  # another process's first batch, its ranges out
        holding.set()
        stop.wait(120)


def test_the_rest_of_an_epoch_waits_for_the_nodes_first_batch_ranges(tmp_path):
    remote = write_dataset(tmp_path / "remote", 200, size_limit=1024)
    local = tmp_path / "cache"
    policy = ReadPolicy(range_hold_s=120.0)
    dataset = StreamingDataset(
        remote=str(remote), local=str(local), shuffle=True, batch_size=8, read_policy=policy
    )
    context = multiprocessing.get_context("spawn")
    holding, stop = context.Event(), context.Event()
    state = os.path.join(os.path.realpath(local), ".shardstream")
    holder = context.Process(target=_hold_ranges, args=(state, holding, stop), daemon=True)
    holder.start()
    got: list[int] = []
    first = threading.Event()

    def read() -> None:
        for sample in dataset:
            got.append(int(sample["id"]))
            if len(got) == 8:
                first.set()

    reader = threading.Thread(target=read, daemon=True)
    try:
        assert holding.wait(60)
        reader.start()
        assert first.wait(60)  # the first batch does not wait
        reader.join(1.0)
        assert reader.is_alive()  # the rest does, while the ranges are out
        fetched = len(list(local.glob("**/shard.*.mds")))
        assert len(got) == 8
    finally:
        stop.set()
        holder.join(60)
    reader.join(120)
    assert sorted(got) == list(range(200))
    assert len(list(local.glob("**/shard.*.mds"))) > fetched


@pytest.mark.parametrize("ranges", [True, False])
def test_a_small_dataset_read_in_place_has_its_first_batch_read_with_pread(
    tmp_path, monkeypatch, ranges
):
    # Its shards are read whole when opened (in_place_whole_bytes); a first batch reads its
    # samples with pread instead of waiting for whole shards, which are opened behind it.
    root = write_dataset(tmp_path / "ds", 600, size_limit=4096, payload=100)
    opened: list[tuple[int, str]] = []
    open_files = ShardFiles.open

    def recording(self, entry, schema, *, shared_bytes=None):
        view = open_files(self, entry, schema, shared_bytes=shared_bytes)
        opened.append((int(entry.data_file.basename.split(".")[1]), type(view).__name__))
        return view

    monkeypatch.setattr(ShardFiles, "open", recording)
    policy = ReadPolicy(read_whole_bytes=0, first_batch_ranges=ranges)
    dataset = StreamingDataset(local=str(root), shuffle=True, batch_size=16, read_policy=policy)
    samples = list(dataset)
    assert sorted(sample["id"] for sample in samples) == list(range(600))
    assert all(bytes(s["payload"]) == bytes([s["id"] % 251]) * 100 for s in samples)
    shards = len(list(root.glob("shard.*.mds")))
    first = [shard for shard, kind in opened if kind == "MDSFileView"]
    whole = [shard for shard, kind in opened if kind == "MDSShardView"]
    assert sorted(whole) == list(range(shards))  # each shard read whole once
    if ranges:  # the first batch's shards, with pread, each once, before any read whole
        assert 1 <= len(first) == len(set(first)) <= 16
        assert [kind for _, kind in opened[: len(first)]] == ["MDSFileView"] * len(first)
    else:
        assert first == []
    assert sorted(sample["id"] for sample in dataset) == list(range(600))  # the next epoch
