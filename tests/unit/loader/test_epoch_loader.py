"""Epochs of a StreamingDataLoader, padding cut, resumed from a state dict mid-epoch."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.loader.epoch_loader import ConverterDataLoader
from shardstream.loader.epoch_tail import EpochTail
from shardstream.sampling import Topology

ROWS, BATCH = 23, 5  # five batches an epoch, the last with two rows of padding


def make(data: Path, epochs: int | None) -> ConverterDataLoader:
    dataset = StreamingDataset(local=str(data), batch_size=BATCH, shuffle=True, shuffle_seed=4)
    tail = EpochTail.of(epoch_size=ROWS, batch_size=BATCH, topology=Topology())
    return ConverterDataLoader(StreamingDataLoader(dataset, batch_size=BATCH), epochs, tail)


def ids(batches: list[dict[str, object]]) -> list[int]:
    return [int(i) for batch in batches for i in batch["id"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("taken", [0, 2, 4, 5, 7, 10])
def test_a_resumed_loader_yields_the_rest_once(tmp_path: Path, taken: int):
    data = write_dataset(tmp_path / "ds", ROWS)
    whole = ids(list(make(data, 2)))
    assert collections.Counter(whole) == dict.fromkeys(range(ROWS), 2)
    loader = make(data, 2)
    running = iter(loader)
    first = [next(running) for _ in range(taken)]
    state = loader.state_dict()
    loader.close()
    resumed = make(data, 2)
    resumed.load_state_dict(state)
    assert ids(first) + ids(list(resumed)) == whole
