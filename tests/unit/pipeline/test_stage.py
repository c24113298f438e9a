"""The stage contract: ``next``, ``state`` and ``reset(state)``, over a real dataset's reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.pipeline.column_batch import BatchRefs, ColumnBatch
from shardstream.pipeline.decode import Columns, Samples
from shardstream.pipeline.plan import Plan
from shardstream.pipeline.stage import drain


def test_a_plan_hands_on_device_batches_and_resumes_at_its_state():
    plan = Plan(np.arange(10, dtype=np.int64), 4)
    assert plan.next().tolist() == [0, 1, 2, 3]
    assert plan.state() == {"batch": 1}
    assert plan.rest().tolist() == list(range(4, 10))
    assert plan.next().tolist() == [4, 5, 6, 7]
    assert plan.next().tolist() == [8, 9]  # the last one short
    with pytest.raises(StopIteration):
        plan.next()
    plan.reset({"batch": 2})
    assert plan.next().tolist() == [8, 9]
    plan.reset({"batch": 99})  # past the end: nothing left, not an error
    assert plan.rest().size == 0
    plan.reset()
    assert plan.next().tolist() == [0, 1, 2, 3]


def _epoch(tmp_path: Path, **options: Any) -> tuple[Any, Any]:
    remote = write_dataset(tmp_path / "remote", 90, size_limit=600)
    ds = StreamingDataset(
        remote=str(remote), local=str(tmp_path / "cache"), batch_size=4, shuffle=True, **options
    )
    reader, plan, _ = ds._begin_epoch()
    return reader, plan


def _ids(batch: Any) -> list[int]:
    if isinstance(batch, ColumnBatch):
        column: Any = batch.columns[batch.names.index("id")]
        return [int(i) for i in column]
    if isinstance(batch, BatchRefs):
        return [int(i) for i in batch.ids]
    return [int(sample["id"]) for sample in batch]


@pytest.mark.parametrize("stop", [0, 1, 5, 22])
def test_a_stage_reset_to_its_state_hands_on_the_rest_of_the_epoch(tmp_path: Path, stop: int):
    reader, plan = _epoch(tmp_path)
    whole = [_ids(batch) for batch in reader.columns(plan.ids, plan.batch_size, predownload=8)]
    assert len(whole) == 23  # 90 samples, batches of 4
    stage = reader.columns_stage(plan.ids, plan.batch_size, predownload=8)
    assert isinstance(stage, Columns)
    head = [_ids(stage.next()) for _ in range(stop)]
    state = stage.state()
    assert state == {"batch": stop}
    assert state == {"batch": int(state["batch"])}  # plain: it goes into resume state as is
    stage.close()  # a reader that stops: threads go; the stage may be reset after
    again = reader.columns_stage(plan.ids, plan.batch_size, predownload=8)
    again.reset(state)
    assert head + [_ids(batch) for batch in drain(again)] == whole


def test_samples_reset_to_a_state_of_another_stage_agree(tmp_path: Path):
    # Every stage counts device batches of the plan: one stage's state resumes another.
    reader, plan = _epoch(tmp_path)
    columns = reader.columns_stage(plan.ids, plan.batch_size, predownload=8)
    first = [_ids(columns.next()) for _ in range(3)]
    samples = Samples(reader.fetch(plan.ids, plan.batch_size, predownload=8))
    samples.reset(columns.state())
    columns.close()
    rest = [_ids(batch) for batch in drain(samples)]
    flat = [i for batch in first + rest for i in batch]
    assert flat == plan.ids.tolist()
