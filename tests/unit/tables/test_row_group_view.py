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


def strings_table() -> pa.Table:
    words = [None if i % 4 == 1 else f"w{i}-é" for i in range(40)]
    text = pa.chunked_array([pa.array(words[:15]), pa.array(words[15:])])  # two chunks
    return pa.table(
        {
            "id": pa.chunked_array([np.arange(15), np.arange(15, 40)]),
            "text": text,
            "large": pa.array(words, pa.large_string()),
            "raw": pa.array([None if w is None else w.encode() for w in words], pa.binary()),
            "big": pa.array([b"x" * (i % 3) for i in range(40)], pa.large_binary()),
        }
    )


@pytest.mark.parametrize(
    "rows", [list(range(3, 20)), [7, 2, 2, 39, 0], [5], [], list(range(40))], ids=str
)
def test_a_batchs_strings_are_the_rows_values_before_and_after_the_group_is_decoded(
    rows: list[int],
):
    fresh = RowGroupView(strings_table(), source="fresh")  # strings read from Arrow
    decoded = RowGroupView(strings_table(), source="decoded")
    decoded.get(0)  # every column made Python objects
    want = by_rows(decoded, rows)
    for view in (fresh, decoded):
        got = view.get_many(rows)
        for values, expected in zip(got[1:], want[1:], strict=True):
            assert isinstance(values, list)
            assert values == expected
            assert [type(v) for v in values] == [type(v) for v in expected]
    assert fresh.get(3) == decoded.get(3)  # a row's get decodes the group as ever
    assert fresh.get_many(rows)[1] == want[1]


def test_a_batch_across_groups_mixes_decoded_and_arrow_strings():
    table = strings_table()
    for shards, local in (
        ([0, 0, 0, 1, 1], [17, 18, 19, 0, 1]),  # runs of each group (unshuffled, across groups)
        ([1, 0, 1, 0, 0], [39, 19, 0, 4, 5]),  # rows picked at random
    ):
        parts = {0: table.slice(0, 20), 1: table}
        views = {k: RowGroupView(part, source=str(k)) for k, part in parts.items()}
        views[1].get(0)  # one group's strings decoded, the other's still in Arrow
        got = RowGroupView.gather_columns(views, shards, local)
        again = RowGroupView.gather_columns(views, shards, local)  # the objects made, if any
        rows = {k: RowGroupView(part, source=str(k)) for k, part in parts.items()}
        for k, name in enumerate(views[0].names[1:], start=1):
            expected = [rows[s].get(i)[name] for s, i in zip(shards, local, strict=True)]
            assert got[k] == again[k] == expected
            assert [type(v) for v in got[k]] == [type(v) for v in expected]


def test_a_released_group_refuses_batches():
    view = RowGroupView(strings_table(), source="file, row group 3")
    view.get_many([0, 1])
    view.release()
    with pytest.raises(ValueError, match=r"row group 3.*released"):
        view.get_many([0, 1])
