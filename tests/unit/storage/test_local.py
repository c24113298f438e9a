from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import ObjectNotFoundError, StorageError
from shardstream.storage import LocalStore, atomic_write, local
from shardstream.storage.local import temporary_sibling


def test_temporary_sibling_is_hidden_unique_and_in_the_same_folder(tmp_path: Path):
    target = str(tmp_path / "shard.00000.mds")
    names = {temporary_sibling(target) for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert os.path.dirname(name) == str(tmp_path)
        assert os.path.basename(name).startswith(".shard.00000.mds.tmp-")


def test_atomic_write_writes_every_part(tmp_path: Path):
    path = tmp_path / "out.bin"
    written = atomic_write(str(path), [b"abc", memoryview(b"def"), b""])
    assert written == 6
    assert path.read_bytes() == b"abcdef"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_atomic_write_replaces_an_existing_file(tmp_path: Path):
    path = tmp_path / "index.json"
    path.write_bytes(b"old contents, longer than the new")
    assert atomic_write(str(path), [b"new"]) == 3
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["index.json"]


def test_atomic_write_failure_keeps_the_old_file_and_no_temporary(tmp_path: Path):
    path = tmp_path / "index.json"
    path.write_bytes(b"old")

    def parts() -> Iterator[bytes]:
        yield b"partial"
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_write(str(path), parts())
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["index.json"]


def test_atomic_write_into_a_missing_folder_fails_cleanly(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        atomic_write(str(tmp_path / "missing" / "x"), [b"data"])
    assert os.listdir(tmp_path) == []


def test_local_store_copies_into_sub_folders(tmp_path: Path):
    source = tmp_path / "local" / "shard.00000.mds"
    source.parent.mkdir()
    source.write_bytes(b"shard bytes")
    root = tmp_path / "remote"
    store = LocalStore(str(root))
    store.put_file(str(source), "7/shard.00003.mds")
    assert (root / "7" / "shard.00003.mds").read_bytes() == b"shard bytes"
    assert os.listdir(root / "7") == ["shard.00003.mds"]
    assert source.read_bytes() == b"shard bytes"  # copied, not moved
    assert store.url("7/shard.00003.mds") == os.path.join(str(root), "7/shard.00003.mds")


def test_local_store_overwrites(tmp_path: Path):
    source = tmp_path / "index.json"
    source.write_bytes(b"new")
    root = tmp_path / "remote"
    root.mkdir()
    (root / "index.json").write_bytes(b"old")
    LocalStore(str(root)).put_file(str(source), "index.json")
    assert (root / "index.json").read_bytes() == b"new"
    assert os.listdir(root) == ["index.json"]


def test_local_store_missing_source_raises_oserror_and_leaves_nothing(tmp_path: Path):
    root = tmp_path / "remote"
    with pytest.raises(OSError, match="nope"):
        LocalStore(str(root)).put_file(str(tmp_path / "nope"), "shard.00000.mds")
    assert not (root / "shard.00000.mds").exists()
    assert not root.exists() or os.listdir(root) == []  # checked before any folder is made


def test_is_temporary_recognises_temporary_siblings(tmp_path: Path):
    from shardstream.storage.local import is_temporary

    assert is_temporary(os.path.basename(temporary_sibling(str(tmp_path / "shard.00000.mds"))))
    assert not is_temporary("shard.00000.mds")
    assert not is_temporary(".hidden")
    assert not is_temporary(".x.tmp-123")


def test_local_store_lists_files_but_not_temporaries(tmp_path: Path):
    store = LocalStore(str(tmp_path / "root"))
    assert store.list() == []  # a missing root lists nothing
    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "root" / "a" / "x.bin").write_bytes(b"1")
    (tmp_path / "root" / "b.bin").write_bytes(b"2")
    (tmp_path / "root" / ".b.bin.tmp-0123456789ab").write_bytes(b"partial")
    assert store.list() == ["a/x.bin", "b.bin"]
    assert store.list("a/") == ["a/x.bin"]


def test_local_store_info_etag_changes_with_a_replacement(tmp_path: Path):
    source = tmp_path / "f"
    source.write_bytes(b"one")
    store = LocalStore(str(tmp_path / "root"))
    store.put_file(str(source), "k")
    first = store.info("k")
    source.write_bytes(b"two")
    store.put_file(str(source), "k")
    second = store.info("k")
    assert (first.size, second.size) == (3, 3)
    assert first.etag != second.etag


def _copy(store: LocalStore, key: str, dest: Path) -> int:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return store.copy_into(key, fd)
    finally:
        os.close(fd)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=1 << 14), kernel=st.booleans(), chunk=st.sampled_from([1, 7, 4096]))
def test_copy_into_copies_every_byte_in_the_kernel_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, kernel: bool, chunk: int
):
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "shard.mds").write_bytes(data)
    with monkeypatch.context() as patch:
        patch.setattr(local, "_COPY_CHUNK", chunk)
        if not kernel:  # a system without copy_file_range reads and writes
            patch.delattr(os, "copy_file_range", raising=False)
        copied = _copy(LocalStore(str(tmp_path / "src")), "shard.mds", tmp_path / "out")
    assert copied == len(data)
    assert (tmp_path / "out").read_bytes() == data


def test_copy_into_finishes_by_reading_where_the_kernel_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    data = os.urandom(50_000)
    (tmp_path / "shard.mds").write_bytes(data)
    calls: list[int] = []

    def refuse_after_one(source: int, dest: int, count: int, src_at: int, dest_at: int) -> int:
        calls.append(count)
        if len(calls) > 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        os.pwrite(dest, os.pread(source, 1000, src_at), dest_at)
        return 1000

    monkeypatch.setattr(os, "copy_file_range", refuse_after_one, raising=False)
    assert _copy(LocalStore(str(tmp_path)), "shard.mds", tmp_path / "out") == len(data)
    assert (tmp_path / "out").read_bytes() == data
    assert calls == [50_000, 49_000]


def test_copy_into_says_when_the_file_shrinks_or_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "shard.mds"
    path.write_bytes(b"x" * 10_000)

    def shrink_first(source: int, dest: int, size: int) -> int:
        os.truncate(path, 4000)  # rewritten by someone else after it was opened
        return 0

    store = LocalStore(str(tmp_path))
    monkeypatch.setattr(local, "_kernel_copy", shrink_first)
    with pytest.raises(StorageError, match=r"shard\.mds: the file shrank to 4000 bytes"):
        _copy(store, "shard.mds", tmp_path / "out")
    with pytest.raises(ObjectNotFoundError, match=r"missing\.mds"):
        _copy(store, "missing.mds", tmp_path / "out")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
@pytest.mark.parametrize("kernel", [True, False])
def test_copy_into_leaves_a_full_destination_disk_to_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, kernel: bool
):
    # A full cache disk is the destination's error, not a bad store: it must reach the cache
    # as the OSError it is (the cache reports DiskFullError), not as a StorageError.
    (tmp_path / "shard.mds").write_bytes(b"x" * 10_000)

    def full(*_: object) -> int:
        raise OSError(code, os.strerror(code))

    if kernel:
        monkeypatch.setattr(os, "copy_file_range", full, raising=False)
    else:
        monkeypatch.delattr(os, "copy_file_range", raising=False)
        monkeypatch.setattr(local, "pwrite_all", full)
    with pytest.raises(OSError, match=os.strerror(code)) as caught:
        _copy(LocalStore(str(tmp_path)), "shard.mds", tmp_path / "out")
    assert not isinstance(caught.value, StorageError)
    assert caught.value.errno == code
