"""make_reader and make_batch_reader as Petastorm's users call them, on Petastorm datasets."""

from __future__ import annotations

import collections
import functools
import logging
import operator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.petastorm_data import hello_row, hello_schema, write_hello

from shardstream.errors import ConfigurationError, NoMatchingFieldsError, ShardNotFoundError
from shardstream.loader.petastorm import (
    TransformSpec,
    UnischemaField,
    in_lambda,
    in_set,
    make_batch_reader,
    make_reader,
)

ROWS = 60


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_hello(tmp_path_factory.mktemp("petastorm") / "hello", ROWS))


def ids(rows: list[Any]) -> list[int]:
    return [int(row.id) for row in rows]


def batch_ids(batches: list[Any]) -> list[int]:
    return [int(i) for batch in batches for i in batch.id]


def assert_decoded(row: Any) -> None:
    expected = hello_row(int(row.id))
    for name in row._fields:
        value = getattr(row, name)
        assert np.array_equal(value, expected[name]), name
        assert type(value) is type(expected[name]), name
        assert getattr(value, "dtype", None) == getattr(expected[name], "dtype", None), name


def test_make_reader_yields_every_row_once_decoded(hello: str):
    with make_reader(hello) as reader:
        rows = list(reader)
        assert reader.last_row_consumed
    assert sorted(ids(rows)) == list(range(ROWS))
    assert ids(rows) != sorted(ids(rows))  # shuffle_row_groups=True by default
    assert rows[0]._fields == tuple(hello_schema().fields)
    assert type(rows[0]).__name__ == "HelloSchema_view"
    for row in rows:
        assert_decoded(row)


def test_make_batch_reader_yields_row_group_sized_batches_of_arrays(hello: str):
    with make_batch_reader(hello, shuffle_row_groups=False) as reader:
        batches = list(reader)
    assert sorted(batch_ids(batches)) == list(range(ROWS))
    assert max(len(batch.id) for batch in batches) == 7  # the largest row group
    first = batches[0]
    assert first.id.dtype == np.int32
    assert first.label.dtype.kind == "U"
    assert first.image.shape == (len(first.id), 8, 6, 3)
    assert first.image.dtype == np.uint8
    assert first.matrix.shape == (len(first.id), 4, 3)
    assert first.sparse.dtype == object  # its rows differ in length
    for batch in batches:
        for k, i in enumerate(batch.id):
            expected = hello_row(int(i))
            for name in batch._fields:
                assert np.array_equal(getattr(batch, name)[k], expected[name]), name


@pytest.mark.parametrize("make", [make_reader, make_batch_reader])
def test_epochs_repeat_each_row_and_the_seed_fixes_the_order(hello: str, make: Any):
    def read(**kwargs: Any) -> list[int]:
        with make(hello, schema_fields=["id"], **kwargs) as reader:
            return ids(list(reader)) if make is make_reader else batch_ids(list(reader))

    two = read(num_epochs=2, seed=3)
    assert collections.Counter(two) == dict.fromkeys(range(ROWS), 2)
    assert two[:ROWS] != two[ROWS:]  # each epoch its own order
    assert read(num_epochs=2, seed=3) == two
    assert read(num_epochs=1, seed=4) != two[:ROWS]
    assert read(shuffle_row_groups=False) == read(shuffle_row_groups=False)


def test_num_epochs_none_loops_for_ever(hello: str):
    with make_reader(hello, schema_fields=["id"], num_epochs=None) as reader:
        taken = [int(next(reader).id) for _ in range(3 * ROWS + 5)]
    assert collections.Counter(taken[: 3 * ROWS]) == dict.fromkeys(range(ROWS), 3)


def test_schema_fields_take_names_patterns_and_fields(hello: str):
    wanted = [UnischemaField("label", np.str_, ()), "i.*", "ma.rix"]
    with make_reader(hello, schema_fields=wanted) as reader:
        rows = list(reader)
        assert list(reader.schema.fields) == ["id", "label", "matrix", "image"]
    assert rows[0]._fields == ("id", "label", "matrix", "image")
    for row in rows:
        assert_decoded(row)
    with pytest.raises(ConfigurationError, match="no field matches"):
        make_reader(hello, schema_fields=["nothing.*"])


