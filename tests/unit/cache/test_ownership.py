"""The cache owns only the folders it created: any other ``local=`` is refused, untouched."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset
from shardstream.cache import STATE_FOLDER
from shardstream.cache.provenance import SOURCE_RECORD
from shardstream.errors import CacheFolderError

MARKER = "cache-folder"  # shardstream.cache.ownership.MARKER (fb0f0a9 has none)


def ids(remote: Path | str | None, local: Path | str | None, **kwargs: object) -> list[int]:
    dataset = StreamingDataset(
        remote=None if remote is None else str(remote),
        local=None if local is None else str(local),
        batch_size=1,
        **kwargs,  # type: ignore[arg-type]
    )
    return [int(sample["id"]) for sample in dataset]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def refused(remote: Path | str, local: Path | str, **kwargs: object) -> str:
    with pytest.raises(CacheFolderError) as caught:
        ids(remote, local, **kwargs)
    message = str(caught.value)
    assert str(local) in message
    assert str(remote) in message
    # What to do is never to delete anything: the folder may be someone's only copy.
    assert "delete" not in message.lower().replace("deletes and replaces", "")
    assert "remove" not in message.lower()
    return message


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "remote", 60, size_limit=1024)


def test_a_dataset_of_the_users_given_as_local_is_refused_and_kept(remote: Path, tmp_path: Path):
    # fb0f0a9 took it for a cache of unknown origin: it deleted every shard its index names.
    mine = write_dataset(tmp_path / "mine", 90, size_limit=1024, first=1000)
    before = snapshot(mine)
    message = refused(remote, mine)
    assert "dataset of its own (index.json)" in message
    assert "pass local= alone" in message
    assert snapshot(mine) == before
    assert ids(None, mine)[:1] == [1000]  # still whole, read in place


def test_a_folder_of_files_without_the_marker_is_refused_and_kept(remote: Path, tmp_path: Path):
    local = tmp_path / "work"
    local.mkdir()
    (local / "notes.txt").write_text("mine")
    shard = sorted(p.name for p in remote.glob("shard.*.mds"))[0]
    (local / shard).write_bytes(b"a file of mine that shares a shard's name")
    (local / "sub").mkdir()
    (local / "sub" / "more.bin").write_bytes(b"\0" * 10)
    before = snapshot(local)
    message = refused(remote, local)
    assert f"no {STATE_FOLDER}/{MARKER} marker" in message
    assert snapshot(local) == before
    assert sorted(os.listdir(local)) == sorted([shard, "notes.txt", "sub"])  # nothing added


def test_local_above_the_remote_is_refused(tmp_path: Path):
    root = tmp_path / "root"
    train = write_dataset(root / "train", 60, size_limit=1024)
    (root / "notes.txt").write_text("mine")
    before = snapshot(root)
    refused(train, root)
    assert snapshot(root) == before


def test_local_inside_the_remote_is_refused(remote: Path):
    before = snapshot(remote)
    message = refused(remote, remote / "cache")
    assert "lies inside" in message
    assert snapshot(remote) == before
    assert not (remote / "cache").exists()


def test_local_that_links_to_the_remote_is_refused(remote: Path, tmp_path: Path):
    link = tmp_path / "link"
    link.symlink_to(remote)
    before = snapshot(remote)
    assert "is the same folder as" in refused(remote, link)
    assert snapshot(remote) == before


def test_a_split_folder_is_compared_without_its_split(tmp_path: Path):
    # remote=root, local=root/cache, split=train: the cache folder root/cache/train lies beside
    # root/train, but local= itself lies inside the remote.
    root = tmp_path / "root"
    write_dataset(root / "train", 60, size_limit=1024)
    refused(root, root / "cache", split="train")
    assert not (root / "cache").exists()


def test_the_same_path_as_remote_and_local_is_read_in_place(remote: Path):
    before = snapshot(remote)
    assert sorted(ids(remote, remote)) == list(range(60))
    assert snapshot(remote) == before  # no marker, no state: never written to


def test_a_missing_or_empty_folder_becomes_a_marked_cache(remote: Path, tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for local in (tmp_path / "a" / "b", empty):
        assert sorted(ids(remote, local)) == list(range(60))
        assert (local / STATE_FOLDER / MARKER).is_file()
        assert sorted(ids(remote, local)) == list(range(60))  # its own cache, used again


def test_a_cache_an_earlier_version_made_is_adopted(remote: Path, tmp_path: Path):
    # fb0f0a9 wrote no marker, but it recorded the remote it cached in .shardstream/.
    local = tmp_path / "cache"
    ids(remote, local)
    (local / STATE_FOLDER / MARKER).unlink()
    assert (local / STATE_FOLDER / SOURCE_RECORD).is_file()
    assert sorted(ids(remote, local)) == list(range(60))
    assert (local / STATE_FOLDER / MARKER).is_file()


def test_state_alone_without_a_record_is_not_enough(remote: Path, tmp_path: Path):
    # Versions before in-place reads wrote locks into the datasets they read: not a cache.
    mine = write_dataset(tmp_path / "mine", 30, size_limit=1024, first=500)
    (mine / STATE_FOLDER / "locks").mkdir(parents=True)
    before = snapshot(mine)
    refused(remote, mine)
    assert snapshot(mine) == before


def test_a_split_cache_leaves_the_users_files_beside_it(remote: Path, tmp_path: Path):
    root = tmp_path / "data"
    write_dataset(root / "train", 60, size_limit=1024)
    write_dataset(root / "val", 30, size_limit=1024, first=100)
    local = tmp_path / "local"
    local.mkdir()
    (local / "notes.txt").write_text("mine")
    assert sorted(ids(root, local, split="train")) == list(range(60))
    assert sorted(ids(root, local, split="val")) == list(range(100, 130))
    assert (local / "notes.txt").read_text() == "mine"
    assert (local / "train" / STATE_FOLDER / MARKER).is_file()
    assert not (local / STATE_FOLDER).exists()


def _read_all(remote: str, local: str) -> None:
    assert sorted(ids(remote, local)) == list(range(60))


def test_ranks_starting_together_on_a_new_folder_all_claim_it(remote: Path, tmp_path: Path):
    # Each sees the folder missing, empty, or marked with files already in it: none refuses.
    context = multiprocessing.get_context("spawn")
    local = tmp_path / "new"
    ranks = [context.Process(target=_read_all, args=(str(remote), str(local))) for _ in range(3)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join(120)
        assert rank.exitcode == 0
    assert (local / STATE_FOLDER / MARKER).is_file()


@pytest.mark.parametrize("kind", ["file", "under a file", "dangling link", "under a dangling link"])
def test_a_local_that_cannot_be_a_folder_is_refused_naming_it(
    remote: Path, tmp_path: Path, kind: str
):
    # e03e338: a link to nothing (a folder on an unmounted disk) raised a bare FileExistsError,
    # and a path under a file was said to be a file itself.
    afile, link = tmp_path / "afile", tmp_path / "link"
    afile.write_text("mine")
    link.symlink_to(tmp_path / "unmounted" / "cache")
    local = {
        "file": afile,
        "under a file": afile / "cache",
        "dangling link": link,
        "under a dangling link": link / "cache",
    }[kind]
    message = refused(remote, local)
    why = {
        "file": "it is a file",
        "under a file": "a path above it is a file, or a link to a missing folder",
        "dangling link": f"it is a link to {tmp_path / 'unmounted' / 'cache'}, which is no folder",
        "under a dangling link": "a path above it is a file, or a link to a missing folder",
    }[kind]
    assert f"is not a folder and none can be made there ({why})" in message
    assert afile.read_text() == "mine"
    assert not (tmp_path / "unmounted").exists()  # nothing created through the link


@pytest.mark.parametrize("kind", ["state file", "marker folder"])
def test_a_state_folder_shardstream_did_not_make_is_refused_naming_it(
    remote: Path, tmp_path: Path, kind: str
):
    # e03e338: a bare IsADirectoryError (marker a folder), or NotADirectoryError.
    local = tmp_path / "work"
    local.mkdir()
    if kind == "state file":
        (local / STATE_FOLDER).write_text("mine")
    else:
        (local / STATE_FOLDER / MARKER).mkdir(parents=True)
    before = snapshot(local)
    message = refused(remote, local)
    assert f"holds a {STATE_FOLDER} that shardstream did not make" in message
    assert snapshot(local) == before
    assert sorted(p.name for p in local.rglob("*")) == sorted(
        [STATE_FOLDER] + ([MARKER] if kind == "marker folder" else [])
    )


def test_an_earlier_versions_record_planted_as_a_link_adopts_nothing(remote: Path, tmp_path: Path):
    # Whoever can write in a shared folder could plant .shardstream/source.json as a link to
    # any file: e03e338 took it for an earlier version's record, marked the folder, and cached
    # into it. Only a record this user wrote there, a regular file, counts (safe_paths' rule).
    shared = tmp_path / "shared"
    (shared / STATE_FOLDER).mkdir(parents=True)
    (shared / "notes.txt").write_text("mine")
    elsewhere = tmp_path / "source.json"
    elsewhere.write_text("{}")
    (shared / STATE_FOLDER / SOURCE_RECORD).symlink_to(elsewhere)
    refused(remote, shared)
    assert not (shared / STATE_FOLDER / MARKER).exists()
