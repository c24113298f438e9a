"""Whole node orders kept in the cache folder: written whole, checked when read, pruned."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from shardstream.cache import NodeOrders
from shardstream.cache.node_orders import KEPT_LAYOUTS
from shardstream.sampling import ShuffleConfig

SIZES = np.array([5, 7, 9], np.int64)
SHUFFLE = ShuffleConfig(shuffle=True, algo="py1e", seed=3)


def orders(folder: Path, epoch: int = 0, **changes: object) -> NodeOrders:
    settings = {"unit_sizes": SIZES, "num_canonical_nodes": 2, "shuffle": SHUFFLE, **changes}
    return NodeOrders(str(folder), epoch=epoch, **settings)  # type: ignore[arg-type]


class Compute:
    def __init__(self, order: np.ndarray) -> None:
        self.order, self.calls = order, 0

    def __call__(self) -> np.ndarray:
        self.calls += 1
        return self.order


@pytest.mark.parametrize("top", [20, 1 << 40])
def test_an_order_computed_once_is_read_back(tmp_path: Path, top: int):
    order = np.array([3, 0, top, 1], np.int64)
    compute = Compute(order)
    assert np.array_equal(orders(tmp_path)(1, 4, compute), order)
    assert compute.calls == 1
    again = Compute(order[::-1].copy())
    got = orders(tmp_path)(1, 4, again)  # another run: read, not computed
    assert again.calls == 0
    assert np.array_equal(got, order)
    assert got.dtype.itemsize == (4 if top < 1 << 31 else 8)
    width = got.dtype.itemsize
    assert os.path.getsize(orders(tmp_path).path(1)) == 24 + width * 4


@pytest.mark.parametrize(
    "changes",
    [
        {"epoch": 1},
        {"unit_sizes": np.array([5, 7, 10], np.int64)},
        {"num_canonical_nodes": 3},
        {"shuffle": ShuffleConfig(shuffle=True, algo="py1e", seed=4)},
        {"shuffle": ShuffleConfig(shuffle=True, algo="py1e", seed=3, block_size=8)},
    ],
)
def test_anything_the_order_depends_on_names_another_file(tmp_path: Path, changes):
    orders(tmp_path)(0, 2, Compute(np.array([1, 0])))
    other = orders(tmp_path, **changes)
    assert other.path(0) != orders(tmp_path).path(0)
    compute = Compute(np.array([0, 1]))
    assert other(0, 2, compute).tolist() == [0, 1]
    assert compute.calls == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-1],  # cut short
        lambda data: data[:-4] + b"\x07\x00\x00\x00",  # an id changed
        lambda data: b"XXXX" + data[4:],  # not an order file
        lambda data: b"",
    ],
)
def test_a_damaged_file_is_computed_again_and_replaced(tmp_path: Path, damage, caplog):
    order = np.array([2, 0, 3, 1], np.int64)
    orders(tmp_path)(0, 4, Compute(order))
    path = Path(orders(tmp_path).path(0))
    path.write_bytes(damage(path.read_bytes()))
    compute = Compute(order)
    with caplog.at_level(logging.WARNING, logger="shardstream.cache.node_orders"):
        assert orders(tmp_path)(0, 4, compute).tolist() == order.tolist()
    assert compute.calls == 1
    assert "is not a whole node order" in caplog.text
    assert str(path) in caplog.text
    assert orders(tmp_path)(0, 4, Compute(order[::-1].copy())).tolist() == order.tolist()


def test_a_file_of_another_size_is_not_read(tmp_path: Path):
    orders(tmp_path)(0, 3, Compute(np.array([2, 0, 1])))
    compute = Compute(np.array([3, 2, 0, 1]))
    assert orders(tmp_path)(0, 4, compute).tolist() == [3, 2, 0, 1]
    assert compute.calls == 1


def test_writing_an_epoch_deletes_the_nodes_earlier_epochs(tmp_path: Path):
    for epoch in (0, 1, 2):
        for node in (0, 1):
            orders(tmp_path, epoch)(node, 2, Compute(np.array([1, 0])))
    other_layout = orders(tmp_path, 0, num_canonical_nodes=5)
    other_layout(0, 2, Compute(np.array([0, 1])))
    names = sorted(os.listdir(tmp_path))
    assert names == sorted(
        [
            os.path.basename(orders(tmp_path, 2).path(0)),
            os.path.basename(orders(tmp_path, 2).path(1)),
            os.path.basename(other_layout.path(0)),
        ]
    )


def test_a_folder_that_cannot_be_written_only_costs_the_computation(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = orders(blocker / "plans")
    compute = Compute(np.array([1, 0]))
    assert store(0, 2, compute).tolist() == [1, 0]
    assert store(0, 2, compute).tolist() == [1, 0]
    assert compute.calls == 2


def test_orders_of_other_seeds_are_dropped_least_recently_used_first(tmp_path: Path):
    # fb0f0a9 kept every seed's orders: a sweep over seeds filled the cache folder.
    def run(seed: int) -> Compute:
        compute = Compute(np.array([1, 0]))
        shuffle = ShuffleConfig(shuffle=True, algo="py1e", seed=seed)
        orders(tmp_path, shuffle=shuffle)(0, 2, compute)
        return compute

    for seed in range(KEPT_LAYOUTS):
        run(seed)
    assert run(0).calls == 0  # read back: seed 0 is now the most recently used
    for seed in range(100, 110):
        run(seed)
        assert len(os.listdir(tmp_path)) <= KEPT_LAYOUTS
    assert {run(seed).calls for seed in range(107, 110)} == {0}  # the latest are kept
    assert run(0).calls == 1  # long unused: dropped, computed again