@pytest.mark.parametrize("make", [make_reader, make_batch_reader])
def test_schema_fields_matching_nothing_raise_petastorms_runtime_error(hello: str, make: Any):
    # Petastorm's users catch RuntimeError; ValueError (ConfigurationError) still catches it too.
    with pytest.raises(RuntimeError, match="no field matches") as caught:
        make(hello, schema_fields=["nothing.*"])
    assert isinstance(caught.value, NoMatchingFieldsError)
    assert isinstance(caught.value, ValueError)


def test_positional_arguments_bind_as_in_petastorm(hello: str):
    # Petastorm 0.13: make_reader(url, schema_fields, reader_pool_type, workers_count,
    # pyarrow_serialize, results_queue_size, seed, shuffle_rows, ...); make_batch_reader has
    # no pyarrow_serialize, so results_queue_size is its 5th and seed its 6th.
    with make_batch_reader(hello, ["id"], "dummy", 1, 7, 123, True) as reader:
        shuffled = batch_ids(list(reader))
    with make_batch_reader(hello, schema_fields=["id"], seed=123, shuffle_rows=True) as reader:
        assert batch_ids(list(reader)) == shuffled
    with make_batch_reader(hello, ["id"], "dummy", 1, 7, 124, True) as reader:
        assert batch_ids(list(reader)) != shuffled
    with make_reader(hello, ["id"], "dummy", 1, False, 7, 123, True) as reader:
        assert ids(list(reader)) == shuffled


@pytest.mark.parametrize("make", [make_reader, make_batch_reader])
def test_convert_early_to_numpy_is_taken(hello: str, make: Any):
    with make(hello, schema_fields=["id"], convert_early_to_numpy=True) as reader:
        rows = list(reader)
    expected = list(range(ROWS))
    assert sorted(ids(rows) if make is make_reader else batch_ids(rows)) == expected


def test_a_row_predicate_sees_decoded_fields_and_a_batch_one_a_dataframe(hello: str):
    with make_reader(
        hello, schema_fields=["id"], predicate=in_set({"row-3", "row-8"}, "label")
    ) as r:
        assert sorted(ids(list(r))) == [3, 8]
    seen = []

    def big(score: Any) -> Any:
        seen.append(type(score).__name__)
        return score > 5

    with make_batch_reader(hello, schema_fields=["id"], predicate=in_lambda(["score"], big)) as r:
        batches = list(r)
    assert sorted(batch_ids(batches)) == [i for i in range(ROWS) if i / 8 > 5]
    assert set(seen) == {"Series"}
    assert batches[0]._fields == ("id",)  # the predicate's field is read, not yielded


def test_filters_skip_partitions_and_drop_rows(hello: str):
    keep = [[("part", "in", {0, 2}), ("id", "<", 30)], [("part", "=", 1), ("label", "=", "row-4")]]
    with make_batch_reader(hello, schema_fields=["id", "part"], filters=keep) as reader:
        batches = list(reader)
        assert reader.dataset is not None
        assert reader.dataset.num_samples == ROWS  # every file may hold a match
    expected = [i for i in range(ROWS) if (i % 3 != 1 and i < 30) or i == 4]
    assert sorted(batch_ids(batches)) == expected
    for batch in batches:
        assert batch.part.tolist() == [i % 3 for i in batch.id]
    with make_reader(hello, schema_fields=["id"], filters=[("part", "=", 2)]) as reader:
        assert sorted(ids(list(reader))) == [i for i in range(ROWS) if i % 3 == 2]
        assert reader.dataset is not None
        assert reader.dataset.num_samples == 20  # the other partitions' files are not read


