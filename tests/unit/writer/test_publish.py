"""A write to a store is all or nothing: a plain folder as the store (``(local, remote)``).

The remote of a ``(local, remote)`` pair may be a plain folder: the writer publishes to it
through :class:`~shardstream.storage.LocalStore` exactly as to ``s3://`` (the S3 versions of
these cases are in ``tests/integration/test_rewrite_s3.py``).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import LocalDataset, MDSWriter
from shardstream.errors import DatasetExistsError, UploadError
from shardstream.storage import LocalStore
from shardstream.writer import mds_writer
from shardstream.writer.publish import is_ours, remove_unnamed, shard_basename


def write(out: Any, n: int, first: int = 0, **kwargs: Any) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(first, first + n):
            writer.write(sample(i))


def ids(folder: Path) -> list[int]:
    with LocalDataset(folder) as ds:
        return [int(ds[i]["id"]) for i in range(len(ds))]


def index_names(folder: Path) -> set[str]:
    index = json.loads((folder / "index.json").read_bytes())
    return {(s["zip_data"] or s["raw_data"])["basename"] for s in index["shards"]}


def test_shard_names_hold_the_write_token_only_for_a_store():
    assert shard_basename(3, None) == "shard.00003.mds"
    assert shard_basename(3, "0123456789ab") == "shard.0123456789ab.00003.mds"
    assert shard_basename(123456, "0123456789ab") == "shard.0123456789ab.123456.mds"
    assert shard_basename(3, "0123456789ab", "csv") == "shard.0123456789ab.00003.csv"


@pytest.mark.parametrize(
    ("key", "ours"),
    [
        ("shard.00000.mds", True),  # the reference's name
        ("shard.00000.mds.zstd", True),
        ("shard.0123456789ab.00007.mds.gz", True),
        ("shard.0123456789ab.00007.json", True),  # the text writers' shards and .meta files
        ("shard.00007.csv.meta.zstd", True),
        ("shard.00007.xsv.meta", True),
        ("shard.00007.txt", False),
        ("shard.00007.meta", False),
        ("part-00003-17/shard.00000.mds", True),  # a Spark task's folder, old and new
        ("part-00003-17-0123456789ab/index.json", True),
        ("index.json", False),  # the root index is replaced, never deleted
        ("notes.txt", False),
        ("shard.00000.mds.bak", False),  # not a compression's extension: a user's copy
        ("shard.00000.mds.txt.bak/x", False),
        ("shard.0000.mds", False),
        ("shard.XYZ.00000.mds", False),
        ("0/shard.00000.mds", False),  # a merge_index partition: the user's
        ("0/index.json", False),
        ("part-00003-17/notes.txt", False),
        ("deep/part-00003-17/shard.00000.mds", False),
        # Digits of other scripts match Python's \d: no writer writes them (e03e338 deleted).
        ("shard.\u0660\u0660\u0660\u0660\u0660.mds", False),
        ("shard.\uff10\uff10\uff10\uff10\uff10.mds", False),
        ("part-\u0663-\u0661/index.json", False),
    ],
)
def test_only_files_named_as_writers_name_them_are_ours(key: str, ours: bool):
    assert is_ours(key) is ours


def test_a_store_holding_a_dataset_is_refused_unless_exist_ok(tmp_path: Path):
    remote = tmp_path / "remote"
    write((str(tmp_path / "a"), str(remote)), 10)
    before = sorted(os.listdir(remote))
    with pytest.raises(DatasetExistsError, match=r"is not empty.*an index\.json.*exist_ok=True"):
        write((str(tmp_path / "b"), str(remote)), 5, first=100)
    assert sorted(os.listdir(remote)) == before
    check_dataset(remote, 10)
    write((str(tmp_path / "c"), str(remote)), 5, first=100, exist_ok=True)
    assert ids(remote) == list(range(100, 105))


def test_a_refused_pair_keeps_its_local_folder(tmp_path: Path):
    # The refusal must not delete the user's non-empty local folder on its way out.
    remote, local = tmp_path / "remote", tmp_path / "local"
    write((str(tmp_path / "a"), str(remote)), 10)
    local.mkdir()
    (local / "precious.txt").write_text("keep me")
    with pytest.raises(DatasetExistsError):
        write((str(local), str(remote)), 5)
    assert os.listdir(local) == ["precious.txt"]


def test_a_rewrite_that_fails_leaves_the_old_dataset_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    remote = tmp_path / "remote"
    write((str(tmp_path / "a"), str(remote)), 40)
    old_index = (remote / "index.json").read_bytes()

    class FailingAfterTwo(LocalStore):
        def put_file(self, local_path: str, key: str) -> None:
            if ".00002." in key:
                raise TimeoutError(f"injected failure for {key}")
            super().put_file(local_path, key)

    monkeypatch.setattr(mds_writer, "open_store", lambda url, **_: FailingAfterTwo(url))
    with pytest.raises(UploadError, match=r"\.00002\.mds"):
        write((str(tmp_path / "b"), str(remote)), 40, first=1000, exist_ok=True, retry=0)
    assert (remote / "index.json").read_bytes() == old_index
    check_dataset(remote, 40)  # samples 0 .. 39, none of the rewrite's
    assert len(os.listdir(remote)) > len(json.loads(old_index)["shards"]) + 1  # its leftovers


def test_a_successful_rewrite_deletes_earlier_shards_and_no_other_file(tmp_path: Path):
    remote = tmp_path / "remote"
    write((str(tmp_path / "a"), str(remote)), 30)
    (remote / "shard.00042.mds").write_bytes(b"left by a reference writer")
    (remote / "shard.0123456789ab.00000.mds.zstd").write_bytes(b"left by a dead write")
    (remote / "notes.txt").write_text("the user's")
    (remote / "0").mkdir()
    (remote / "0" / "shard.00000.mds").write_text("a partition the user will merge")
    write((str(tmp_path / "b"), str(remote)), 12, first=500, exist_ok=True, compression="zstd")
    assert ids(remote) == list(range(500, 512))
    left = {str(path.relative_to(remote)) for path in remote.rglob("*") if path.is_file()}
    assert left == {*index_names(remote), "index.json", "notes.txt", "0/shard.00000.mds"}


def test_shards_are_deleted_only_after_the_new_index_is_published(tmp_path: Path, monkeypatch):
    remote = tmp_path / "remote"
    write((str(tmp_path / "a"), str(remote)), 20)
    old = set(os.listdir(remote)) - {"index.json"}
    seen: dict[str, set[str]] = {}

    class Watching(LocalStore):
        def delete(self, key: str) -> None:
            seen.setdefault(key, set(index_names(remote)))
            super().delete(key)

    monkeypatch.setattr(mds_writer, "open_store", lambda url, **_: Watching(url))
    write((str(tmp_path / "b"), str(remote)), 20, first=100, exist_ok=True)
    assert set(seen) == old
    new = index_names(remote)
    assert all(names == new for names in seen.values())  # the new index was already there


def test_keep_local_false_deletes_each_shard_once_uploaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    local, remote = tmp_path / "local", tmp_path / "remote"
    at_upload: dict[str, list[str]] = {}
    lock = threading.Lock()

    class Recording(LocalStore):
        def put_file(self, local_path: str, key: str) -> None:
            with lock:
                at_upload[key] = sorted(n for n in os.listdir(local) if n.startswith("shard."))
            super().put_file(local_path, key)

    monkeypatch.setattr(mds_writer, "open_store", lambda url, **_: Recording(url))
    write((str(local), str(remote)), 40, max_workers=1)
    shards = sorted(index_names(remote))
    assert len(shards) > 5
    for number, key in enumerate(shards):
        # Every earlier shard left the local folder once it was uploaded.
        assert not set(at_upload[key]) & set(shards[:number]), (key, at_upload[key])
    assert not local.exists()
    check_dataset(remote, 40)


def test_keep_local_true_keeps_every_shard(tmp_path: Path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    write((str(local), str(remote)), 20, keep_local=True)
    assert sorted(os.listdir(local)) == sorted(os.listdir(remote))


def test_a_failed_delete_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    class Stubborn(LocalStore):
        def delete(self, key: str) -> None:
            raise PermissionError(f"may not delete {key}")

    store = Stubborn(str(tmp_path))
    (tmp_path / "shard.00000.mds").write_bytes(b"x")
    remove_unnamed(store, set())
    assert (tmp_path / "shard.00000.mds").exists()
    assert "could not delete the files of earlier writes" in caplog.text


def test_the_copies_a_killed_writer_left_in_a_folder_store_go_with_the_next_rewrite(
    tmp_path: Path,
):
    # A writer killed while it copied a shard into a plain-folder store leaves the copy's
    # temporary sibling, which no listing shows: e03e338 kept it for ever, rewrite after rewrite.
    remote = tmp_path / "remote"
    write((str(tmp_path / "a"), str(remote)), 30)
    killed = [
        ".shard.0123456789ab.00003.mds.tmp-0123456789ab",  # a dead write's shard, half copied
        ".index.json.tmp-0123456789ab",  # its index, half copied
        "part-00001-00000/.shard.00000.mds.tmp-0123456789ab",
    ]
    users = [".notes.txt.tmp-0123456789ab", "0/.shard.00000.mds.tmp-0123456789ab"]
    for name in killed + users:
        (remote / name).parent.mkdir(exist_ok=True)
        (remote / name).write_bytes(b"half")
    write((str(tmp_path / "b"), str(remote)), 12, first=500, exist_ok=True)
    assert ids(remote) == list(range(500, 512))
    assert [name for name in killed if (remote / name).exists()] == []
    assert all((remote / name).read_bytes() == b"half" for name in users)
