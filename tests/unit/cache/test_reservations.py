"""A fetch's reservation in its shard's lock: what a dead one leaves is cleaned, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.reservations import reserved_bytes


def dead_fetch(cache: Path, text: str) -> Path:
    """A lock file nobody holds, with ``text`` as its record: a fetch whose process died."""
    locks = cache / STATE_FOLDER / "locks"
    locks.mkdir(parents=True)
    lock = locks / "0123456789abcdef0123.lock"
    lock.write_text(text)
    return lock


def test_a_dead_fetch_s_temporaries_are_deleted_and_its_reservation_dropped(tmp_path: Path):
    cache = tmp_path / "cache"
    lock = dead_fetch(cache, "4096 shard.00003.mds\n")
    (cache / ".shard.00003.mds.tmp-1a2b").write_bytes(b"half")
    (cache / "shard.00003.mds.txt").write_text("not a temporary")
    assert reserved_bytes(str(cache), own=None) == 0
    assert not (cache / ".shard.00003.mds.tmp-1a2b").exists()
    assert (cache / "shard.00003.mds.txt").exists()
    assert lock.read_text() == ""


@pytest.mark.parametrize("name", ["../victim", "../../victim", "/TMP/victim"])
def test_a_lock_record_naming_a_file_outside_the_cache_deletes_nothing_there(
    tmp_path: Path, name: str
):
    # A lock's record is read back as untrusted (it may be left by anyone who could write it,
    # or cut short): e03e338 deleted the temporaries of whatever path it named.
    cache = tmp_path / "a" / "b" / "cache"
    outside = [tmp_path / "a" / "b" / ".victim.tmp-1", tmp_path / "a" / ".victim.tmp-1"]
    outside.append(tmp_path / ".victim.tmp-1")
    for path in outside:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    target = name.replace("/TMP", str(tmp_path))
    lock = dead_fetch(cache, f"4096 {target}\n")
    assert reserved_bytes(str(cache), own=None) == 0
    assert all(path.read_text() == "mine" for path in outside)
    assert lock.read_text() == ""  # the dead fetch's reservation is dropped all the same
