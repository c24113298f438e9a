"""Groups of shuffled samples read from their files, each while the one before is used."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.mds_shards import SCHEMA, corrupt_shard, file_of, mapped_view, sample, shard_bytes
from tests.memory import HAS_PROC_STATUS, mapped_kib

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.errors import ShardFormatError
from shardstream.format.mds_file import SampleFile, SampleRuns, ShardFile, read_samples
from shardstream.pipeline.policy import ReadPolicy
from shardstream.pipeline.read_ahead import GroupReads
from shardstream.writer import MDSWriter

Picks = list[tuple[int, int]]


def _sources(tmp_path: Path, sizes: list[int]) -> list[SampleFile]:
    sources = []
    for number, count in enumerate(sizes):
        path = tmp_path / f"shard{number}.mds"
        path.write_bytes(shard_bytes([sample(k + 100 * number) for k in range(count)]))
        sources.append(file_of(mapped_view(path, count), ShardFile.open(str(path))))
    return sources


def _runs(sources: list[SampleFile], picks: Picks) -> SampleRuns:
    which = np.asarray([shard for shard, _ in picks], np.int64)
    indices = np.asarray([index for _, index in picks], np.int64)
    return SampleRuns(sources, which, indices)


def _same(got: list[Any], expected: list[Any]) -> bool:
    return len(got) == len(expected) and all(
        np.array_equal(a, b) and type(a) is type(b) for a, b in zip(got, expected, strict=True)
    )


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=3),
    groups=st.lists(
        st.lists(
            st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=9),
            min_size=1,
            max_size=3,
        ),
        max_size=5,
    ),
    ahead=st.booleans(),
    uring=st.booleans(),
)
def test_batches_come_out_in_order_as_read_samples_decodes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes, groups, ahead, uring
):
    sources = _sources(tmp_path, sizes)
    reads = GroupReads(ahead=ahead and uring)
    got, expected = [], []
    try:
        for number, group in enumerate(groups):
            batches = [[(s % len(sizes), k % sizes[s % len(sizes)]) for s, k in b] for b in group]
            picks = [pick for batch in batches for pick in batch]
            for batch in batches:
                which = np.asarray([s for s, _ in batch], np.int64)
                indices = np.asarray([k for _, k in batch], np.int64)
                expected.append(read_samples(sources, which, indices))
            widths = [len(batch) for batch in batches]
            got += list(reads.start(_runs(sources, picks), widths, wait=number == 0))
        got += list(reads.finish())
    finally:
        reads.close()
    assert len(got) == len(expected)
    for made, columns in zip(got, expected, strict=True):
        assert made.names == SCHEMA.names
        for column, other in zip(made.columns, columns, strict=True):
            assert _same(list(cast(Any, column)), list(other))


def test_a_file_cut_short_is_named_when_its_group_comes_out(tmp_path: Path):
    [source] = _sources(tmp_path, [6])
    short = tmp_path / "short.mds"
    short.write_bytes((tmp_path / "shard0.mds").read_bytes()[:-5])
    sources = [SampleFile(ShardFile.open(str(short)), source.offsets, source.schema, source.source)]
    reads = GroupReads()
    try:
        assert list(reads.start(_runs(sources, [(0, 1), (0, 0)]), [2])) == []  # read ahead
        assert len(list(reads.start(_runs(sources, [(0, 5)]), [1]))) == 1  # the first group
        with pytest.raises(ShardFormatError, match=r"shard0.mds: read \d+ of \d+ bytes at "):
            list(reads.finish())  # the second group: its last sample is cut short
    finally:
        reads.close()


def test_a_corrupt_sample_is_named_after_its_shard_was_let_go(tmp_path: Path):
    path = corrupt_shard(tmp_path / "shard.mds")
    view = mapped_view(path, 6)
    reads = GroupReads()
    try:
        runs = _runs([file_of(view, ShardFile.open(str(path)))], [(0, 4), (0, 1)])
        assert list(reads.start(runs, [2])) == []
        view.release()  # as a reader lets go of a shard once the plan is past it
        with pytest.raises(ShardFormatError, match=rf"{path}, sample 4: cannot decode"):
            list(reads.finish())
    finally:
        reads.close()


def test_closing_stops_the_reading_thread(tmp_path: Path):
    sources = _sources(tmp_path, [4])
    reads = GroupReads()
    list(reads.start(_runs(sources, [(0, 2), (0, 0)]), [2]))
    list(reads.finish())
    reads.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("shardstream-read")]


# --- an epoch through the loader ----------------------------------------------------------------


def _tokens(root: Path, count: int = 6144) -> Path:
    """``count`` samples of 4 KiB of tokens, in two shards of ~12 MiB (mapped, not read whole)."""
    columns = {"id": "int", "tokens": "ndarray:uint16:2048"}
    with MDSWriter(out=str(root), columns=columns, size_limit=16 << 20) as writer:
        for k in range(count):
            writer.write({"id": k, "tokens": np.full(2048, k % 65521, np.uint16)})
    return root


def _epoch(
    root: Path, local: Path, shuffle: bool = True, policy: ReadPolicy | None = None
) -> tuple[list[int], int]:
    """The ids of one loader epoch, and the most of the shards that was resident (KiB)."""
    dataset = StreamingDataset(
        remote=str(root), local=str(local), shuffle=shuffle, batch_size=256, read_policy=policy
    )
    grown, ids = 0, []
    for batch in StreamingDataLoader(dataset, batch_size=256, num_workers=0):
        tokens = batch["tokens"].numpy()
        assert (tokens == (batch["id"].numpy() % 65521)[:, None]).all()
        ids += batch["id"].tolist()
        grown = max(grown, mapped_kib(str(local)))
    return ids, grown


@pytest.mark.skipif(not HAS_PROC_STATUS, reason="reads Linux's /proc")
@pytest.mark.parametrize("uring", ["1", "0"])
def test_a_shuffled_epoch_past_the_budget_maps_nothing_and_reads_what_the_mapping_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uring: str
):
    root = _tokens(tmp_path / "data")
    policy = ReadPolicy(read_ahead=uring == "1")
    mapped_ids, mapped_grown = _epoch(root, tmp_path / "a", policy=policy)  # within the budget
    assert sorted(mapped_ids) == list(range(6144))
    assert mapped_ids != sorted(mapped_ids)
    assert mapped_grown > 12 << 10, mapped_grown  # KiB: read from the mappings, pages stay
    past = policy.replace(mapped_read_bytes=8 << 20)  # past it after one shard
    ids, grown = _epoch(root, tmp_path / "b", policy=past)
    assert ids == mapped_ids  # the same order, the same values (checked batch by batch)
    assert grown < 1 << 10, grown  # KiB: the offset tables; 24 MiB were read
