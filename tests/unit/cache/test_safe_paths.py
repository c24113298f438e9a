"""A shared cache folder is safe: nothing in it is opened through a planted link or another's file.

The adversarial test records every name a clean run creates in a cache folder, then plants a
symbolic link at each (to a file, or a folder, outside) before a run into a fresh folder: the
target must come out untouched, and the run must succeed or refuse the link by name.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch.utils.data._utils
from tests.streaming_data import write_dataset

from shardstream import StreamingDataLoader, StreamingDataset
from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.locks import FileLock
from shardstream.cache.ownership import MARKER, mark_cache_folder
from shardstream.cache.safe_paths import (
    make_folders,
    open_file,
    read_file,
    split_root,
    write_file,
)
from shardstream.errors import CacheFolderError

OTHER_USER = 65534  # nobody
VICTIM = b"the user's own file, which no cache may write\n"
PAST_NS = 1_000_000_000 * 1_000_000_000  # a fixed mtime the victim keeps unless written


# --- the primitives -----------------------------------------------------------------------------


def test_the_cache_folder_is_the_one_above_the_state_folder():
    assert split_root("/c/ds/.shardstream/locks/a.lock") == ("/c/ds", ".shardstream/locks/a.lock")
    assert split_root("/c/.shardstream/x/.shardstream/runs/r.json") == (
        "/c/.shardstream/x",
        ".shardstream/runs/r.json",
    )
    assert split_root("/c/ds/index.json") == ("/c/ds", "index.json")


def test_files_and_folders_are_created_below_the_cache_folder(tmp_path: Path):
    path = tmp_path / ".shardstream" / "locks" / "a.lock"
    fd = open_file(str(path), os.O_RDWR | os.O_CREAT)
    os.close(fd)
    assert path.is_file()
    write_file(str(tmp_path / ".shardstream" / "plans" / "p.order"), [b"ab", memoryview(b"cd")])
    assert read_file(str(tmp_path / ".shardstream" / "plans" / "p.order")) == b"abcd"
    assert not [p for p in (tmp_path / ".shardstream" / "plans").iterdir() if ".tmp-" in p.name]
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / ".shardstream" / "nowhere" / "x"))


def victim_file(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    victim = folder / "victim.txt"
    victim.write_bytes(VICTIM)
    os.utime(victim, ns=(PAST_NS, PAST_NS))
    return victim


def assert_untouched(victim: Path) -> None:
    status = victim.stat()
    assert (victim.read_bytes(), status.st_mtime_ns) == (VICTIM, PAST_NS)


def test_a_link_at_a_lock_file_is_refused_and_its_target_kept(tmp_path: Path):
    victim = victim_file(tmp_path / "home")
    path = tmp_path / "cache" / ".shardstream" / "locks" / "0123.lock"
    path.parent.mkdir(parents=True)
    path.symlink_to(victim)
    lock = FileLock(str(path))
    with pytest.raises(CacheFolderError, match=rf"{path} is a symbolic link.*Remove {path}"):
        lock.acquire(timeout=1)
    assert_untouched(victim)


def test_a_link_at_a_state_folder_is_refused_and_nothing_made_in_its_target(tmp_path: Path):
    target = tmp_path / "home"
    target.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / ".shardstream").symlink_to(target)
    state = tmp_path / "cache" / ".shardstream"
    with pytest.raises(CacheFolderError, match=rf"{state} is a symbolic link"):
        make_folders(str(state / "runs"))
    with pytest.raises(CacheFolderError, match=rf"{state} is a symbolic link"):
        write_file(str(state / "plans" / "p.order"), [b"x"])
    with pytest.raises(CacheFolderError, match=rf"{state} is a symbolic link"):
        FileLock(str(state / "cache.lock")).acquire(timeout=1)
    assert list(target.iterdir()) == []


def test_a_written_file_replaces_a_link_instead_of_following_it(tmp_path: Path):
    victim = victim_file(tmp_path / "home")
    path = tmp_path / "cache" / ".shardstream" / "index.stamp"
    path.parent.mkdir(parents=True)
    path.symlink_to(victim)
    write_file(str(path), [b"{}"])
    assert not path.is_symlink()
    assert path.read_bytes() == b"{}"
    assert_untouched(victim)


def chown_to_another_user(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give ``path`` to another user (as root), or else make this process another user."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_USER, OTHER_USER, follow_symlinks=False)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: OTHER_USER)


def test_a_file_another_user_owns_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / ".shardstream" / "locks" / "0123.lock"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    chown_to_another_user(path, monkeypatch)
    with pytest.raises(CacheFolderError, match=rf"{path} belongs to user id {OTHER_USER}"):
        FileLock(str(path)).acquire(timeout=1)


def test_a_folder_another_user_owns_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state = tmp_path / ".shardstream"
    state.mkdir()
    chown_to_another_user(state, monkeypatch)
    with pytest.raises(CacheFolderError, match=rf"{state} belongs to user id"):
        open_file(str(state / "cache.lock"), os.O_RDWR | os.O_CREAT)


def test_a_fifo_at_a_file_name_is_refused_without_waiting(tmp_path: Path):
    path = tmp_path / ".shardstream" / "index.lock"
    path.parent.mkdir()
    os.mkfifo(path)
    refused: list[BaseException] = []
    # A blocking open of a FIFO would hang the test: it runs in a thread that must end.
    opener = threading.Thread(target=lambda: _catch(refused, lambda: read_file(str(path))))
    opener.start()
    opener.join(5)
    assert not opener.is_alive()
    assert isinstance(refused[0], CacheFolderError)
    assert str(path) in str(refused[0])


def _catch(into: list[BaseException], call: Callable[[], object]) -> None:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - handed to the test to check
        into.append(exc)


# --- every name a clean run creates -------------------------------------------------------------


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        tmp_path_factory.mktemp("remote") / "ds", 60, size_limit=1024, compression="zstd"
    )


def stream(remote: Path, local: Path, plant: Callable[[str], None] | None = None) -> None:
    """A run: two DataLoader workers under a cache limit, then one process without a limit.

    The limit runs the ledger, the reservations and eviction, the workers the run files; the
    unlimited pass keeps node orders (``plans/``). ``plant`` is given each dataset's id (the
    run files are named after it) before anything is read.
    """

    def dataset(cache_limit: str | None) -> StreamingDataset:
        return StreamingDataset(
            remote=str(remote), local=str(local), batch_size=4, shuffle=True,
            num_canonical_nodes=1, cache_limit=cache_limit,
        )  # fmt: skip

    limited = dataset("1mb")
    if plant is not None:
        plant(limited._progress.id)
    loader = StreamingDataLoader(limited, batch_size=4, num_workers=2)
    assert sorted(int(i) for batch in loader for i in batch["id"]) == list(range(60))
    unlimited = dataset(None)
    assert sorted(int(sample["id"]) for sample in unlimited) == list(range(60))


def created(local: Path) -> dict[str, bool]:
    """Every path under ``local``, relative, and whether it is a folder."""
    return {
        os.path.relpath(os.path.join(folder, name), local): name in folders
        for folder, folders, files in os.walk(local)
        for name in [*folders, *files]
    }


@pytest.fixture
def quick_worker_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Join the workers of a loader whose worker raised without torch's long wait for each."""
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.05)