def test_a_batch_transform_takes_and_returns_a_dataframe(hello: str):
    def edit(frame: Any) -> Any:
        return frame.assign(twice=frame.id * 2, brightness=frame.image.map(np.mean))

    spec = TransformSpec(
        edit,
        edit_fields=[("twice", np.int64, (), False), ("brightness", np.float64, (), False)],
        removed_fields=["image"],
    )
    with make_batch_reader(hello, schema_fields=["id", "image"], transform_spec=spec) as reader:
        batches = list(reader)
        assert list(reader.schema.fields) == ["id", "twice", "brightness"]
    for batch in batches:
        assert batch.twice.dtype == np.int64
        assert batch.twice.tolist() == [2 * int(i) for i in batch.id]
        assert np.allclose(batch.brightness, [hello_row(int(i))["image"].mean() for i in batch.id])


def test_a_row_transform_takes_and_returns_a_dict(hello: str):
    def edit(row: dict[str, Any]) -> dict[str, Any]:
        return {"id": row["id"], "flipped": row["image"][:, ::-1]}

    spec = TransformSpec(edit, edit_fields=[UnischemaField("flipped", np.uint8, (8, 6, 3))],
                         selected_fields=["flipped", "id"])  # fmt: skip
    with make_reader(hello, schema_fields=["id", "image"], transform_spec=spec) as reader:
        rows = list(reader)
    assert rows[0]._fields == ("flipped", "id")
    for row in rows:
        assert np.array_equal(row.flipped, hello_row(int(row.id))["image"][:, ::-1])


@pytest.mark.parametrize("make", [make_reader, make_batch_reader])
def test_shards_are_disjoint_and_cover_every_row(
    hello: str, make: Any, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RANK", "5")  # a launcher's variables: Petastorm ignores them
    monkeypatch.setenv("WORLD_SIZE", "8")
    shards = []
    for shard in range(3):
        with make(hello, schema_fields=["id"], cur_shard=shard, shard_count=3) as reader:
            read = list(reader)
        shards.append(ids(read) if make is make_reader else batch_ids(read))
    assert sorted(functools.reduce(operator.iadd, shards, [])) == list(range(ROWS))
    assert [len(shard) for shard in shards] == [20, 20, 20]


def test_a_process_pool_decodes_the_same_rows(hello: str):
    with make_reader(hello, shuffle_row_groups=False) as reader:
        threads = list(reader)
    with make_reader(hello, shuffle_row_groups=False, reader_pool_type="process",
                     workers_count=2) as reader:  # fmt: skip
        processes = list(reader)
    assert sorted(ids(processes)) == list(range(ROWS))
    for row in processes:
        assert_decoded(row)
    assert len(threads) == len(processes)


def test_a_plain_parquet_folder_reads_with_an_inferred_schema(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    for day in (1, 2):
        folder = tmp_path / "plain" / f"day={day}"
        folder.mkdir(parents=True)
        table = pa.table({"x": pa.array([day * 10 + k for k in range(5)], pa.int64()),
                          "v": pa.array([[k, k] for k in range(5)], pa.list_(pa.float32())),
                          "s": [f"s{k}" for k in range(5)]})  # fmt: skip
        pq.write_table(table, folder / "a.parquet")
    with make_batch_reader(str(tmp_path / "plain"), shuffle_row_groups=False) as reader:
        batches = list(reader)
        assert list(reader.schema.fields) == ["day", "x", "v", "s"]  # partitions first
    assert {int(d) for b in batches for d in b.day} == {1, 2}
    assert batches[0].v.shape == (5, 2)
    assert batches[0].v.dtype == np.float32
    with caplog.at_level(logging.WARNING), make_reader(f"file://{tmp_path}/plain") as reader:
        rows = list(reader)
    assert "no Petastorm Unischema" in caplog.text
    assert sorted(int(row.x) for row in rows) == [10, 11, 12, 13, 14, 20, 21, 22, 23, 24]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rowgroup_selector": object()}, "rowgroup_selector is not supported"),
        ({"reader_pool_type": "gevent"}, "reader_pool_type"),
        ({"cur_shard": 1}, "given together"),
        ({"cur_shard": 3, "shard_count": 3}, "not in 0 .. 2"),
        ({"num_epochs": 0}, "num_epochs"),
        ({"filesystem": object()}, "filesystem= is not supported"),
        ({"cache_type": "memory"}, "cache_type"),
        ({"predicate": lambda row: True}, "predicate must be"),
        ({"predicate": in_set({1}, "nothing")}, "predicate reads 'nothing'"),
    ],
)
def test_unsupported_or_bad_arguments_are_refused(hello: str, kwargs: Any, match: str):
    with pytest.raises(ConfigurationError, match=match):
        make_reader(hello, **kwargs)


