"""Resume state is the read pipeline's state: the state dict's ``stages``, reset on resuming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import ids_of, write_dataset

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.cache import EpochStart
from shardstream.dataset.resume_point import Position, ResumePoint
from shardstream.errors import ConfigurationError
from shardstream.pipeline.column_batch import ColumnBatch

SAMPLES = 90


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote") / "ds", SAMPLES, size_limit=600)


def dataset(remote: Path, local: Path, **kwargs: Any) -> StreamingDataset:
    options: dict[str, Any] = {"batch_size": 4, "shuffle": True, "num_canonical_nodes": 2}
    return StreamingDataset(remote=str(remote), local=str(local), **{**options, **kwargs})


def batch_ids(batch: Any) -> list[int]:
    assert isinstance(batch, ColumnBatch)
    column: Any = batch.columns[batch.names.index("id")]
    return [int(i) for i in column]


@pytest.mark.parametrize("read", [0, 1, 7, 22])
def test_the_saved_state_is_the_state_of_the_pipeline_that_read_as_far(
    remote: Path, tmp_path: Path, read: int
):
    loader = StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4)
    batches = iter(loader)
    for _ in range(read):
        next(batches)
    state = loader.state_dict()
    # The pipeline of the same epoch, driven as far by hand: its stages' state is the saved one.
    reader, plan, start, _ = dataset(remote, tmp_path / "c")._begin_epoch()
    stage = reader.columns_stage(plan.ids, plan.batch_size, predownload=8)
    stage.reset(start)
    for _ in range(read):
        stage.next()
    stage.close()
    assert state["stages"] == stage.state() == {"batch": read}
    assert state["sample_in_epoch"] == 4 * read


@pytest.mark.parametrize("read", [0, 3, 22])
def test_a_resumed_epoch_is_the_fresh_epoch_s_pipeline_reset_to_the_saved_state(
    remote: Path, tmp_path: Path, read: int
):
    fresh, fresh_plan, fresh_start, _ = dataset(remote, tmp_path / "c")._begin_epoch()
    assert fresh_start == {"batch": 0}
    saved = dataset(remote, tmp_path / "c").state_dict(4 * read, from_beginning=True)
    resumed = dataset(remote, tmp_path / "c")
    resumed.load_state_dict(saved)
    reader, plan, start, _ = resumed._begin_epoch()
    assert start == saved["stages"] == {"batch": read}
    assert plan.ids.tolist() == fresh_plan.ids.tolist()  # no skip computed: the plan is whole
    whole = [batch_ids(b) for b in fresh.batches(plan.ids, 4, predownload=8, for_worker=False)]
    rest = reader.batches(plan.ids, 4, predownload=8, for_worker=False, state=start)
    assert [batch_ids(batch) for batch in rest] == whole[read:]


def test_each_worker_resumes_the_batches_its_turn_gives_it():
    # After 5 batches of a rank, its 2 workers read batches 5, 7, 9 ... and 6, 8, 10 ...: in a
    # fresh epoch worker 1 read 5, 7, 9 (its batches 2, 3, 4) and worker 0 read 6, 8, 10 (3, 4,
    # 5).
    point = ResumePoint.of(EpochStart(3, 5 * 8 + 2), 8, "random")
    assert (point.epoch, point.offset, point.batch) == (3, 2, 5)
    assert point.layout == EpochStart(3, 2)
    assert point.for_worker(0, 2) == (1, {"batch": 2})
    assert point.for_worker(1, 2) == (0, {"batch": 3})
    assert point.for_worker(0, 1) == (0, {"batch": 5})
    # The other batching methods resume at the start of the step the place falls in.
    assert ResumePoint.of(EpochStart(0, 5 * 8 + 2), 8, "stratified").layout == EpochStart(0, 0)
    assert Position(0, 42).stages(8, 90) == {"batch": 5}
    assert Position(0, 90).stages(8, 90) == {"batch": 12}  # the end: its short step counts
    assert Position(0, 42).stages(0, 90) is None


def test_resuming_within_a_step_reads_the_rest_of_the_epoch(remote: Path, tmp_path: Path):
    full = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4))
    state = dataset(remote, tmp_path / "c").state_dict(10, from_beginning=True)
    assert state["stages"] == {"batch": 2}  # and 2 samples of the third: random batching
    resumed = dataset(remote, tmp_path / "c")
    resumed.load_state_dict(state)
    assert [int(sample["id"]) for sample in resumed] == full[10:]


@pytest.mark.parametrize(
    ("stages", "pattern"),
    [
        ({"batch": 3}, r"stages is \{'batch': 3\}, but its sample_in_epoch 8 is 2 global"),
        ({"batch": -1}, r"stages is \{'batch': -1\}; it must be"),
        ({"batch": True}, r"stages is \{'batch': True\}; it must be"),
        ({"batch": 2, "sample": 0}, r"it must be \{'batch': k\}"),
        ([2], r"stages is \[2\]; it must be"),
    ],
)
def test_a_state_whose_stages_disagree_with_its_place_is_refused(
    remote: Path, tmp_path: Path, stages: Any, pattern: str
):
    state = dataset(remote, tmp_path / "c").state_dict(8, from_beginning=True)
    assert state["stages"] == {"batch": 2}
    with pytest.raises(ConfigurationError, match=pattern):
        dataset(remote, tmp_path / "c").load_state_dict({**state, "stages": stages})


def test_a_state_without_stages_resumes_from_its_sample_count(remote: Path, tmp_path: Path):
    full = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4))
    state = dataset(remote, tmp_path / "c").state_dict(12, from_beginning=True)
    del state["stages"]  # as the reference, and older shardstream, write it
    resumed = dataset(remote, tmp_path / "c")
    resumed.load_state_dict(state)
    assert ids_of(StreamingDataLoader(resumed, batch_size=4)) == full[12:]
