"""Without workers, batches read from the dataset's own iterator are what torch's iterator gives."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.loader import dataloader as dataloader_module
from shardstream.loader.direct_batches import direct_batches as direct_batches_of

ROWS = 300


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("table")
    for k in range(3):
        ids = np.arange(k * 100, (k + 1) * 100, dtype=np.int64)
        data = pa.table({"id": ids, "x": ids * 0.5, "text": [f"t{i}" for i in ids.tolist()]})
        pq.write_table(data, root / f"part-{k}.parquet", row_group_size=30)
    return root


def loader(table: Path, **kwargs: Any) -> StreamingDataLoader:
    ds = StreamingDataset(local=str(table), batch_size=32, shuffle=True, shuffle_seed=3)
    return StreamingDataLoader(ds, batch_size=32, **kwargs)


@pytest.fixture
def through_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch's own ``__next__`` for every batch (the reference)."""
    monkeypatch.setattr(dataloader_module, "direct_batches", lambda *args: None)


def epoch_and_states(table: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """An epoch's batches, the state after each, and the global RNG's state after."""
    torch.manual_seed(11)
    it = loader(table)
    batches, states = [], []
    for batch in it:
        batches.append(batch)
        states.append(it.state_dict())
    return batches, states, torch.get_rng_state()


def test_the_epoch_its_states_and_the_seed_drawn_equal_torch_s(
    table: Path, monkeypatch: pytest.MonkeyPatch
):
    calls: list[int] = []
    real = direct_batches_of

    def counted(*args: Any) -> Any:
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(dataloader_module, "direct_batches", counted)
    direct = epoch_and_states(table)
    assert calls == [True]  # the direct path was taken
    monkeypatch.setattr(dataloader_module, "direct_batches", lambda *args: None)
    torch_s = epoch_and_states(table)
    assert len(direct[0]) == len(torch_s[0]) == -(-ROWS // 32)
    for a, b in zip(direct[0], torch_s[0], strict=True):
        assert a.keys() == b.keys()
        assert torch.equal(a["id"], b["id"])
        assert a["id"].dtype == b["id"].dtype
        assert torch.equal(a["x"], b["x"])
        assert a["text"] == b["text"]
    assert direct[1] == torch_s[1]
    assert torch.equal(direct[2], torch_s[2])  # torch's iterator drew its seed as ever


def test_a_resumed_epoch_equals_torch_s(table: Path, monkeypatch: pytest.MonkeyPatch):
    def rest(direct: bool) -> list[list[int]]:
        if not direct:
            monkeypatch.setattr(dataloader_module, "direct_batches", lambda *args: None)
        first = loader(table)
        batches = iter(first)
        for _ in range(3):
            next(batches)
        state = first.state_dict()
        second = loader(table)
        second.load_state_dict(state)
        return [batch["id"].tolist() for batch in second]

    direct = rest(True)
    assert direct == rest(False)
    assert len(direct) == -(-ROWS // 32) - 3


def warned(table: Path) -> list[str]:
    it = loader(table)
    assert len(it) == -(-ROWS // 32)
    it._IterableDataset_len_called = 4  # type: ignore[assignment]  # len() said fewer
    got = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in it:  # not list(): it asks len() again
            got += 1
    assert got == -(-ROWS // 32)
    messages = [str(w.message) for w in caught if "Length of IterableDataset" in str(w.message)]
    return [re.sub(" at 0x[0-9a-f]+", "", message) for message in messages]


def test_more_batches_than_len_said_warn_as_torch_does(table: Path, request: Any):
    direct = warned(table)
    request.getfixturevalue("through_torch")
    assert direct == warned(table)
    assert len(direct) == -(-ROWS // 32) - 4


def profiled(table: Path) -> int:
    it = loader(table)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in it:
            pass
    return sum(1 for event in prof.events() if event.name.startswith("enumerate(DataLoader)"))


def test_a_profiler_sees_each_batch_fetched_as_with_torch(table: Path, request: Any):
    direct = profiled(table)
    request.getfixturevalue("through_torch")
    assert direct == profiled(table) >= -(-ROWS // 32)


def test_a_collate_fn_set_after_construction_is_called(table: Path):
    it = loader(table)
    seen: list[Any] = []
    passed = it.collate_fn

    def collate(batch: Any) -> Any:
        seen.append(batch)
        return passed(batch)

    it.collate_fn = collate
    assert len(list(it)) == len(seen) == -(-ROWS // 32)


def raised(table: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, BaseException]:
    real = StreamingDataset.iter_batches

    def failing(self: StreamingDataset, *args: Any, **kwargs: Any) -> Any:
        for number, batch in enumerate(real(self, *args, **kwargs)):
            if number == 2:
                raise OSError("the third batch's file went away")
            yield batch

    monkeypatch.setattr(StreamingDataset, "iter_batches", failing)
    got = 0
    try:
        for _ in loader(table):
            got += 1
    except OSError as exc:
        return got, exc
    raise AssertionError("no error")


def test_an_error_in_the_dataset_comes_out_unchanged(
    table: Path, monkeypatch: pytest.MonkeyPatch, request: Any
):
    direct = raised(table, monkeypatch)
    request.getfixturevalue("through_torch")
    reference = raised(table, monkeypatch)
    assert direct[0] == reference[0] == 2
    assert str(direct[1]) == str(reference[1]) == "the third batch's file went away"


def test_other_iterators_are_left_to_torch():
    assert direct_batches_of(iter([1, 2]), lambda batch: batch) is None
