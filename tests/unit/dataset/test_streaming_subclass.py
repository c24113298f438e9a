"""A StreamingDataset subclass that transforms samples in __getitem__ or get_item.

As with the reference, iteration (alone and through StreamingDataLoader workers) goes through the
override, so the common "subclass and transform" pattern of mosaicml-streaming keeps working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataLoader, StreamingDataset

SAMPLES = 40


class Doubled(StreamingDataset):
    def __getitem__(self, sample_id: int) -> dict[str, Any]:
        sample = super().__getitem__(sample_id)
        return {"id": sample["id"], "twice": 2 * int(sample["id"])}


class Tagged(StreamingDataset):
    def get_item(self, sample_id: int) -> dict[str, Any]:
        return {**super().get_item(sample_id), "tag": "seen"}


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote") / "ds", SAMPLES)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_overridden_getitem_makes_every_sample_once(remote: Path, tmp_path: Path, workers):
    ds = Doubled(remote=str(remote), local=str(tmp_path / "c"), batch_size=4, shuffle=True)
    plain = StreamingDataset(remote=str(remote), local=str(tmp_path / "p"), batch_size=4,
                             shuffle=True)  # fmt: skip
    ids, twice = [], []
    for batch in StreamingDataLoader(ds, batch_size=4, num_workers=workers):
        ids.extend(batch["id"].tolist())
        twice.extend(batch["twice"].tolist())
    assert sorted(ids) == list(range(SAMPLES))
    assert twice == [2 * i for i in ids]
    assert ids == [int(s["id"]) for s in plain]  # the same order as without the override


def test_an_overridden_get_item_is_used_by_iteration(remote: Path, tmp_path: Path):
    ds = Tagged(remote=str(remote), local=str(tmp_path / "c"), batch_size=4)
    samples = list(ds)
    assert len(samples) == SAMPLES
    assert {s["tag"] for s in samples} == {"seen"}