@pytest.mark.usefixtures("quick_worker_shutdown")
def test_a_link_planted_at_any_name_a_clean_run_creates_is_never_followed(
    remote: Path, tmp_path: Path
):
    ids: list[str] = []
    stream(remote, tmp_path / "clean", ids.append)
    names = created(tmp_path / "clean")
    kinds = {name.split(os.sep)[-1].split(".")[-1] for name in names}
    assert {".shardstream", "index.json", "shard.00000.mds"} <= names.keys()
    assert {"lock", "json", "order", "mds"} <= kinds  # locks, run files, plans and shards ran
    failures = []
    for number, (name, is_folder) in enumerate(sorted(names.items())):
        local = tmp_path / f"run{number}"
        victim = victim_file(tmp_path / f"victim{number}")
        target = victim.parent if is_folder else victim
        before = sorted(os.listdir(victim.parent))
        planted: list[Path] = []

        def plant(
            dataset_id: str,
            name: str = name,
            local: Path = local,
            target: Path = target,
            planted: list[Path] = planted,
        ) -> None:
            path = local / name.replace(ids[0], dataset_id)  # run files carry the dataset's id
            if name not in (STATE_FOLDER, os.path.join(STATE_FOLDER, MARKER)):
                mark_cache_folder(str(local))  # a cache folder: a link in any other is refused
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
            planted.append(path)

        try:
            stream(remote, local, plant)
        except CacheFolderError as exc:
            if f"{planted[0]} is a symbolic link" not in str(exc):
                failures.append(f"{name}: refused, but not by the link's name: {exc}")
            gc.collect()  # the failed loader's workers end now, not in a later run
        if victim.read_bytes() != VICTIM or victim.stat().st_mtime_ns != PAST_NS:
            failures.append(f"{name}: the link's target file was written")
        if sorted(os.listdir(victim.parent)) != before:
            failures.append(f"{name}: files were made in the link's target folder")
    assert not failures, "\n".join(failures)


def test_a_state_folder_another_user_owns_stops_a_run_by_name(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    state = tmp_path / "cache" / ".shardstream"
    state.mkdir(parents=True)
    chown_to_another_user(state, monkeypatch)
    with pytest.raises(CacheFolderError, match=rf"{state} belongs to user id {OTHER_USER}"):
        stream(remote, tmp_path / "cache")
