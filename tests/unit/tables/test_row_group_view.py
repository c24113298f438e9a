"""A row group's values, one row, many rows of one group, or a batch across groups."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from shardstream.tables.row_group_view import RowGroupView


def group(first: int, rows: int, *, vec: int = 3, wide: bool = False) -> RowGroupView:
    ids = np.arange(first, first + rows, dtype=np.int64)
    lists = [[float(i)] * (vec if not wide else 1 + i % 3) for i in ids.tolist()]
    table = pa.table(
        {
            "id": ids,
            "x": pa.array(ids.astype(np.float32)),
            "flag": pa.array(ids % 2 == 0),
            "big": pa.array(ids.astype(np.uint64)),
            "text": pa.array([f"row {i}" for i in ids.tolist()]),
            "vec": pa.array(lists, pa.list_(pa.float32())),
            "maybe": pa.array([None if i % 3 == 0 else i for i in ids.tolist()], pa.int64()),
        }
    )
    return RowGroupView(table, source=f"file, row group at {first}")


def by_rows(view: RowGroupView, rows: list[int]) -> list[list[Any]]:
    return [[view.get(row)[name] for row in rows] for name in view.names]


def test_many_rows_come_as_arrays_of_numbers_and_lists_of_the_rest():
    view = group(100, 50)
    rows = [7, 2, 2, 49, 0]
    got: dict[str, Any] = dict(zip(view.names, view.get_many(rows), strict=True))
    assert got["id"].dtype == np.int64
    assert got["id"].tolist() == [107, 102, 102, 149, 100]
    assert got["x"].dtype == np.float32
    assert got["flag"].dtype == np.bool_
    assert got["id"].flags.writeable  # the batch owns its values
    assert isinstance(got["big"], list)
    assert type(got["big"][0]) is np.uint64
    assert got["text"] == ["row 107", "row 102", "row 102", "row 149", "row 100"]
    assert got["vec"].shape == (5, 3)
    assert got["vec"][0].tolist() == [107.0] * 3
    assert got["maybe"] == [107, None, None, 149, 100]  # nulls: a list
    for values, expected in zip(view.get_many(rows), by_rows(view, rows), strict=True):
        assert [np.asarray(v).tolist() for v in values] == [
            np.asarray(v).tolist() for v in expected
        ]


def test_one_row_keeps_its_types():
    row = group(0, 10).get(4)
    assert type(row["id"]) is np.int64
    assert type(row["x"]) is np.float32
    assert isinstance(row["vec"], np.ndarray)
    assert row["vec"].dtype == np.float32
    assert row["text"] == "row 4"
    assert row["maybe"] == 4


def test_ragged_lists_stay_a_list_of_arrays():
    view = group(0, 12, wide=True)
    values = dict(zip(view.names, view.get_many([1, 2, 3]), strict=True))["vec"]
    assert isinstance(values, list)
    assert [len(v) for v in values] == [2, 3, 1]


@pytest.mark.parametrize("rows", [[], [0], [5, 5, 5]])
def test_few_rows(rows: list[int]):
    view = group(0, 6)
    got = view.get_many(rows)
    assert [len(values) for values in got] == [len(rows)] * len(view.names)


@pytest.mark.parametrize("rows", [[-1], [6], [0, 6]])
def test_rows_outside_the_group_raise(rows: list[int]):
    with pytest.raises(IndexError, match="outside 6 rows"):
        group(0, 6).get_many(rows)


def test_a_batch_across_groups_is_each_groups_values_in_batch_order():
    rng = np.random.default_rng(3)
    views = {0: group(0, 40), 4: group(40, 25), 9: group(65, 30, vec=3)}
    shards = rng.choice([0, 4, 9], 200).tolist()
    local = [int(rng.integers(len(views[s]))) for s in shards]
    got = RowGroupView.gather_columns(views, shards, local)
    expected_ids = [views[s].get(i)["id"] for s, i in zip(shards, local, strict=True)]
    names = views[0].names
    columns: dict[str, Any] = dict(zip(names, got, strict=True))
    assert columns["id"].dtype == np.int64
    assert columns["id"].tolist() == expected_ids
    assert columns["vec"].shape == (200, 3)
    assert isinstance(columns["big"], list)
    assert type(columns["big"][0]) is np.uint64
    for k, name in enumerate(names):
        expected = [views[s].get(i)[name] for s, i in zip(shards, local, strict=True)]
        assert [np.asarray(v).tolist() for v in got[k]] == [
            np.asarray(v).tolist() for v in expected
        ], name


def test_a_batch_across_groups_of_other_shapes_falls_back_to_lists():
    views = {0: group(0, 10, vec=2), 1: group(10, 10, vec=3), 2: group(20, 10, wide=True)}
    shards, local = [2, 0, 1, 0], [4, 9, 0, 1]
    vec = RowGroupView.gather_columns(views, shards, local)[views[0].names.index("vec")]
    assert isinstance(vec, list)
    assert [v.tolist() for v in vec] == [[24.0], [9.0, 9.0], [10.0] * 3, [1.0, 1.0]]


def test_a_batch_across_groups_checks_each_groups_rows():
    views = {0: group(0, 10), 1: group(10, 3)}
    with pytest.raises(IndexError, match="outside their row groups"):
        RowGroupView.gather_columns(views, [0, 1], [9, 3])