def test_a_list_of_files_or_one_file_reads_only_them(hello: str):
    files = sorted(str(p) for p in Path(hello).glob("part=*/*.parquet"))
    picked = [files[0], "file://" + files[-1]]
    tables = [pq.read_table(path.removeprefix("file://")) for path in picked]
    expected = sorted(int(i) for table in tables for i in table["id"].to_pylist())
    with make_batch_reader(picked, schema_fields=["id", "part"]) as reader:
        batches = list(reader)
    assert sorted(batch_ids(batches)) == expected
    assert {int(p) for b in batches for p in b.part} == {
        int(Path(f).parent.name[5:]) for f in files[:1] + files[-1:]
    }
    with make_batch_reader(files[0], schema_fields=["id"]) as reader:
        assert len(batch_ids(list(reader))) == pq.read_metadata(files[0]).num_rows
    # make_reader too, above the partition folders (the Unischema and part= are found), and
    # a file named twice is read twice, as in Petastorm.
    with make_reader([files[0], files[0]], schema_fields=["id", "part", "image"]) as rows:
        read = list(rows)
    once = pq.read_table(files[0])["id"].to_pylist()
    assert sorted(int(r.id) for r in read) == sorted(once * 2)
    assert {int(r.part) for r in read} == {int(Path(files[0]).parent.name[5:])}
    assert read[0].image.shape == hello_row(int(read[0].id))["image"].shape
    with pytest.raises(ConfigurationError, match="empty"):
        make_batch_reader([])
    with pytest.raises(ConfigurationError, match="2 file systems"):
        make_batch_reader([files[0], "gs://b/x.parquet"])
    with pytest.raises(ShardNotFoundError, match=r"no file 'part=0/nothing\.parquet'"):
        make_batch_reader([files[0], str(Path(files[0]).parent / "nothing.parquet")])


def test_a_cache_location_holds_the_row_groups_under_the_size_limit(hello: str, tmp_path: Path):
    cache = tmp_path / "cache"
    limit = 48 << 10  # the saved footers, and a few of the 60 KiB of row groups
    options: dict[str, Any] = {"cache_type": "local-disk", "cache_location": str(cache),
                               "cache_size_limit": limit}  # fmt: skip
    with make_batch_reader(hello, schema_fields=["id", "image"], **options) as reader:
        batches = list(reader)
    assert sorted(batch_ids(batches)) == list(range(ROWS))
    fetched = [p for p in cache.rglob("*.rowgroup-*") if p.is_file()]
    assert fetched  # copied from the dataset, as from an object store
    assert sum(p.stat().st_size for p in fetched) <= limit


@pytest.mark.parametrize("cached", [False, True])
def test_each_footer_is_read_and_parsed_once_when_a_reader_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
):
    # The schema is looked at before the dataset opens the files: both take the footer stage's
    # layouts, so the reader does not read the footers a second time.
    from shardstream.tables import footers, layout

    folder = tmp_path / "plain"
    folder.mkdir()
    for number in range(3):
        table = pa.table({"id": pa.array(range(number * 10, number * 10 + 10), pa.int64())})
        pq.write_table(table, folder / f"part-{number}.parquet", row_group_size=5)
    parsed: list[str] = []

    def counted(key: str, *args: Any) -> Any:
        parsed.append(key)
        return parse(key, *args)

    parse = layout.layout_from_footer
    monkeypatch.setattr(footers, "layout_from_footer", counted)
    cache = str(tmp_path / "cache") if cached else None
    with make_batch_reader(
        f"file://{folder}", shuffle_row_groups=False, cache_location=cache
    ) as reader:
        assert sorted(int(i) for batch in reader for i in batch.id) == list(range(30))
    assert sorted(parsed) == [f"part-{number}.parquet" for number in range(3)]
