"""Delta tables streamed from a real S3-compatible server (SeaweedFS).

The log is copied into the cache, the files read as ranged GETs of their row groups, and the
node cache and its limit work as for any stream.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from tests.delta_data import (
    delete_with_vector,
    rows,
    same_sized_commits,
    table_with_versions,
    write,
)
from tests.streaming_data import ids_of

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.cache.layout import kept_bytes
from shardstream.converters import delta_to_mds
from shardstream.errors import TableVersionError
from shardstream.storage import S3Store

from .conftest import S3Server

pytestmark = pytest.mark.s3

LATEST = set(range(5, 60))


def upload(url: str, folder: Path) -> None:
    """Copy the table's new files up (log files and data files never change once written)."""
    store = S3Store(url)
    there = set(store.list(""))
    for path in sorted(folder.rglob("*")):
        key = path.relative_to(folder).as_posix()
        if path.is_file() and key not in there:
            store.put_file(str(path), key)


def remove_gone(server: S3Server, url: str, folder: Path) -> None:
    """Delete the objects whose files are gone locally (what a vacuum does on the store)."""
    here = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    filesystem = server.filesystem()
    for key in S3Store(url).list(""):
        if key not in here:
            filesystem.rm(url.removeprefix("s3://") + "/" + key)


def delta(url: str, local: Path, **kwargs: object) -> StreamingDataset:
    options: dict[str, object] = {"batch_size": 4, "shuffle": True, "num_canonical_nodes": 2}
    options.update(kwargs)
    return StreamingDataset(remote=url, local=str(local), **options)  # type: ignore[arg-type]


def test_an_s3_delta_table_streams_its_latest_version_through_the_cache(
    s3_env: S3Server, tmp_path: Path
):
    source = table_with_versions(tmp_path / "table")
    url = s3_env.url("delta")
    upload(url, source)
    cache = tmp_path / "cache"
    everything = delta(url, tmp_path / "whole")
    assert {int(s["id"]) for s in everything} == LATEST
    groups = len(everything.shards)
    delta(url, cache).prepare()  # the log copied and the footers read: what the cache keeps
    state = kept_bytes(str(cache))
    ds = delta(url, cache, cache_limit=state + 700)  # room for a few row groups: evicts
    assert {int(s["id"]) for s in ds} == LATEST
    cached = [p for p in cache.rglob("*.rowgroup-*") if ".shardstream" not in p.parts]
    assert cached
    assert len(cached) < groups
    assert sum(p.stat().st_size for p in cached) <= 700
    assert (cache / ".shardstream" / "delta-log" / "_delta_log").is_dir()
    assert {int(s["id"]) for s in delta(url, tmp_path / "v0", version=0)} == set(range(40))


def test_an_s3_run_resumes_on_its_version_after_the_table_moved_on(
    s3_env: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    source = table_with_versions(tmp_path / "table")
    url = s3_env.url("delta-resume")
    upload(url, source)
    cache = tmp_path / "cache"
    loader = StreamingDataLoader(delta(url, cache), batch_size=4)
    it = iter(loader)
    seen = [int(i) for _ in range(2) for i in next(it)["id"]]
    state = loader.state_dict()
    write(source, rows(60, 12))
    upload(url, source)
    assert delta(url, tmp_path / "fresh").num_samples == len(LATEST) + 12
    resumed = StreamingDataLoader(delta(url, cache), batch_size=4, num_workers=2)
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(state)
    assert "at version 3 now" in caplog.text
    rest = ids_of(resumed)
    assert set(seen) | set(rest) == LATEST
    assert not set(seen) & set(rest)


def test_s3_deletion_vectors_and_vacuum(s3_env: S3Server, tmp_path: Path):
    source = tmp_path / "table"
    write(source, rows(0, 20), partition_by=["year"],
          configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    keys = sorted(
        pa.table(DeltaTable(str(source)).get_add_actions(flatten=True))["path"].to_pylist()
    )
    delete_with_vector(source, keys[1], [0, 3])  # year=2021 holds ids 1, 3, .., 19
    write(source, rows(20, 4, year=2022), mode="overwrite")
    url = s3_env.url("delta-vectors")
    upload(url, source)
    assert sorted(int(s["id"]) for s in delta(url, tmp_path / "v1", version=1)) == sorted(
        set(range(20)) - {1, 7}
    )
    DeltaTable(str(source)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    upload(url, source)
    remove_gone(s3_env, url, source)
    with pytest.raises(TableVersionError, match=r"version 1 .* vacuumed.* oldest version whose "
                       r"files are all there is 2"):  # fmt: skip
        delta(url, tmp_path / "v1", version=1).prepare()
    assert {int(s["id"]) for s in delta(url, tmp_path / "v1")} == set(range(20, 24))


def test_an_s3_delta_table_converts_to_mds(s3_env: S3Server, tmp_path: Path):
    source = table_with_versions(tmp_path / "table")
    url = s3_env.url("delta-convert")
    upload(url, source)
    out = tmp_path / "mds"
    assert delta_to_mds(url, str(out), version=1, progress=False) == 60
    index = json.loads((out / "index.json").read_text())
    assert index["source"] == {"format": "delta", "table": url, "version": 1}
    got = sorted(int(s["id"]) for s in StreamingDataset(local=str(out), batch_size=4))
    assert got == list(range(60))


def test_an_s3_table_written_again_at_its_path_is_not_read_through_the_old_log(
    s3_env: S3Server, tmp_path: Path
):
    # Same commit names and sizes, other rows: the copies are told apart by their ETags.
    old, new = tmp_path / "old", tmp_path / "new"
    write(old, rows(10, 40))
    write(old, rows(60, 10))
    write(new, rows(50, 40))
    write(new, rows(90, 10))
    same_sized_commits(old, new)
    url = s3_env.url("delta-recreated")
    upload(url, old)
    cache = tmp_path / "cache"
    assert sorted(int(s["id"]) for s in delta(url, cache)) == [*range(10, 50), *range(60, 70)]
    remove_gone(s3_env, url, tmp_path / "empty")  # the table deleted ...
    upload(url, new)  # ... and written again
    assert sorted(int(s["id"]) for s in delta(url, cache)) == list(range(50, 100))
