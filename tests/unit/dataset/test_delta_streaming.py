"""Delta tables streamed in place: a version's files with every guarantee of Parquet streaming."""

from __future__ import annotations

import collections
import logging
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from tests.delta_data import (
    add_file,
    delete_with_vector,
    rename_column,
    rows,
    set_reader_feature,
    table_with_versions,
    write,
)
from tests.parquet_data import write_parquet
from tests.streaming_data import global_batches, ids_of

from shardstream import Stream, StreamingDataLoader, StreamingDataset
from shardstream.errors import (
    ConfigurationError,
    EmptyStreamError,
    MissingDependencyError,
    ShardFormatError,
    TableVersionError,
    UnsupportedTableError,
)

LATEST = set(range(5, 60))  # version 2 of table_with_versions


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return table_with_versions(tmp_path / "table")


def delta(root: Path, **kwargs: object) -> StreamingDataset:
    options: dict[str, object] = {"batch_size": 4, "shuffle": True, "num_canonical_nodes": 2}
    options.update(kwargs)
    return StreamingDataset(remote=str(root), format="delta", **options)  # type: ignore[arg-type]


def ids(ds: StreamingDataset) -> list[int]:
    return [int(sample["id"]) for sample in ds]


def test_the_latest_version_streams_each_row_once_without_deleted_or_removed_files(table: Path):
    # The folder still holds version 0's files that the delete rewrote: they must not be read.
    assert len(list(table.rglob("*.parquet"))) > len(DeltaTable(str(table)).file_uris())
    ds = delta(table)
    got = ids(ds)
    assert set(got) == LATEST
    assert len(got) == len(LATEST)
    row = ds[0]
    assert list(row) == ["id", "name", "year"]  # the schema's order, partition column included
    assert row["name"] == f"row-{row['id']}"
    assert row["year"] == 2020 + row["id"] % 2


def test_a_delta_table_is_detected_without_format(table: Path):
    ds = StreamingDataset(remote=str(table), batch_size=4)
    assert set(ids(ds)) == LATEST


def test_format_parquet_refuses_a_delta_folder(table: Path):
    with pytest.raises(ConfigurationError, match=r"is a Delta table.*format='delta'"):
        StreamingDataset(remote=str(table), format="parquet", batch_size=4).prepare()


def test_versions_by_number_and_by_time(table: Path):
    assert set(ids(delta(table, version=0))) == set(range(40))
    assert set(ids(delta(table, version=1))) == set(range(60))
    history = {e["version"]: e["timestamp"] for e in DeltaTable(str(table)).history()}
    at_one = datetime.fromtimestamp(history[1] / 1000, timezone.utc)
    assert delta(table, version=at_one).num_samples == 60
    assert delta(table, version=at_one.isoformat()).num_samples == 60
    with pytest.raises(TableVersionError, match=r"no version 9 yet: its latest is 2"):
        delta(table, version=9).prepare()
    with pytest.raises(TableVersionError, match=r"oldest version left, 0, was committed at"):
        delta(table, version=at_one - timedelta(days=1)).prepare()


def test_columns_project_and_partition_filters_skip_files(table: Path):
    ds = delta(table, columns=["year", "id"])
    assert list(ds[3]) == ["year", "id"]
    ds = StreamingDataset(
        streams=[Stream(remote=str(table), format="delta", filters=[("year", "=", 2021)])],
        batch_size=4,
    )
    assert set(ids(ds)) == {i for i in LATEST if i % 2}
    with pytest.raises(ConfigurationError, match=r"\['height'\] not in version 2 of the Delta"):
        delta(table, columns=["height"]).prepare()


def test_ranks_and_workers_see_the_global_batches_of_one_rank(table: Path, tmp_path: Path):
    # Version 1 (60 rows: no rank needs a repeated row, which could differ by topology).
    single = ids_of(StreamingDataLoader(delta(table, batch_size=8, version=1), 8))
    per_rank = [
        ids_of(
            StreamingDataLoader(
                delta(table, batch_size=4, version=1, rank=rank, world_size=2, ranks_per_node=2),
                batch_size=4, num_workers=2,
            )
        )
        for rank in range(2)
    ]  # fmt: skip
    assert global_batches(per_rank, 4) == global_batches([single], 8)
    assert collections.Counter(i for r in per_rank for i in r) == dict.fromkeys(range(60), 1)


