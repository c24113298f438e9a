"""The default cache folder is created for its user alone, and a foreign or open one refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from shardstream import Stream
from shardstream.cache import ensure_private_folder
from shardstream.errors import CacheFolderError


def test_a_new_folder_is_the_users_alone(tmp_path: Path):
    folder = tmp_path / "cache"
    old = os.umask(0o022)
    try:
        ensure_private_folder(str(folder))
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    ensure_private_folder(str(folder))  # existing and private: fine


def test_an_open_folder_is_refused_with_the_fix(tmp_path: Path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(CacheFolderError, match=r"open to other users .*chmod 700"):
        ensure_private_folder(str(folder))


def test_a_symbolic_link_is_refused(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(CacheFolderError, match="not a folder"):
        ensure_private_folder(str(link))


def test_a_folder_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(folder).st_uid + 1)
    with pytest.raises(CacheFolderError, match="belongs to user id"):
        ensure_private_folder(str(folder))


def test_a_stream_without_local_caches_in_a_private_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = tmp_path / "default-root"
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(root))

    def resolve() -> str:  # no request is made
        return (
            Stream(remote="s3://bucket/ds")
            .resolve(
                download_retry=0,
                download_timeout=5.0,
                validate_hash=None,
                keep_zip=False,
                download_concurrency=1,
            )
            .local
        )

    local = resolve()
    assert os.path.dirname(local) == str(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    root.chmod(0o775)  # others of the group may write: refused
    with pytest.raises(CacheFolderError, match=str(root)):
        resolve()


def test_a_folder_others_may_only_read_is_closed_to_them(tmp_path: Path):
    folder = tmp_path / "readable"
    folder.mkdir()
    folder.chmod(0o755)  # as an older version made the cache root
    ensure_private_folder(str(folder))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
