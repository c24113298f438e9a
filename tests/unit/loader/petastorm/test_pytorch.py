"""Petastorm's torch DataLoader over a reader: dicts of tensors, rows re-batched, shuffled."""

from __future__ import annotations

import collections
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.petastorm_data import hello_row, write_hello

from shardstream.errors import ConfigurationError
from shardstream.loader.petastorm import (
    DataLoader,
    decimal_friendly_collate,
    make_batch_reader,
    make_reader,
)

ROWS = 30


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_hello(tmp_path_factory.mktemp("torch") / "hello", ROWS, row_group=4))


def test_batches_of_a_row_reader_are_dicts_of_tensors(hello: str):
    reader = make_reader(hello, schema_fields=["id", "label", "image"], shuffle_row_groups=False)
    with DataLoader(reader, batch_size=8) as loader:
        batches = list(loader)
    assert [len(b["id"]) for b in batches] == [8, 8, 8, 6]
    first = batches[0]
    assert first["id"].dtype == torch.int32
    assert first["image"].shape == (8, 8, 6, 3)
    assert first["label"] == [hello_row(int(i))["label"] for i in first["id"]]
    for batch in batches:
        for i, image in zip(batch["id"], batch["image"], strict=True):
            assert np.array_equal(image.numpy(), hello_row(int(i))["image"])
    assert reader.stopped  # the with block stops the reader


def test_a_batch_readers_batches_are_split_into_rows_and_batched_again(hello: str):
    with DataLoader(make_batch_reader(hello, schema_fields=["id", "matrix", "label"]),
                    batch_size=5) as loader:  # fmt: skip
        batches = list(loader)
    assert [len(b["id"]) for b in batches] == [5] * 6
    ids = torch.cat([b["id"] for b in batches]).tolist()
    assert sorted(ids) == list(range(ROWS))
    assert batches[0]["matrix"].shape == (5, 4, 3)
    assert isinstance(batches[0]["label"], list)


def test_the_shuffling_queue_permutes_rows_with_its_seed(hello: str):
    def order(seed: int, capacity: int = 10) -> list[int]:
        reader = make_reader(hello, schema_fields=["id"], shuffle_row_groups=False)
        with DataLoader(reader, batch_size=7, shuffling_queue_capacity=capacity, seed=seed) as dl:
            return [int(i) for batch in dl for i in batch["id"]]

    plain = order(0, capacity=0)
    shuffled = order(1)
    assert sorted(shuffled) == sorted(plain) == list(range(ROWS))
    assert shuffled != plain
    assert order(1) == shuffled
    assert order(2) != shuffled


def test_a_pass_may_not_start_while_another_runs(hello: str):
    loader = DataLoader(make_reader(hello, schema_fields=["id"]), batch_size=8)
    running = iter(loader)
    next(running)
    with pytest.raises(RuntimeError, match="running"):
        next(iter(loader))
    assert len([*running]) == 3


def test_passes_after_the_first_reset_the_reader(hello: str):
    loader = DataLoader(make_reader(hello, schema_fields=["id"]), batch_size=64)
    passes = [[int(i) for b in loader for i in b["id"]] for _ in range(2)]
    assert collections.Counter(passes[0] + passes[1]) == dict.fromkeys(range(ROWS), 2)


def test_types_torch_lacks_are_promoted_and_nulls_refused():
    class Reader:
        batched_output = True

        def __init__(self, batch: Any) -> None:
            self.batch = batch

        def __iter__(self) -> Any:
            return iter([self.batch])

    row = collections.namedtuple("row", ["u", "flag"])
    batch = row(np.array([1, 60000], np.uint16), np.array([True, False]))
    (out,) = list(DataLoader(Reader(batch), batch_size=2))
    assert out["u"].dtype == torch.int32
    assert out["u"].tolist() == [1, 60000]
    assert out["flag"].dtype == torch.uint8
    with pytest.raises(ConfigurationError, match="field 'u' holds a null"):
        list(DataLoader(Reader(row(np.array([None], object), np.array([True]))), batch_size=2))


def test_decimals_text_and_bytes_stay_lists():
    from decimal import Decimal

    out = decimal_friendly_collate([{"d": Decimal(1), "s": "a", "x": np.float32(1)},
                                    {"d": Decimal(2), "s": "b", "x": np.float32(2)}])  # fmt: skip
    assert out["d"] == [Decimal(1), Decimal(2)]
    assert out["s"] == ["a", "b"]
    assert out["x"].tolist() == [1.0, 2.0]


def test_bad_arguments_are_refused(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="batch_size"):
        DataLoader(object(), batch_size=0)
    with pytest.raises(ConfigurationError, match="shuffling_queue_capacity"):
        DataLoader(object(), shuffling_queue_capacity=-1)


def test_decimal_friendly_collate_hands_text_back_as_the_sequence_given():
    # Petastorm returns the batch itself: zip's tuples for tuple rows, lists for dict rows.
    by_position = decimal_friendly_collate([("a", Decimal("1.5"), 1), ("b", Decimal("2"), 2)])
    assert by_position[0] == ("a", "b")
    assert by_position[1] == (Decimal("1.5"), Decimal("2"))
    assert by_position[2].tolist() == [1, 2]
    by_key = decimal_friendly_collate([{"s": b"x"}, {"s": b"y"}])
    assert by_key["s"] == [b"x", b"y"]
    given = (Decimal(1), Decimal(2))
    assert decimal_friendly_collate(given) is given
