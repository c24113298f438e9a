"""A loader's place counts the samples the dataset handed over, whatever collate_fn makes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch

from shardstream import MDSWriter, StreamingDataLoader, StreamingDataset

SAMPLES = 203
BATCH = 8
TAKEN = 5  # batches read before the state is saved


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Columns come sorted: a JSON list first, then a JSON dict, then the id."""
    root = tmp_path_factory.mktemp("remote") / "ds"
    columns = {"a_tags": "json", "b_meta": "json", "id": "int"}
    with MDSWriter(out=str(root), columns=columns, size_limit=1500) as writer:
        for i in range(SAMPLES):
            writer.write({"a_tags": [i, -i, 2 * i], "b_meta": {"i": i, "j": -i}, "id": i})
    return root


@pytest.fixture(scope="module")
def dict_first(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON dict column first (two keys: fewer than a batch's samples)."""
    root = tmp_path_factory.mktemp("remote") / "ds"
    with MDSWriter(out=str(root), columns={"a_meta": "json", "id": "int"}) as writer:
        for i in range(SAMPLES):
            writer.write({"a_meta": {"i": i, "j": -i}, "id": i})
    return root


def loader(remote: Path, local: Path, workers: int, **kwargs: Any) -> StreamingDataLoader:
    dataset = StreamingDataset(remote=str(remote), local=str(local), batch_size=BATCH, shuffle=True)
    kwargs.setdefault("batch_size", BATCH)
    return StreamingDataLoader(dataset, num_workers=workers, **kwargs)


def epoch_order(remote: Path, local: Path, workers: int) -> list[int]:
    """Every id of a whole epoch in the order the loader yields them, uninterrupted."""
    return torch.cat([batch["id"] for batch in loader(remote, local, workers)]).tolist()


def rest_after(remote: Path, local: Path, workers: int, state: dict[str, Any]) -> list[int]:
    """The ids a loader resumed from ``state`` yields, to the end of the epoch."""
    resumed = loader(remote, local, workers)
    resumed.load_state_dict(state)
    return list(itertools.chain.from_iterable(b["id"].tolist() for b in resumed))


def ids_of_samples(samples: list[dict[str, Any]]) -> list[int]:
    return [int(sample["id"]) for sample in samples]


def id_sum(samples: list[dict[str, Any]]) -> int:
    return sum(ids_of_samples(samples))


class Opaque:
    """A batch object without ``len()``, as a model's custom batch class might be."""

    def __init__(self, samples: list[dict[str, Any]]) -> None:
        self.ids = ids_of_samples(samples)


def sample_id(sample: dict[str, Any]) -> int:
    return int(sample["id"])


# collate_fn -> the ids of a batch it made (None: the batch does not say)
COLLATES: dict[str, tuple[Any, Any]] = {
    "default collate, a JSON list column first": (None, lambda b: b["id"].tolist()),
    "a list of per-sample dicts": (list, ids_of_samples),
    "a scalar": (id_sum, None),
    "an object without len()": (Opaque, lambda b: b.ids),
}


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("collate", list(COLLATES))
def test_a_state_resumes_after_the_samples_received_whatever_collate_fn_returns(
    remote: Path, tmp_path: Path, workers: int, collate: str
):
    order = epoch_order(remote, tmp_path / "c", workers)
    collate_fn, ids_of = COLLATES[collate]
    kwargs = {} if collate_fn is None else {"collate_fn": collate_fn}
    first = loader(remote, tmp_path / "c", workers, **kwargs)
    batches = iter(first)
    taken = [next(batches) for _ in range(TAKEN)]
    state = first.state_dict()
    assert first.num_samples_yielded == TAKEN * BATCH
    assert state["sample_in_epoch"] == TAKEN * BATCH
    if ids_of is not None:  # the user's batches are what collate_fn returned
        assert list(itertools.chain.from_iterable(map(ids_of, taken))) == order[: TAKEN * BATCH]
    else:
        assert taken == [sum(order[n * BATCH : (n + 1) * BATCH]) for n in range(TAKEN)]
    assert rest_after(remote, tmp_path / "c", workers, state) == order[TAKEN * BATCH :]


@pytest.mark.parametrize("workers", [0, 2])
def test_without_batching_each_item_is_one_sample(remote: Path, tmp_path: Path, workers: int):
    order = epoch_order(remote, tmp_path / "c", workers)
    first = loader(remote, tmp_path / "c", workers, batch_size=None)
    items = iter(first)
    taken = [next(items) for _ in range(TAKEN * BATCH)]
    assert isinstance(taken[0], dict)
    assert set(taken[0]) == {"a_tags", "b_meta", "id"}
    # Workers hand over whole device batches, in turn: the first items are the first batches.
    assert [int(item["id"]) for item in taken] == order[: TAKEN * BATCH]
    state = first.state_dict()
    assert state["sample_in_epoch"] == TAKEN * BATCH
    assert rest_after(remote, tmp_path / "c", workers, state) == order[TAKEN * BATCH :]


def test_arguments_given_by_position_count_as_given_by_name(remote: Path, tmp_path: Path):
    order = epoch_order(remote, tmp_path / "c", 2)
    dataset = StreamingDataset(
        remote=str(remote), local=str(tmp_path / "c"), batch_size=BATCH, shuffle=True
    )
    first = StreamingDataLoader(dataset, None, False, None, None, 2)  # batch_size=None
    items = iter(first)
    taken = [int(next(items)["id"]) for _ in range(TAKEN * BATCH + 3)]
    assert taken == order[: TAKEN * BATCH + 3]
    state = first.state_dict()
    assert state["sample_in_epoch"] == TAKEN * BATCH + 3
    assert rest_after(remote, tmp_path / "c", 2, state) == order[TAKEN * BATCH + 3 :]


@pytest.mark.parametrize("workers", [0, 2])
def test_without_batching_a_collate_fn_gets_one_sample_at_a_time(
    remote: Path, tmp_path: Path, workers: int
):
    first = loader(remote, tmp_path / "c", workers, batch_size=None, collate_fn=sample_id)
    items = iter(first)
    taken = [next(items) for _ in range(12)]
    assert all(isinstance(item, int) for item in taken)
    assert first.state_dict()["sample_in_epoch"] == 12


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("workers", [0, 2])
def test_drop_last_with_a_dict_column_first_drops_only_the_short_batch(
    dict_first: Path, tmp_path: Path, workers: int
):
    whole, rest = divmod(SAMPLES, BATCH)
    kept = loader(dict_first, tmp_path / "c", workers, drop_last=True)
    batches = list(kept)
    assert len(batches) == len(kept) == whole
    assert [len(batch["id"]) for batch in batches] == [BATCH] * whole
    assert set(batches[0]["a_meta"]) == {"i", "j"}  # the collated dict: not one key a sample
    assert kept.state_dict()["sample_in_epoch"] == whole * BATCH
    every = loader(dict_first, tmp_path / "c", workers)
    assert [len(batch["id"]) for batch in every] == [BATCH] * whole + [rest]
    assert every.state_dict()["sample_in_epoch"] == SAMPLES


@pytest.mark.parametrize("workers", [0, 2])
def test_drop_last_with_a_collate_fn_does_not_count_the_dropped_samples(
    remote: Path, tmp_path: Path, workers: int
):
    whole = SAMPLES // BATCH
    kept = loader(remote, tmp_path / "c", workers, drop_last=True, collate_fn=list)
    assert [len(batch) for batch in kept] == [BATCH] * whole
    assert kept.state_dict()["sample_in_epoch"] == whole * BATCH


def test_a_counted_batch_pins_its_batch_and_keeps_its_count():
    from shardstream.loader.batch_count import Counted

    pinned = Counted(3, {"x": "not a tensor"}).pin_memory()
    assert (pinned.samples, pinned.batch) == (3, {"x": "not a tensor"})


def test_the_counting_collate_counts_the_samples_it_is_given():
    from shardstream.loader.batch_count import CountingCollate

    assert CountingCollate(list, batched=True)([{"a": 1}, {"a": 2}]).samples == 2
    one = CountingCollate(dict, batched=False)({"a": 1, "b": 2})
    assert (one.samples, one.batch) == (1, {"a": 1, "b": 2})
    items = CountingCollate(len, batched=True, per_sample=True)([{"a": 1}, {"a": 1, "b": 2}])
    assert (items.samples, items.batch, items.items) == (2, [1, 2], True)
