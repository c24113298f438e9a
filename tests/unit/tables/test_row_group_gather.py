"""Batches gathered across row groups through one array per column equal the groups' own."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.read_routes_data import ForcedRoute

from shardstream import ReadPolicy, StreamingDataLoader, StreamingDataset
from shardstream.pipeline.policy import Route
from shardstream.tables.row_group_gather import RowGroupGather
from shardstream.tables.row_group_view import RowGroupView


def group(
    first: int, rows: int, *, vec: int = 2, extra: dict[str, Any] | None = None
) -> RowGroupView:
    ids = np.arange(first, first + rows, dtype=np.int64)
    table = pa.table(
        {
            "id": ids,
            "x": pa.array(ids.astype(np.float32)),
            "flag": pa.array(ids % 2 == 0),
            "text": pa.array([None if i % 5 == 0 else f"row {i}" for i in ids.tolist()]),
            "blob": pa.array([b"b" * (i % 4) for i in ids.tolist()], pa.large_binary()),
            "vec": pa.array([[float(i)] * vec for i in ids.tolist()], pa.list_(pa.float32())),
            **(extra or {}),
        }
    )
    return RowGroupView(table, source=f"row group at {first}")


def same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert type(a) is type(b)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype
            assert a.shape == b.shape
            assert a.tolist() == b.tolist()
            assert a.flags.writeable
        else:
            assert [type(v) for v in a] == [type(v) for v in b]
            assert [np.asarray(v).tolist() for v in a] == [np.asarray(v).tolist() for v in b]


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    batches=st.lists(st.tuples(st.integers(1, 10), st.integers(1, 50)), min_size=1, max_size=25),
    released=st.sets(st.integers(0, 11)),
    seed=st.integers(0, 2**32 - 1),
)
def test_batches_equal_the_per_group_gather_as_groups_come_and_go(
    sizes: list[int], batches: list[tuple[int, int]], released: set[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    firsts = np.cumsum([0, *sizes]).tolist()
    opened = [group(firsts[k], n) for k, n in enumerate(sizes)]
    gather = RowGroupGather(min_groups=1)
    nonempty = [k for k, n in enumerate(sizes) if n]
    for step, (width, rows) in enumerate(batches):
        if not nonempty:
            break
        chosen = rng.choice(nonempty, size=min(width, len(nonempty)), replace=False).tolist()
        views = {10 * k: opened[k] for k in chosen}  # dataset-wide numbers, not positions
        shards = rng.choice(list(views), size=rows).tolist()
        local = [int(rng.integers(len(views[s]))) for s in shards]
        same(gather(views, shards, local), RowGroupView.gather_columns(views, shards, local))
        for k in chosen:  # released, then opened again as a new view (its arrays made anew)
            if (step + k) % 12 in released:
                opened[k].release()
                opened[k] = group(firsts[k], sizes[k])


def test_groups_it_cannot_hold_are_gathered_group_by_group():
    ragged = {"odd": pa.array([[1] * (i % 3) for i in range(10)], pa.list_(pa.int64()))}
    views = {
        0: group(0, 10, extra=ragged),
        1: group(10, 10, extra=ragged),
        2: group(20, 10, extra=ragged),
    }
    shards, local = [2, 0, 1, 0, 2], [4, 9, 0, 1, 3]
    same(
        RowGroupGather(min_groups=1)(views, shards, local),
        RowGroupView.gather_columns(views, shards, local),
    )
    other = {0: group(0, 10, vec=2), 1: group(10, 10, vec=3), 2: group(20, 10, vec=2)}
    same(
        RowGroupGather(min_groups=1)(other, shards, local),
        RowGroupView.gather_columns(other, shards, local),
    )


def test_rows_outside_their_groups_raise():
    views = {0: group(0, 10), 1: group(10, 3), 2: group(13, 4)}
    with pytest.raises(IndexError, match="outside their row groups"):
        RowGroupGather(min_groups=1)(views, [0, 1, 2], [9, 3, 0])
    with pytest.raises(KeyError, match=r"\[5\]"):
        RowGroupGather(min_groups=1)(views, [0, 5], [0, 0])


def test_a_shuffled_table_reads_the_same_batches_gathered_or_not(tmp_path: Path):
    root = tmp_path / "table"
    root.mkdir()
    for k in range(3):
        ids = np.arange(k * 300, (k + 1) * 300, dtype=np.int64)
        table = pa.table({"id": ids, "x": ids * 0.5, "text": [f"t{i}" for i in ids.tolist()]})
        pq.write_table(table, root / f"part-{k}.parquet", row_group_size=40)

    def batches(policy: ReadPolicy) -> list[dict[str, Any]]:
        ds = StreamingDataset(
            local=str(root), batch_size=32, shuffle=True, shuffle_seed=5, read_policy=policy
        )
        return list(StreamingDataLoader(ds, batch_size=32))

    route = Route("columns", False, False, False, False, 1)
    gathered = batches(ReadPolicy())
    for plain in (
        batches(ForcedRoute(forced=route)),
        batches(ForcedRoute(forced=dataclasses.replace(route, gather=True))),
    ):
        assert len(plain) == len(gathered)
        for a, b in zip(gathered, plain, strict=True):
            assert a["id"].tolist() == b["id"].tolist()
            assert a["x"].tolist() == b["x"].tolist()
            assert a["x"].dtype == b["x"].dtype
            assert a["text"] == b["text"] == [f"t{i}" for i in a["id"].tolist()]
    ids = np.concatenate([batch["id"].numpy() for batch in gathered])
    assert sorted(ids.tolist()) == list(range(900))
    assert ids.tolist() != list(range(900))  # shuffled: batches across row groups


@pytest.mark.parametrize(
    "columns",
    [
        {  # every width and alignment, a record padded to a power of two
            "i8": pa.array(np.arange(30, dtype=np.int8)),
            "f2": pa.array(np.arange(30, dtype=np.float16)),
            "u4": pa.array(np.arange(30, dtype=np.uint32) * 7),
            "f8": pa.array(np.arange(30, dtype=np.float64) / 3),
            "b": pa.array(np.arange(30) % 3 == 0),
            "v3": pa.array([[i, -i, 2 * i] for i in range(30)], pa.list_(pa.int32())),
        },
        {  # a record wider than any padding: a vector of 40 doubles
            "id": pa.array(np.arange(30, dtype=np.int64)),
            "wide": pa.array([[i / 7] * 40 for i in range(30)], pa.list_(pa.float64())),
        },
        {"text": pa.array([f"t{i}" for i in range(30)]), "raw": pa.array([b"r"] * 30)},
        {"only": pa.array(np.arange(30, dtype=np.uint16))},
    ],
    ids=["mixed", "wide", "strings-only", "one-number"],
)
def test_any_mix_of_columns_gathers_as_the_groups_do(columns: dict[str, Any]) -> None:
    table = pa.table(columns)
    views = {k: RowGroupView(table.slice(10 * k, 10), source=f"group {k}") for k in range(3)}
    rng = np.random.default_rng(11)
    gather = RowGroupGather(min_groups=1)
    for _ in range(4):
        shards = rng.integers(0, 3, 25)
        local = rng.integers(0, 10, 25)
        got = gather(views, shards, local)
        same(got, RowGroupView.gather_columns(views, shards, local))
        for values in got:
            if isinstance(values, np.ndarray):
                assert values.flags.c_contiguous  # the batch's own values, as a tensor takes them


def test_a_group_of_no_rows_is_open_but_holds_no_row() -> None:
    table = pa.table({"id": np.arange(15, dtype=np.int64), "text": [f"t{i}" for i in range(15)]})
    parts = [table.slice(0, 10), table.slice(10, 0), table.slice(10, 5)]
    views = {k: RowGroupView(part, source=f"group {k}") for k, part in enumerate(parts)}
    gather = RowGroupGather(min_groups=1)
    same(gather(views, [2, 0], [4, 9]), RowGroupView.gather_columns(views, [2, 0], [4, 9]))
    with pytest.raises(IndexError, match="outside their row groups"):
        gather(views, [0, 1], [0, 0])
    with pytest.raises(KeyError, match=r"\[3\]"):
        gather(views, [0, 3], [0, 0])
    with pytest.raises(KeyError, match=r"\[-1\]"):
        gather(views, [0, -1], [0, 0])
