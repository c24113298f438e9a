"""StreamingDataset over Parquet folders: the guarantees of MDS, with row groups as shards.

The "remote" is a local folder read through LocalStore, so row groups are fetched as byte
ranges into the cache folder exactly as from an object store (the S3 run is in
tests/integration/test_parquet_s3.py).
"""

from __future__ import annotations

import collections
import contextlib
import re
import shutil
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.parquet_data import FILES, ROWS, write_parquet
from tests.streaming_data import global_batches, ids_of, write_dataset

from shardstream import Stream, StreamingDataLoader, StreamingDataset
from shardstream.errors import (
    ConfigurationError,
    EmptyStreamError,
    ShardFormatError,
    ShardNotFoundError,
)

GROUPS = sum(-(-rows // group) for rows, group in FILES)


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_parquet(tmp_path_factory.mktemp("parquet") / "ds")


def dataset(remote: Path, local: Path | None, **kwargs: object) -> StreamingDataset:
    """Shuffled, 2 canonical nodes; ``tokens`` (ragged lists: no default collation) left out."""
    options: dict[str, object] = {
        "batch_size": 4, "shuffle": True, "num_canonical_nodes": 2,
        "columns": ["id", "score", "name", "blob"],
    }  # fmt: skip
    options.update(kwargs)
    where = (
        {"remote": str(remote)} if local is None else {"remote": str(remote), "local": str(local)}
    )
    return StreamingDataset(**where, **options)  # type: ignore[arg-type]


def epoch_ids(ds: StreamingDataset) -> list[int]:
    return [int(sample["id"]) for sample in ds]


def assert_once_up_to_repeats(ids: list[int], rows: int, ranks: int = 1) -> None:
    counts = collections.Counter(ids)
    assert set(counts) == set(range(rows))
    assert len(ids) - rows == -rows % ranks  # only the repeats that make the ranks equal


@pytest.mark.parametrize("seed", [0, 1, 9176, 2024])
@pytest.mark.parametrize("algo", ["py1e", "py1s", "naive"])
def test_one_epoch_reads_every_row_once(remote: Path, tmp_path: Path, seed: int, algo: str):
    ds = dataset(remote, tmp_path / "cache", shuffle_seed=seed, shuffle_algo=algo)
    ids = epoch_ids(ds)
    assert_once_up_to_repeats(ids, ROWS)
    assert ids != sorted(ids)
    assert (ds.num_samples, ds.num_shards) == (ROWS, GROUPS)


def test_the_order_depends_on_the_seed_only(remote: Path, tmp_path: Path):
    first = epoch_ids(dataset(remote, tmp_path / "a", shuffle_seed=5))
    assert epoch_ids(dataset(remote, tmp_path / "b", shuffle_seed=5)) == first
    assert epoch_ids(dataset(remote, None, shuffle_seed=5)) == first  # read in place
    in_place = StreamingDataset(local=str(remote), batch_size=4, shuffle=True,
                                num_canonical_nodes=2, shuffle_seed=5)  # fmt: skip
    assert epoch_ids(in_place) == first  # read in place or fetched: the same rows in order


def test_two_ranks_with_two_workers_yield_as_many_rows_and_the_same_global_batches(
    remote: Path, tmp_path: Path
):
    single = dataset(remote, tmp_path / "one", batch_size=8, rank=0, world_size=1)
    reference = global_batches([ids_of(StreamingDataLoader(single, batch_size=8))], 8)
    per_rank = []
    for rank in range(2):
        ds = dataset(remote, tmp_path / "two", batch_size=4, rank=rank, world_size=2,
                     ranks_per_node=2)  # fmt: skip
        per_rank.append(ids_of(StreamingDataLoader(ds, batch_size=4, num_workers=2)))
    assert len(per_rank[0]) == len(per_rank[1])
    assert global_batches(per_rank, 4) == reference
    assert_once_up_to_repeats([i for ids in per_rank for i in ids], ROWS, 2)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_on_another_topology_continues_exactly(
    remote: Path, tmp_path: Path, workers: int
):
    full = global_batches([epoch_ids(dataset(remote, tmp_path / "ref", batch_size=8))], 8)
    ds = dataset(remote, tmp_path / "one", batch_size=8)
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=workers)
    seen = 0
    for batch in loader:
        seen += len(batch["id"])
        if seen == 48:
            state = loader.state_dict()
            break
    assert (state["epoch"], state["sample_in_epoch"]) == (0, 48)
    per_rank = []
    for rank in range(2):
        resumed = dataset(remote, tmp_path / "two", batch_size=4, rank=rank, world_size=2,
                          ranks_per_node=2)  # fmt: skip
        resumed.load_state_dict(state)
        per_rank.append(ids_of(StreamingDataLoader(resumed, batch_size=4, num_workers=workers)))
    assert global_batches(per_rank, 4) == full[6:]


def test_epochs_differ_and_set_epoch_replays(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache")
    first, second = epoch_ids(ds), epoch_ids(ds)
    assert first != second
    assert_once_up_to_repeats(second, ROWS)
    ds.set_epoch(0)
    assert epoch_ids(ds) == first


def test_projected_columns_are_the_only_ones_read(remote: Path, tmp_path: Path):
    ds = dataset(remote, tmp_path / "cache", columns=["name", "id"])
    sample = next(iter(ds))
    assert list(sample) == ["name", "id"]
    batch = next(iter(StreamingDataLoader(ds, batch_size=4, num_workers=0)))
    assert list(batch) == ["name", "id"]
    assert list(dataset(remote, tmp_path / "all", columns=None)[0]) == [
        "id", "score", "name", "blob", "tokens"
    ]  # fmt: skip
    streams = [Stream(remote=str(remote), local=str(tmp_path / "s"), columns=["name"])]
    assert list(StreamingDataset(streams=streams, batch_size=4)[7]) == ["name"]


def test_values_keep_their_types(remote: Path, tmp_path: Path):
    row = dataset(remote, tmp_path / "cache", columns=None)[137]
    assert row["id"] == 137
    assert isinstance(row["id"], np.integer)
    assert row["score"] == np.float32(137 / 4)
    assert row["name"] == "row-137"
    assert row["blob"] == bytes([137]) * (137 % 9)
    assert row["tokens"].tolist() == list(range(137 % 5))


def test_remote_row_groups_are_fetched_alone_and_read_back(remote: Path, tmp_path: Path):
    local = tmp_path / "cache"
    ds = dataset(remote, local)
    assert ds[140]["id"] == 140  # row 10 of part-002's first row group
    cached = sorted(p.name for p in local.iterdir() if p.is_file())
    assert len(cached) == 1
    assert re.fullmatch(r"part-002\.parquet\.[0-9a-f]{8}\.rowgroup-0", cached[0])
    metadata = pq.ParquetFile(remote / "part-002.parquet").metadata.row_group(0)
    span = sum(metadata.column(c).total_compressed_size for c in range(metadata.num_columns))
    assert (local / cached[0]).stat().st_size == span  # the span alone, no footer, no holes
    assert (local / ".shardstream" / "parquet-index.json").exists()
    expected = pq.ParquetFile(remote / "part-002.parquet").read_row_group(0).to_pylist()
    view = ds._prepare().datasets[0].shard_view(4)  # 3 + 1 row groups before it
    assert [view.get(i)["name"] for i in range(len(view))] == [r["name"] for r in expected]
    assert_once_up_to_repeats(epoch_ids(ds), ROWS)
    assert len(list(local.glob("*.rowgroup-*"))) == GROUPS


def test_a_cache_limit_evicts_row_groups_and_the_epoch_stays_whole(remote: Path, tmp_path: Path):
    local = tmp_path / "cache"
    probe = dataset(remote, tmp_path / "probe")
    epoch_ids(probe)
    groups = [p.stat().st_size for p in (tmp_path / "probe").glob("*.rowgroup-*")]
    kept = sum(  # the derived index and state count towards the limit too
        p.lstat().st_size for p in (tmp_path / "probe").rglob("*") if p.is_file()
    ) - sum(groups)
    limit = 3 * max(groups) + kept
    ds = dataset(remote, local, cache_limit=limit, predownload=4)
    peak, ids = 0, []
    for sample in ds:
        ids.append(int(sample["id"]))
        total = 0
        for path in local.glob("*.rowgroup-*"):
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
        peak = max(peak, total)
    assert_once_up_to_repeats(ids, ROWS)
    assert 0 < peak <= limit
    assert len(list(local.glob("*.rowgroup-*"))) < GROUPS  # some were evicted


def test_the_derived_index_is_read_once_and_again_for_changed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from shardstream.tables import layout_index

    remote = write_parquet(tmp_path / "remote")
    local = tmp_path / "cache"
    footers: list[str] = []
    original = layout_index._remote_layout

    def counting(store, key, info, options):
        footers.append(key)
        return original(store, key, info, options)

    monkeypatch.setattr(layout_index, "_remote_layout", counting)
    assert_once_up_to_repeats(epoch_ids(dataset(remote, local)), ROWS)
    assert len(footers) == len(FILES)
    dataset(remote, local).prepare()
    assert len(footers) == len(FILES)  # sizes and etags unchanged: no footer read
    write_parquet(remote, [(30, 10)], first=1000)  # part-000 rewritten, 30 other rows
    assert list(local.glob("part-000.parquet.*.rowgroup-2"))
    ds = dataset(remote, local)
    ds.prepare()
    assert footers[len(FILES) :] == ["part-000.parquet"]
    assert not list(local.glob("part-000.parquet.*.rowgroup-*"))  # its old row groups are gone
    ids = epoch_ids(ds)
    assert set(ids) == set(range(1000, 1030)) | set(range(130, ROWS))


def test_dataloader_workers_do_not_change_the_batches(remote: Path, tmp_path: Path):
    in_process = ids_of(StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4))
    spawned = StreamingDataLoader(dataset(remote, tmp_path / "c"), batch_size=4, num_workers=2,
                                  multiprocessing_context="spawn")  # fmt: skip
    assert ids_of(spawned) == in_process


def test_parquet_and_mds_streams_mix(remote: Path, tmp_path: Path):
    mds = write_dataset(tmp_path / "mds", 100, first=10_000)
    ds = StreamingDataset(
        streams=[Stream(remote=str(remote), local=str(tmp_path / "p"), columns=["id"]),
                 Stream(remote=str(mds), local=str(tmp_path / "m"))],
        batch_size=4, shuffle=True,
    )  # fmt: skip
    ids = epoch_ids(ds)
    assert set(ids) == set(range(ROWS)) | set(range(10_000, 10_100))


def test_a_file_that_is_not_parquet_is_named(tmp_path: Path):
    root = write_parquet(tmp_path / "ds")
    (root / "part-001.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ShardFormatError, match=r"part-001\.parquet is not a Parquet file"):
        StreamingDataset(local=str(root), batch_size=4).prepare()
    with pytest.raises(ShardFormatError, match=r"part-001\.parquet is not a Parquet file"):
        dataset(root, tmp_path / "cache").prepare()


def test_a_missing_projected_column_is_named(remote: Path, tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"\['nope'\] not in .*part-000\.parquet"):
        dataset(remote, tmp_path / "cache", columns=["id", "nope"]).prepare()


def test_files_with_other_columns_need_a_projection(tmp_path: Path):
    root = write_parquet(tmp_path / "ds", [(20, 10)])
    table = pq.read_table(root / "part-000.parquet").drop_columns(["blob"])
    pq.write_table(table, root / "part-001.parquet")
    with pytest.raises(ShardFormatError, match=r"part-001\.parquet has the columns"):
        StreamingDataset(local=str(root), batch_size=4).prepare()
    ds = StreamingDataset(local=str(root), batch_size=4, columns=["id", "name"])
    assert len(ds) == 40


def test_a_folder_without_data_and_columns_on_mds_are_refused(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardNotFoundError, match=r"no index\.json and no"):
        StreamingDataset(local=str(tmp_path / "empty"), batch_size=4).prepare()
    mds = write_dataset(tmp_path / "mds", 10)
    with pytest.raises(ConfigurationError, match="apply to Parquet streams only"):
        StreamingDataset(local=str(mds), batch_size=4, columns=["id"]).prepare()
    with pytest.raises(ConfigurationError, match="format="):
        Stream(local=str(mds), format="orc")


def test_format_parquet_is_explicit(remote: Path, tmp_path: Path):
    ds = StreamingDataset(streams=[Stream(remote=str(remote), local=str(tmp_path / "c"),
                                          format="parquet")], batch_size=4)  # fmt: skip
    assert ds.num_samples == ROWS


@settings(max_examples=12, deadline=None)
@given(
    files=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 15)), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 6),
)
def test_random_row_groups_are_read_exactly_once(
    files: list[tuple[int, int]], seed: int, batch: int
):
    rows = sum(count for count, _ in files)
    with tempfile.TemporaryDirectory() as folder:
        root = write_parquet(Path(folder) / "ds", files, compression="none")
        ds = StreamingDataset(local=str(root), batch_size=batch, shuffle=True,
                              shuffle_seed=seed, num_canonical_nodes=3)  # fmt: skip
        assert_once_up_to_repeats(epoch_ids(ds), rows)
        shutil.rmtree(root)


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rows of FILES spread over ``year=<2020 + id % 3>/kind=<a|b>`` folders."""
    root = tmp_path_factory.mktemp("partitioned") / "ds"
    table = pq.read_table(write_parquet(tmp_path_factory.mktemp("flat") / "ds"))
    for year in range(2020, 2023):
        for kind in "ab":
            ids = table.column("id").to_numpy()
            mask = (ids % 3 == year - 2020) & ((ids % 2 == 0) == (kind == "a"))
            folder = root / f"year={year}" / f"kind={kind}"
            folder.mkdir(parents=True)
            pq.write_table(table.filter(mask), folder / "part-0.parquet", row_group_size=9)
    return root


def rows_of(ds: StreamingDataset) -> dict[int, dict[str, object]]:
    return {int(sample["id"]): sample for sample in ds}


@pytest.mark.parametrize("fetched", [False, True])
def test_partition_folders_are_columns_after_the_files_own(
    partitioned: Path, tmp_path: Path, fetched: bool
):
    where = {"remote": str(partitioned), "local": str(tmp_path / "c")} if fetched else {}
    ds = StreamingDataset(**where or {"local": str(partitioned)}, batch_size=ROWS)  # type: ignore[arg-type]
    rows = rows_of(ds)
    assert sorted(rows) == list(range(ROWS))
    for i, row in rows.items():
        assert list(row)[-2:] == ["year", "kind"]
        assert row["year"] == 2020 + i % 3
        assert isinstance(row["year"], np.integer)
        assert row["kind"] == ("a" if i % 2 == 0 else "b")


def test_a_projection_may_name_partition_columns_in_any_order(partitioned: Path):
    ds = StreamingDataset(local=str(partitioned), batch_size=ROWS, columns=["kind", "id"])
    rows = rows_of(ds)
    assert all(list(row) == ["kind", "id"] for row in rows.values())
    assert all(row["kind"] == "ab"[i % 2] for i, row in rows.items())
    batch = next(iter(StreamingDataLoader(ds, batch_size=ROWS)))
    assert batch["kind"] == ["ab"[int(i) % 2] for i in batch["id"]]


def test_filters_leave_out_whole_files_by_their_partition_values(partitioned: Path):
    keep = [[("year", ">=", 2021), ("kind", "=", "a")], [("year", "=", "2020"), ("id", "<", 0)]]
    ds = StreamingDataset(streams=[Stream(local=str(partitioned), filters=keep)], batch_size=4)
    # year=2020 stays: its id term is not applied to files; year 2021-2022 of kind a stay.
    expected = [i for i in range(ROWS) if i % 3 == 0 or i % 2 == 0]
    assert sorted(rows_of(ds)) == expected
    assert ds.num_samples == len(expected)


def test_a_partition_folder_may_not_shadow_a_column(tmp_path: Path):
    root = write_parquet(tmp_path / "flat", [(10, 10)])
    (root / "id=3").mkdir()
    (root / "part-000.parquet").rename(root / "id=3" / "part-000.parquet")
    with pytest.raises(ConfigurationError, match="partition folder of 'id'"):
        StreamingDataset(local=str(root), batch_size=4).prepare()


def test_filters_on_an_mds_stream_are_refused(tmp_path: Path):
    mds = write_dataset(tmp_path / "mds", 10)
    with pytest.raises(ConfigurationError, match="apply to Parquet streams only"):
        StreamingDataset(streams=[Stream(local=str(mds), filters=[("a", "=", 1)])],
                         batch_size=4).prepare()  # fmt: skip


@pytest.mark.parametrize(
    ("term", "kind"),
    [(("year", ">=", "next year"), "int64"), (("kind", "=", date(2026, 11, 1)), "string")],
)
def test_a_filter_value_not_of_its_partition_type_is_an_error_naming_the_type(
    partitioned: Path, term: tuple[str, str, object], kind: str
):
    stream = Stream(local=str(partitioned), filters=[term])
    with pytest.raises(
        ConfigurationError, match=rf"'{term[0]}' is a partition column of type {kind}"
    ):
        StreamingDataset(streams=[stream], batch_size=4).prepare()


def test_a_filter_that_keeps_no_file_says_the_filter_did_it(partitioned: Path):
    stream = Stream(local=str(partitioned), filters=[("year", ">", "2030")])
    with pytest.raises(
        EmptyStreamError, match=r"filters \[\('year', '>', 2030\)\] keep none of its 6 files"
    ) as caught:
        StreamingDataset(streams=[stream], batch_size=4).prepare()
    assert "split" not in str(caught.value)


def two_files(root: Path, second: pa.Table) -> Path:
    """``part-0.parquet`` of ids 0-9 (``x`` int64) and ``part-1.parquet`` holding ``second``."""
    root.mkdir()
    first = pa.table({"id": pa.array(range(10), pa.int64()), "x": pa.array(range(10), pa.int64())})
    pq.write_table(first, root / "part-0.parquet")
    pq.write_table(second, root / "part-1.parquet")
    return root


@pytest.mark.parametrize("fetched", [False, True])
@pytest.mark.parametrize("kind", [pa.string(), pa.int32(), pa.float64()])
def test_a_column_of_another_type_in_a_later_file_is_refused_before_the_first_batch(
    tmp_path: Path, kind: pa.DataType, fetched: bool
):
    ids = pa.array(range(10, 20), pa.int64())
    values = pa.array(range(10), pa.int64()).cast(kind)
    root = two_files(tmp_path / "ds", pa.table({"id": ids, "x": values}))
    where = {"remote": str(root), "local": str(tmp_path / "c")} if fetched else {"local": str(root)}
    ds = StreamingDataset(**where, batch_size=4, columns=["x"])  # type: ignore[arg-type]
    with pytest.raises(
        ShardFormatError,
        match=rf"column 'x' is {kind} in part-1.parquet but int64 in part-0.parquet",
    ):
        ds.prepare()


def test_types_that_differ_only_in_layout_read_as_one(tmp_path: Path):
    root = tmp_path / "ds"
    root.mkdir()
    for number, kind in enumerate(
        [pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string())]
    ):
        ids = pa.array(range(5 * number, 5 * number + 5), pa.int64())
        labels = pa.array([f"row-{i}" for i in ids.to_pylist()]).cast(kind)
        pq.write_table(pa.table({"id": ids, "label": labels}), root / f"part-{number}.parquet")
    ds = StreamingDataset(local=str(root), batch_size=5)
    assert sorted((int(row["id"]), row["label"]) for row in ds) == [
        (i, f"row-{i}") for i in range(15)
    ]


def test_a_column_left_out_by_the_projection_may_differ(tmp_path: Path):
    root = two_files(tmp_path / "ds", pa.table({"id": pa.array(range(10, 20), pa.int64()),
                                                "x": pa.array(["a"] * 10)}))  # fmt: skip
    ds = StreamingDataset(local=str(root), batch_size=5, columns=["id"])
    assert sorted(int(row["id"]) for row in ds) == list(range(20))


@pytest.mark.parametrize("cached", [False, True])
def test_files_reads_only_the_files_named(remote: Path, tmp_path: Path, cached: bool):
    # part-001 holds ids 130..136, part-003 ids 250..299 (FILES).
    local = str(tmp_path / "cache") if cached else None
    stream = Stream(remote=str(remote), local=local, files=["part-003.parquet", "part-001.parquet"])
    ds = StreamingDataset(streams=[stream], batch_size=4, shuffle=False, columns=["id"])
    assert sorted(epoch_ids(ds)) == [*range(130, 137), *range(250, 300)]
    missing = Stream(
        remote=str(remote), local=local, files=["part-001.parquet", "part-009.parquet"]
    )
    with pytest.raises(ShardNotFoundError, match=r"no file 'part-009\.parquet'.*files="):
        list(StreamingDataset(streams=[missing], batch_size=4, columns=["id"]))


@pytest.mark.parametrize(
    ("files", "fmt", "match"),
    [
        ("part-001.parquet", None, "non-empty list"),
        ([], None, "non-empty list"),
        (["/abs/part.parquet"], None, "paths under the stream's root"),
        (["../up.parquet"], None, "paths under the stream's root"),
        (["part-001.parquet"], "mds", "files= applies to Parquet"),
    ],
)
def test_bad_files_are_refused(remote: Path, files: object, fmt: str | None, match: str):
    with pytest.raises(ConfigurationError, match=match):
        Stream(remote=str(remote), files=files, format=fmt)  # type: ignore[arg-type]