def test_a_resumed_run_reads_the_version_it_was_saved_on(
    table: Path, caplog: pytest.LogCaptureFixture
):
    loader = StreamingDataLoader(delta(table), batch_size=4)
    it = iter(loader)
    seen = [int(i) for _ in range(3) for i in next(it)["id"]]
    state = loader.state_dict()
    assert state["table_versions"] == [2]
    write(table, rows(60, 30))  # the table moves on: version 3
    later = delta(table)
    assert later.num_samples == len(LATEST) + 30
    assert later.state_dict(0, False)["fingerprint"] != state["fingerprint"]
    resumed = StreamingDataLoader(delta(table), batch_size=4)
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(state)
    assert "resuming on version 2 of the Delta table" in caplog.text
    assert "at version 3 now" in caplog.text
    rest = ids_of(resumed)
    assert set(seen) | set(rest) == LATEST
    assert not set(seen) & set(rest)
    assert resumed.state_dict()["table_versions"] == [2]


def test_a_state_of_another_version_is_refused_where_the_version_is_named(table: Path):
    loader = StreamingDataLoader(delta(table, version=1), batch_size=4)
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(ConfigurationError, match="saved on other data"):
        StreamingDataLoader(delta(table, version=2), batch_size=4).load_state_dict(state)


def test_a_vacuumed_version_names_itself_and_the_oldest_left(tmp_path: Path):
    root = tmp_path / "vacuumed"
    write(root, rows(0, 10))
    write(root, rows(10, 10), mode="overwrite")
    write(root, rows(20, 5))
    DeltaTable(str(root)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert set(ids(delta(root, version=1))) == set(range(10, 20))
    with pytest.raises(
        TableVersionError,
        match=r"version 0 of the Delta table .* has been vacuumed: .*the oldest version whose "
        r"files are all there is 1",
    ):
        delta(root, version=0).prepare()


def test_a_version_whose_log_was_cleaned_up_names_the_oldest_left(tmp_path: Path):
    root = tmp_path / "cleaned"
    for first in range(0, 30, 10):
        write(root, rows(first, 10))
    DeltaTable(str(root)).create_checkpoint()
    for version in (0, 1):
        (root / "_delta_log" / f"{version:020d}.json").unlink()
    assert delta(root).num_samples == 30
    with pytest.raises(TableVersionError, match=r"version 1 .*log entries are gone.*oldest "
                       r"version left is 2"):  # fmt: skip
        delta(root, version=1).prepare()


def test_deletion_vectors_remove_rows_without_rewriting_files(tmp_path: Path):
    root = tmp_path / "vectors"
    write(root, rows(0, 20), partition_by=["year"],
          configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    keys = sorted(pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))["path"].to_pylist())
    delete_with_vector(root, keys[0], [1, 4, 8, 9])  # year=2020 holds ids 0, 2, .., 18
    ds = delta(root)
    assert sorted(ids(ds)) == sorted(set(range(20)) - {2, 8, 16, 18})
    assert ds.num_samples == 16
    assert set(ids(delta(root, version=0))) == set(range(20))


def test_renamed_columns_read_by_their_new_name(tmp_path: Path):
    root = tmp_path / "mapped"
    write(root, rows(0, 12), configuration={"delta.columnMapping.mode": "name"})
    rename_column(root, "name", "label")
    ds = delta(root, columns=["id", "label"])
    assert {int(s["id"]): s["label"] for s in ds} == {i: f"row-{i}" for i in range(12)}
    assert list(delta(root, version=0)[0]) == ["id", "name", "year"]


def test_columns_added_later_are_null_in_older_files(tmp_path: Path):
    root = tmp_path / "evolved"
    write(root, rows(0, 10))
    write(root, rows(10, 10).append_column("score", pa.array([1.5] * 10)), schema_mode="merge")
    by_id = {int(s["id"]): s["score"] for s in delta(root)}
    assert {by_id[i] for i in range(10)} == {None}
    assert {by_id[i] for i in range(10, 20)} == {1.5}
    assert set(delta(root, columns=["score"])[0]) == {"score"}


def test_an_unsupported_reader_feature_is_refused_by_name(tmp_path: Path):
    root = tmp_path / "featured"
    write(root, rows(0, 4))
    set_reader_feature(root, "futureFeature")
    with pytest.raises(UnsupportedTableError, match="futureFeature"):
        delta(root).prepare()
    assert delta(root, version=0).num_samples == 4


def test_without_deltalake_the_error_names_the_extra(table: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "deltalake", None)
    with pytest.raises(MissingDependencyError, match=r"shardstream\[delta\]"):
        delta(table).prepare()


