"""The epoch order looked up by position: with and without a memo of whole node orders."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from shardstream.sampling import EpochPlan, ShuffleConfig, Topology, canonical_node_order
from shardstream.sampling.sequence import MEMO_SHARE


class DictMemo:
    """Node orders kept in a dict, computed on a miss; records what was asked."""

    def __init__(self, kept: dict[int, NDArray[Any]] | None = None) -> None:
        self.kept: dict[int, NDArray[Any]] = {} if kept is None else kept
        self.computed: list[int] = []
        self.asked: list[tuple[int, int]] = []

    def __call__(
        self, node: int, size: int, compute: Callable[[], NDArray[np.int64]]
    ) -> NDArray[Any]:
        self.asked.append((node, size))
        if node not in self.kept:
            self.computed.append(node)
            self.kept[node] = compute()
        return self.kept[node]


def plan_ids(sizes: NDArray[np.int64], memo: DictMemo | None = None, **kwargs: Any) -> list[int]:
    settings_ = {
        "topology": Topology(),
        "num_canonical_nodes": 1,
        "global_batch_size": 8,
        "epoch": 3,
        "shuffle": ShuffleConfig(shuffle=True, algo="py1e", seed=11),
        **kwargs,
    }
    plan = EpochPlan.for_worker(sizes, memo=memo, **settings_)
    ids: list[int] = plan.ids.tolist()
    return ids


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=12),
    ncn=st.integers(1, 4),
    workers=st.sampled_from([1, 2, 3, 8]),
    worker=st.integers(0, 7),
    drop_first=st.integers(0, 200),
    block=st.sampled_from([None, 7, 50]),
)
def test_a_memo_changes_no_id(sizes, ncn, workers, worker, drop_first, block):
    arr = np.asarray(sizes, np.int64)
    drop_first %= int(arr.sum())
    kwargs = {
        "topology": Topology(workers_per_rank=workers, worker=worker % workers),
        "num_canonical_nodes": ncn,
        "drop_first": drop_first,
        "shuffle": ShuffleConfig(shuffle=True, algo="py1e", seed=5, block_size=block),
    }
    expected = plan_ids(arr, **kwargs)
    memo = DictMemo()
    assert plan_ids(arr, memo, **kwargs) == expected
    again = DictMemo(dict(memo.kept))  # a later run reads what the first one kept
    assert plan_ids(arr, again, **kwargs) == expected
    assert again.computed == []
    for node, order in memo.kept.items():  # each kept order is the node's whole order
        config = kwargs["shuffle"]
        assert isinstance(config, ShuffleConfig)
        whole = canonical_node_order(arr, ncn, node, 3, config)
        assert np.array_equal(order, whole)


def test_only_py1e_nodes_asked_for_a_large_share_are_memoised():
    sizes = np.full(8, 64, np.int64)  # 512 samples, one node
    memo = DictMemo()
    plan_ids(sizes, memo)
    assert memo.asked == [(0, 512)]
    for algo in ("py1s", "py1b", "py2s", "naive"):
        shuffled = DictMemo()
        plan_ids(sizes, shuffled, shuffle=ShuffleConfig(shuffle=True, algo=algo, seed=1))
        assert shuffled.asked == []
    unshuffled = DictMemo()
    plan_ids(sizes, unshuffled, shuffle=ShuffleConfig(shuffle=False))
    assert unshuffled.asked == []
    # A worker asking for less than 1/MEMO_SHARE of the node computes its own positions.
    few = DictMemo()
    plan_ids(sizes, few, topology=Topology(workers_per_rank=2 * MEMO_SHARE, worker=1))
    assert few.asked == []
    # Resumed at 3/4 of the epoch: a quarter of the node is left, still asked for whole.
    late = DictMemo()
    plan_ids(sizes, late, drop_first=384)
    assert late.asked == [(0, 512)]


def test_a_memo_that_keeps_narrow_ids_gives_the_same_plan():
    sizes = np.full(5, 40, np.int64)
    memo = DictMemo()
    expected = plan_ids(sizes, memo, num_canonical_nodes=2)
    narrow = DictMemo({node: order.astype(np.int32) for node, order in memo.kept.items()})
    got = plan_ids(sizes, narrow, num_canonical_nodes=2)
    assert got == expected
    assert all(type(i) is int for i in got)


@pytest.mark.parametrize("drop_first", [0, 100])
def test_the_memo_sees_each_asked_node_once(drop_first):
    memo = DictMemo()
    plan_ids(np.full(10, 30, np.int64), memo, num_canonical_nodes=3, drop_first=drop_first)
    nodes = [node for node, _ in memo.asked]
    assert sorted(nodes) == sorted(set(nodes))


# Digests of every algorithm's canonical-node orders on one small layout. Orders are kept in
# the cache between runs (NodeOrders), keyed by ORDER_VERSION: if a change makes one of these
# differ, bump ORDER_VERSION in shardstream/sampling/sequence.py, then update the digest here.
PINNED = {
    "naive": "75ecc1a3b8035097",
    "py1b": "b3d6c3b001c77662",
    "py1br": "bf05f04443b3dcf5",
    "py1e": "95d37c0a828cc295",
    "py1s": "682ae9197d33717a",
    "py2s": "10421b0d6cc335aa",
}
PINNED_VERSION = 1


@pytest.mark.parametrize("algo", sorted(PINNED))
def test_each_shuffles_orders_are_those_of_order_version(algo):
    from shardstream.sampling.sequence import ORDER_VERSION

    sizes = np.array([7, 30, 1, 12, 25, 9, 40, 3], np.int64)
    digest = hashlib.sha256()
    for node in range(3):
        for epoch in (0, 5):
            config = ShuffleConfig(shuffle=True, algo=algo, seed=1234, block_size=16)
            order = canonical_node_order(sizes, 3, node, epoch, config)
            digest.update(order.astype("<i8").tobytes())
    assert ORDER_VERSION == PINNED_VERSION, "update PINNED for the new ORDER_VERSION"
    assert digest.hexdigest()[:16] == PINNED[algo], (
        f"{algo}'s orders changed: bump ORDER_VERSION (kept orders of the old version would "
        "be read back otherwise), then update PINNED and PINNED_VERSION"
    )
