"""The one-id pipeline: a plan of one id a step, located, opened and decoded in this thread.

``ds[i]`` of a ``StreamingDataset``, a ``LocalDataset`` and a ``ParquetDataset``, and a
``LocalDataset``'s iteration, read through these stages and no path of their own.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.streaming_data import write_dataset

from shardstream import LocalDataset, StreamingDataset
from shardstream.pipeline.locate import Locate
from shardstream.pipeline.plan import IdPlan
from shardstream.pipeline.stage import drain
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.layout_index import local_layouts


def test_an_id_plan_hands_on_one_id_a_step_and_resumes_at_its_state():
    plan = IdPlan(range(3, 7))
    assert [plan.next(), plan.next()] == [3, 4]
    assert plan.state() == {"batch": 2}
    plan.reset({"batch": 3})
    assert plan.next() == 6
    with pytest.raises(StopIteration):
        plan.next()
    plan.reset({"batch": 99})  # past the end: nothing left, not an error
    with pytest.raises(StopIteration):
        plan.next()
    plan.reset()
    assert plan.next() == 3
    assert list(drain(IdPlan([9]))) == [9]
    plan = IdPlan((5, 1, 5))
    assert list(plan) == [5, 1, 5]  # iterating it hands on the rest of the plan
    assert plan.state() == {"batch": 3}
    plan.reset({"batch": 2})
    assert list(plan) == [5]


@pytest.fixture
def mds(tmp_path: Path) -> Path:
    """24 samples over several shards, with an empty shard's worth of edge cases at the ends."""
    return write_dataset(tmp_path / "mds", 24, size_limit=300)


def _stages(ds: LocalDataset, ids: list[int]) -> Locate:
    assert len(ds)  # loads the index
    return Locate(IdPlan(ids), ds._start_list, ds._getters, ds._open)


def test_the_stages_hand_on_the_samples_of_the_plan_and_resume_at_their_state(mds: Path):
    ds = LocalDataset(mds)
    assert len(ds.shards) > 3
    ids = [23, 0, 7, 7, 12, 1]
    stage = _stages(ds, ids)
    got = [int(stage.next()["id"]) for _ in range(3)]
    assert got == ids[:3]
    assert stage.state() == {"batch": 3}
    stage.reset(stage.state())
    assert [int(sample["id"]) for sample in drain(stage)] == ids[3:]
    stage.reset({"batch": 1})
    assert int(stage.next()["id"]) == 0
    stage.reset()
    assert [int(sample["id"]) for sample in drain(stage)] == ids


def test_a_shard_let_go_is_opened_again_on_its_next_read(mds: Path):
    ds = LocalDataset(mds)
    assert ds[5]["id"] == 5
    shard = int(np.searchsorted(ds._starts, 5, side="right")) - 1
    assert ds._getters[shard] is not None
    ds.release(shard)
    assert ds._getters[shard] is None
    assert ds[5]["id"] == 5  # opened again
    ds.close()
    assert all(get is None for get in ds._getters)
    assert [ds[i]["id"] for i in (23, 0, 5)] == [23, 0, 5]


def test_a_pickled_dataset_reads_through_its_own_stage(mds: Path):
    ds = LocalDataset(mds)
    assert ds[3]["id"] == 3
    copy = pickle.loads(pickle.dumps(ds))
    assert all(get is None for get in copy._getters)  # nothing open comes along
    assert [copy[i]["id"] for i in (3, 23, -1)] == [3, 23, 23]
    fresh = pickle.loads(pickle.dumps(LocalDataset(mds)))  # pickled before loading its index
    assert fresh[-24]["id"] == 0


def test_threads_reading_one_dataset_get_their_own_samples(mds: Path):
    ds = LocalDataset(mds)
    errors: list[AssertionError] = []

    def read(offset: int) -> None:
        try:
            for i in range(offset, offset + 200):
                assert ds[i % 24]["id"] == i % 24
        except AssertionError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(k * 7,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


# --- every entrance goes through the stages ----------------------------------------------------


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the locate stage's reads of one id (a spy on the real stage)."""
    counts = {"read": 0}
    read = Locate.read

    def counted_read(self: Locate, sample_id: int) -> dict[str, Any]:
        counts["read"] += 1
        return read(self, sample_id)

    monkeypatch.setattr(Locate, "read", counted_read)
    return counts


def _parquet(root: Path) -> ParquetDataset:
    root.mkdir()
    for part in range(2):
        ids = np.arange(part * 10, part * 10 + 10, dtype=np.int64)
        pq.write_table(pa.table({"id": ids}), root / f"part-{part}.parquet", row_group_size=4)
    return ParquetDataset(str(root), local_layouts(str(root)))


def _entrances(mds: Path, tmp_path: Path) -> Iterator[tuple[str, Callable[[int], Any], int]]:
    yield "StreamingDataset", StreamingDataset(local=str(mds), batch_size=1).__getitem__, 24
    yield "LocalDataset", LocalDataset(mds).__getitem__, 24
    yield "ParquetDataset", _parquet(tmp_path / "parquet").__getitem__, 20


def test_every_random_access_reads_through_the_locate_stage(
    mds: Path, tmp_path: Path, counted: dict[str, int]
):
    for name, get, size in _entrances(mds, tmp_path):
        before = counted["read"]
        ids = [size - 1, 0, 3, -1]
        assert [int(get(i)["id"]) for i in ids] == [size - 1, 0, 3, size - 1], name
        assert counted["read"] - before == len(ids), name
        if name != "ParquetDataset":  # the map-style datasets of the reference take lists too
            before = counted["read"]
            assert [int(sample["id"]) for sample in get([1, 2])] == [1, 2]  # type: ignore[arg-type]
            assert counted["read"] - before == 2, name


def test_a_local_datasets_iteration_goes_through_the_stages(mds: Path, counted: dict[str, int]):
    samples = list(LocalDataset(mds))
    assert [int(sample["id"]) for sample in samples] == list(range(24))
    assert counted["read"] == 24


def test_out_of_range_ids_are_index_errors_at_every_entrance(mds: Path, tmp_path: Path):
    for name, get, size in _entrances(mds, tmp_path):
        for bad in (size, -size - 1, 10**9):
            with pytest.raises(IndexError):
                get(bad)
        assert int(get(-size)["id"]) == 0, name