def test_a_folder_without_a_log_is_not_a_delta_table(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"not a Delta table: it has no _delta_log/"):
        delta(tmp_path / "empty").prepare()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": -1}, "version must be >= 0"),
        ({"version": 1.5}, "version must be a version number"),
        ({"version": "yesterday"}, "not ISO 8601"),
        ({"version": 1, "format": "mds"}, "version= applies to Delta tables"),
    ],
)
def test_bad_versions_are_refused_before_any_read(kwargs: dict[str, object], message: str):
    with pytest.raises(ConfigurationError, match=message):
        Stream(remote="/nowhere", **kwargs)  # type: ignore[arg-type]


def test_format_and_version_belong_on_each_stream_of_a_mix(table: Path):
    with pytest.raises(ConfigurationError, match="give them to each Stream"):
        StreamingDataset(streams=[Stream(remote=str(table))], version=1, batch_size=4)


def test_a_version_of_a_folder_that_is_not_a_delta_table_is_refused(tmp_path: Path):
    folder = write_parquet(tmp_path / "plain")
    with pytest.raises(ConfigurationError, match=r"version= applies to Delta tables; .* Parquet"):
        StreamingDataset(remote=str(folder), version=1, batch_size=4).prepare()


def test_partition_values_that_are_escaped_in_paths(tmp_path: Path):
    root = tmp_path / "escaped"
    values = ["a:b", "c d", "e/f", "g%h"]
    table = pa.table({"id": pa.array(range(4), pa.int64()), "kind": values})
    write(root, table, partition_by=["kind"])
    assert sorted((int(s["id"]), s["kind"]) for s in delta(root)) == list(enumerate(values))


@pytest.fixture
def by_day(tmp_path: Path) -> Path:
    """Ids 0-9 partitioned by a date column ``day``, 2026-10-29 to 2026-11-02, two a day."""
    root = tmp_path / "by_day"
    days = [date(2026, 10, 29) + timedelta(days=i // 2) for i in range(10)]
    write(root, pa.table({"id": pa.array(range(10), pa.int64()), "day": days}),
          partition_by=["day"])  # fmt: skip
    return root


def filtered(root: Path, filters: list[tuple[str, str, object]]) -> StreamingDataset:
    stream = Stream(local=str(root), format="delta", filters=filters)
    return StreamingDataset(streams=[stream], batch_size=4)


@pytest.mark.parametrize("value", ["2026-11-01", date(2026, 11, 1)])
def test_text_filters_on_a_date_partition_read_as_dates_as_deltalake_does(
    by_day: Path, value: object
):
    kept = DeltaTable(str(by_day)).file_uris(file_pruning_predicate=[("day", ">=", "2026-11-01")])
    wanted = sorted(i for uri in kept for i in pq.read_table(uri).column("id").to_pylist())
    assert sorted(ids(filtered(by_day, [("day", ">=", value)]))) == wanted == [6, 7, 8, 9]


def test_a_filter_value_that_is_no_date_names_the_column_type(by_day: Path):
    with pytest.raises(ConfigurationError, match=r"'day' is a partition column of type date32"):
        filtered(by_day, [("day", ">=", "Nov 1")]).prepare()


def test_a_filter_that_keeps_no_file_says_the_filter_did_it(by_day: Path):
    with pytest.raises(
        EmptyStreamError, match=r"filters \[\('day', '>'.*keep none of its 5 files"
    ) as caught:
        filtered(by_day, [("day", ">", "2027-01-01")]).prepare()
    assert "split" not in str(caught.value)


def test_a_file_whose_column_type_the_schema_does_not_read_is_refused_by_name(tmp_path: Path):
    root = tmp_path / "t"
    write(root, rows(0, 10, year=2020))
    other = rows(10, 5, year=2020).set_column(0, "id", pa.array([str(i) for i in range(10, 15)]))
    add_file(root, "foreign.parquet", other)
    with pytest.raises(
        ShardFormatError, match=r"column 'id' is string in foreign.parquet, .* its type int64"
    ):
        delta(root).prepare()
    assert len(list(delta(root, columns=["name"]))) == 15  # a projection without it reads


def test_a_file_of_a_narrower_type_is_read_widened_to_the_schema(tmp_path: Path):
    root = tmp_path / "t"
    write(root, rows(0, 10, year=2020))
    narrow = rows(10, 5, year=2020).cast(
        pa.schema([("id", pa.int32()), ("name", pa.string()), ("year", pa.int64())])
    )
    add_file(root, "narrow.parquet", narrow)
    rows_read = list(delta(root, shuffle=False))
    assert sorted(int(row["id"]) for row in rows_read) == list(range(15))
    assert {type(row["id"]) for row in rows_read} == {np.int64}
