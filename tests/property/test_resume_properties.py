"""Resuming at any batch of an epoch reads the uninterrupted run's tail, through the pipeline.

A run stopped after ``k`` device batches saves its state (the pipeline's stages' state and
the reference's keys); a new dataset loads it and reads on. Its batches must be the
uninterrupted run's from batch ``k`` on, and the next epoch whole, with 0 or 2 DataLoader
workers, shuffled or not, over every batching method one stream takes.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from tests.streaming_data import write_dataset

from shardstream import StreamingDataLoader, StreamingDataset

SAMPLES = 70

#: A directory per example: datasets of one run share the node's cache as a job's ranks do.
_fresh = itertools.count()


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote") / "ds", SAMPLES, size_limit=500)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("caches")


@st.composite
def runs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "batch_size": draw(st.sampled_from([1, 3, 4, 8])),
        "shuffle": draw(st.booleans()),
        "shuffle_algo": draw(st.sampled_from(["py1e", "py1s", "py1br", "naive"])),
        "shuffle_seed": draw(st.integers(0, 2**32)),
        "num_canonical_nodes": draw(st.integers(1, 4)),
        "batching_method": draw(
            st.sampled_from(["random", "random", "stratified", "per_stream", "device_per_stream"])
        ),
    }


def batches(loader: StreamingDataLoader) -> list[list[int]]:
    return [[int(i) for i in batch["id"]] for batch in loader]


def check_resume(remote: Path, scratch: Path, run: dict[str, Any], workers: int, k: int) -> None:
    local = scratch / str(next(_fresh))

    def loader() -> StreamingDataLoader:
        ds = StreamingDataset(remote=str(remote), local=str(local), **run)
        return StreamingDataLoader(ds, batch_size=run["batch_size"], num_workers=workers)

    whole = loader()
    expected = [batches(whole), batches(whole)]  # an epoch and the next
    k = min(k, len(expected[0]))
    note(f"{len(expected[0])} batches, stopped after {k}")
    stopped = loader()
    read = [[int(i) for i in batch["id"]] for batch in itertools.islice(iter(stopped), k)]
    state = stopped.state_dict()
    assert read == expected[0][:k]
    assert state["stages"] == {"batch": k}
    resumed = loader()
    resumed.load_state_dict(state)
    rest = batches(resumed)
    if k < len(expected[0]) or state["sample_in_epoch"] < SAMPLES:
        # (At the end of an epoch whose remainder no whole batch holds: an empty epoch.)
        assert rest == expected[0][k:]
        rest = batches(resumed)
    assert rest == expected[1]  # a state at the epoch's end resumes the next


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(run=runs(), k=st.integers(0, 80))
def test_resuming_in_process_reads_the_uninterrupted_tail(
    remote: Path, scratch: Path, run: dict[str, Any], k: int
) -> None:
    check_resume(remote, scratch, run, 0, k)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(run=runs(), k=st.integers(0, 30))
def test_resuming_with_two_workers_reads_the_uninterrupted_tail(
    remote: Path, scratch: Path, run: dict[str, Any], k: int
) -> None:
    check_resume(remote, scratch, run, 2, k)
