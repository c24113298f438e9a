"""Petastorm's BatchedDataLoader and InMemBatchedDataLoader: batches re-cut, shuffled, held."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
import torch
from tests.petastorm_data import hello_row, write_hello

from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm import (
    BatchedDataLoader,
    InMemBatchedDataLoader,
    make_batch_reader,
    make_reader,
)

ROWS = 30
Row = collections.namedtuple("Row", ["id", "vec"])


class FakeReader:
    """A batch reader of given batches (a namedtuple of arrays each), as a Reader is driven."""

    def __init__(self, sizes: list[int], batched: bool = True) -> None:
        self.batched_output = batched
        self.stopped = False
        self.resets = 0
        self.items: list[Any] = []
        start = 0
        for size in sizes:
            ids = np.arange(start, start + size, dtype=np.int64)
            self.items.append(Row(ids, np.stack([ids, -ids], axis=1).astype(np.float32)))
            start += size
        if not batched:
            self.items = [Row(b.id[k], b.vec[k]) for b in self.items for k in range(len(b.id))]

    def __iter__(self) -> Any:
        return iter(self.items)

    def reset(self) -> None:
        self.resets += 1

    def stop(self) -> None:
        self.stopped = True

    def join(self) -> None:
        pass


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_hello(tmp_path_factory.mktemp("batched") / "hello", ROWS, row_group=4))


def ids_of(batches: list[dict[str, Any]]) -> list[int]:
    return [int(i) for batch in batches for i in batch["id"]]


@pytest.mark.parametrize("batched", [True, False])
def test_batches_are_recut_to_exactly_batch_size_across_reader_batches(batched: bool):
    reader = FakeReader([4, 1, 7, 3], batched=batched)
    batches = list(BatchedDataLoader(reader, batch_size=6))
    assert [len(b["id"]) for b in batches] == [6, 6, 3]
    assert ids_of(batches) == list(range(15))
    assert all(isinstance(b["id"], torch.Tensor) for b in batches)
    assert batches[0]["vec"].shape == (6, 2)
    assert batches[1]["vec"][:, 1].tolist() == [-float(i) for i in range(6, 12)]


def test_the_shuffling_buffer_draws_every_row_once_in_a_seeded_order():
    def order(seed: int | None, capacity: int) -> list[int]:
        loader = BatchedDataLoader(FakeReader([10] * 10), batch_size=7,
                                   shuffling_queue_capacity=capacity, seed=seed)  # fmt: skip
        return ids_of(list(loader))

    plain = order(None, 0)
    assert plain == list(range(100))
    shuffled = order(1, 20)
    assert sorted(shuffled) == plain
    assert shuffled != plain
    assert order(1, 20) == shuffled
    assert order(2, 20) != shuffled
    assert order(None, 20) != order(None, 20)  # unseeded: a fresh order each time


def test_the_shuffling_buffer_holds_capacity_minus_one_rows_beyond_a_batch():
    yielded_after: list[int] = []

    class Counting(FakeReader):
        def __iter__(self) -> Any:
            for k, item in enumerate(self.items):
                yielded_after.append(k)
                yield item

    loader = BatchedDataLoader(Counting([5] * 10), batch_size=4, shuffling_queue_capacity=12)
    first = next(iter(loader))
    assert len(first["id"]) == 4
    # 11 rows must stay after the first batch of 4: 15 rows, the reader's third batch.
    assert yielded_after == [0, 1, 2]
    assert set(first["id"].tolist()) <= set(range(15))


def test_transform_fn_makes_the_tensors():
    seen: list[Any] = []

    def to_double(column: Any) -> Any:
        seen.append(column)
        return torch.as_tensor(np.asarray(column), dtype=torch.float64)

    (batch,) = list(BatchedDataLoader(FakeReader([3], batched=False), batch_size=3,
                                      transform_fn=to_double))  # fmt: skip
    assert batch["id"].dtype == torch.float64
    assert batch["id"].tolist() == [0.0, 1.0, 2.0]
    assert isinstance(seen[0], list)  # a row reader's value, as a one-item list
    assert len(seen[0]) == 1


def test_text_and_nulls_are_refused_naming_the_field():
    text = collections.namedtuple("text", ["id", "name"])

    class Reader(FakeReader):
        def __init__(self, item: Any) -> None:
            super().__init__([])
            self.items = [item]

    with pytest.raises(ConfigurationError, match=r"field 'name'.*schema_fields"):
        list(BatchedDataLoader(Reader(text(np.arange(2), np.array(["a", "b"])))))
    with pytest.raises(ConfigurationError, match="field 'name' holds a null"):
        list(BatchedDataLoader(Reader(text(np.arange(2), None))))


def test_passes_reset_the_reader_and_overlapping_passes_are_refused():
    reader = FakeReader([5, 5])
    loader = BatchedDataLoader(reader, batch_size=4)
    assert ids_of(list(loader)) == ids_of(list(loader)) == list(range(10))
    assert reader.resets == 1
    running = iter(loader)
    next(running)
    with pytest.raises(RuntimeError, match="You must finish a full pass"):
        next(iter(loader))


def test_bad_arguments_are_refused():
    with pytest.raises(ConfigurationError, match="batch_size"):
        BatchedDataLoader(FakeReader([]), batch_size=0)
    with pytest.raises(ConfigurationError, match="shuffling_queue_capacity"):
        BatchedDataLoader(FakeReader([]), shuffling_queue_capacity=-1)
    with pytest.raises(ConfigurationError, match="rows_capacity"):
        InMemBatchedDataLoader(FakeReader([]), rows_capacity=0)
    with pytest.raises(ConfigurationError, match="num_epochs"):
        InMemBatchedDataLoader(FakeReader([]), num_epochs=None)  # type: ignore[arg-type]


def test_in_mem_holds_up_to_capacity_rows_and_serves_the_epochs():
    reader = FakeReader([4, 4, 4, 4])
    loader = InMemBatchedDataLoader(reader, batch_size=3, num_epochs=2, rows_capacity=10)
    assert not reader.stopped  # nothing is read before the with block or the first pass
    with loader:
        assert reader.stopped  # read, and stopped rather than drained
        batches = list(loader)
    assert [len(b["id"]) for b in batches] == [3, 3, 3, 1] * 2
    assert ids_of(batches) == list(range(10)) * 2
    assert batches[0]["vec"].shape == (3, 2)
    with pytest.raises(RuntimeError, match="couldn't be used multiple times"):
        next(iter(loader))


def test_in_mem_shuffles_each_epoch_anew_from_its_seed():
    def epochs(seed: int) -> list[list[int]]:
        loader = InMemBatchedDataLoader(FakeReader([50, 50]), batch_size=10, num_epochs=3,
                                        seed=seed, rows_capacity=None, shuffle=True)  # fmt: skip
        out = ids_of(list(loader))
        return [out[k * 100 : (k + 1) * 100] for k in range(3)]

    first = epochs(0)
    assert all(sorted(epoch) == list(range(100)) for epoch in first)
    assert len({tuple(epoch) for epoch in first}) == 3
    assert epochs(0) == first
    assert epochs(1) != first


def test_in_mem_of_an_empty_reader_yields_nothing():
    assert list(InMemBatchedDataLoader(FakeReader([]))) == []


def test_over_real_readers(hello: str):
    reader = make_batch_reader(hello, schema_fields=["id", "matrix"], shuffle_row_groups=False)
    with BatchedDataLoader(reader, batch_size=7) as loader:
        batches = list(loader)
    assert [len(b["id"]) for b in batches] == [7, 7, 7, 7, 2]
    assert sorted(ids_of(batches)) == list(range(ROWS))
    for batch in batches:
        for i, matrix in zip(batch["id"], batch["matrix"], strict=True):
            assert np.array_equal(matrix.numpy(), hello_row(int(i))["matrix"])
    assert reader.stopped
    rows = make_reader(hello, schema_fields=["id", "image"], shuffle_row_groups=False)
    with InMemBatchedDataLoader(rows, batch_size=8, rows_capacity=20) as loader:
        held = list(loader)
    assert [len(b["id"]) for b in held] == [8, 8, 4]
    assert held[0]["image"].shape == (8, 8, 6, 3)
