"""A Delta table's version written as MDS: by dataframe_to_mds, delta_to_mds and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from tests.cli_run import run
from tests.delta_data import delete_with_vector, rows, table_with_versions, write

from shardstream import StreamingDataset, dataframe_to_mds
from shardstream.converters import delta_to_mds
from shardstream.errors import ConfigurationError


def ids(folder: Path) -> list[int]:
    return sorted(int(s["id"]) for s in StreamingDataset(local=str(folder), batch_size=4))


def source(folder: Path) -> dict[str, object]:
    return dict(json.loads((folder / "index.json").read_text())["source"])


def test_dataframe_to_mds_writes_the_version_of_a_delta_table(tmp_path: Path):
    table = table_with_versions(tmp_path / "table")
    out = tmp_path / "mds"
    local, remote = dataframe_to_mds(
        DeltaTable(str(table), version=1), mds_kwargs={"out": str(out)}, progress=False
    )
    assert (local, remote) == (str(out), "")
    assert ids(out) == list(range(60))
    assert source(out) == {"format": "delta", "table": str(table), "version": 1}
    by_id = {int(s["id"]): s for s in StreamingDataset(local=str(out), batch_size=4)}
    assert by_id[7] == {"id": 7, "name": "row-7", "year": 2021}


def test_deletion_vectors_and_projection_apply_when_converting(tmp_path: Path):
    table = tmp_path / "table"
    write(table, rows(0, 20), configuration={"delta.enableDeletionVectors": "true"})
    (key,) = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist()
    delete_with_vector(table, key, [0, 19])
    out = tmp_path / "mds"
    written = delta_to_mds(str(table), str(out), read_columns=["id"], progress=False)
    assert written == 18
    assert ids(out) == list(range(1, 19))
    assert source(out)["version"] == 1
    with pytest.raises(ConfigurationError, match=r"\['nope'\] not in version 1"):
        delta_to_mds(str(table), str(tmp_path / "bad"), read_columns=["nope"], progress=False)


def test_a_udf_is_refused_for_a_delta_table(tmp_path: Path):
    table = table_with_versions(tmp_path / "table")
    with pytest.raises(ConfigurationError, match="udf_iterable applies to Spark DataFrames"):
        dataframe_to_mds(
            DeltaTable(str(table)), mds_kwargs={"out": str(tmp_path / "o")},
            udf_iterable=lambda frame: iter(()),
        )  # fmt: skip


def test_the_cli_converts_a_delta_folder_at_a_version(tmp_path: Path):
    table = table_with_versions(tmp_path / "table")
    out = tmp_path / "mds"
    done = run("convert", str(table), str(out), "--version", "0", "--quiet")
    assert "wrote 40 samples" in done.stdout
    assert ids(out) == list(range(40))
    assert source(out)["version"] == 0
    latest = tmp_path / "latest"
    run("convert", str(table), str(latest), "--from", "delta", "--quiet")
    assert ids(latest) == list(range(5, 60))
    assert source(latest)["version"] == 2


def _row_group_batches(
    table: Path, names: list[str] | None
) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The version's rows read file by file, row group by row group, straight from the files."""
    import pyarrow.parquet as pq

    from shardstream.storage import DownloadOptions
    from shardstream.tables.delta_log import read_snapshot
    from shardstream.tables.delta_snapshot import assemble

    snapshot, _ = read_snapshot(str(table), None, str(table), None, DownloadOptions())
    names = names or snapshot.names
    batches = []
    for file in snapshot.files:
        parquet = pq.ParquetFile(table / file.key)
        first = 0
        for group in range(parquet.metadata.num_row_groups):
            count = parquet.metadata.row_group(group).num_rows
            keep = file.window(first, count)
            first += count
            if keep is not None and not keep.any():
                continue
            physical = snapshot.physical(names, tuple(parquet.schema_arrow.names))
            read = parquet.read_row_group(group, columns=physical)
            batches += assemble(read, snapshot, file, names, keep).to_batches()
    schema = pa.schema([(name, snapshot.column(name).type) for name in names])
    return schema, batches


@pytest.mark.parametrize("names", [None, ["name", "id"]])
def test_delta_to_mds_writes_the_bytes_of_the_row_groups_read_straight(
    tmp_path: Path, names: list[str] | None
):
    from shardstream.converters import arrow_to_mds

    table = tmp_path / "table"
    options = {"delta.enableDeletionVectors": "true"}
    write(table, rows(0, 40), partition_by=["year"], configuration=options)
    write(table, rows(40, 20), partition_by=["year"])
    keys = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist()
    delete_with_vector(table, sorted(keys)[0], [1, 2, 9])
    out, expected = tmp_path / "mds", tmp_path / "expected"
    written = delta_to_mds(str(table), str(out), read_columns=names, size_limit=256, progress=False)
    schema, batches = _row_group_batches(table, names)
    origin = {"format": "delta", "table": str(table), "version": source(out)["version"]}
    arrow_to_mds(
        pa.RecordBatchReader.from_batches(schema, batches), str(expected), size_limit=256,
        progress=False, where="x", source=origin,
    )  # fmt: skip
    assert written == sum(len(batch) for batch in batches) > 0
    files = sorted(path.name for path in out.iterdir())
    assert len(files) > 3  # several shards
    assert files == sorted(path.name for path in expected.iterdir())
    for name in files:
        assert (out / name).read_bytes() == (expected / name).read_bytes(), name


def test_view_strings_from_an_arrow_rs_writer_take_deletion_vectors(tmp_path: Path):
    table = tmp_path / "table"
    data = rows(0, 20)
    data = data.set_column(1, "name", data.column("name").cast(pa.string_view()))
    write(table, data, configuration={"delta.enableDeletionVectors": "true"})
    (key,) = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist()
    delete_with_vector(table, key, [3])
    out = tmp_path / "mds"
    assert delta_to_mds(str(table), str(out), progress=False) == 19
    names = {int(s["id"]): s["name"] for s in StreamingDataset(local=str(out), batch_size=4)}
    assert names == {i: f"row-{i}" for i in range(20) if i != 3}
