"""The listing a start leaves running: who waits for it, what it deletes, what it records."""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardstream.cache.listing_check import ListingCheck
from shardstream.cache.provenance import SourceRecord, present_sources, read_record
from shardstream.errors import StorageError
from shardstream.format.index import FileInfo, ShardEntry

INDEX = "9:tag-index"


def entry(raw: str) -> ShardEntry:
    return ShardEntry(
        format="mds",
        samples=1,
        raw_data=FileInfo(raw, 1),
        zip_data=None,
        compression=None,
        hashes=(),
        size_limit=None,
        columns={"id": "int"},
    )


@contextlib.contextmanager
def no_lock() -> Iterator[None]:
    yield


def make(
    tmp_path: Path, listing: dict[str, str], gate: threading.Event, record: dict[str, str]
) -> tuple[ListingCheck, list[ShardEntry]]:
    """A check over shards a, b, c (a and b cached), whose listing waits for ``gate``."""
    local, state = tmp_path / "cache", tmp_path / "cache" / ".shardstream"
    state.mkdir(parents=True)
    entries = [entry("a.mds"), entry("b.mds"), entry("c.mds")]
    for name in ("a.mds", "b.mds"):
        (local / name).write_bytes(b"x")
    SourceRecord("mem://r/", record, True).write(str(state))

    def lister(split_at: list[str]) -> tuple[dict[str, str], bool]:
        assert gate.wait(30)
        if "fail" in listing:
            raise StorageError("listing mem://r/ failed: a transfer error")
        return dict(listing), True

    def settle(listed: dict[str, str], complete: bool, now: SourceRecord | None) -> set[str] | None:
        return None if now is None else now.changed(listed)

    check = ListingCheck(
        lister,
        [],
        state=str(state),
        local=str(local),
        remote="mem://r/",
        entries=entries,
        index_identity=INDEX,
        unsure=present_sources(str(local), entries),
        settle=settle,
        lock=no_lock,
        lock_timeout=5,
        seen=1,
    )
    return check.start(), entries


def test_a_cached_shard_waits_and_a_changed_one_is_gone_when_it_returns(tmp_path: Path):
    record = {"index.json": INDEX, "a.mds": "1:old", "b.mds": "1:same", "c.mds": "1:c"}
    listing = {**record, "a.mds": "1:new"}
    gate = threading.Event()
    check, (a, b, c) = make(tmp_path, listing, gate, record)
    check.vouch(c)  # not cached: fetched from the remote as it is, no wait
    returned = threading.Event()

    def vouch_a() -> None:
        check.vouch(a)
        returned.set()

    waiter = threading.Thread(target=vouch_a)
    waiter.start()
    assert not returned.wait(0.2)  # a bound on a wait that must not end: the listing is held
    assert (tmp_path / "cache" / "a.mds").exists()
    (tmp_path / "cache" / "c.mds").write_bytes(b"x")  # fetched while the listing runs
    gate.set()
    waiter.join(30)
    assert returned.is_set()
    assert not (tmp_path / "cache" / "a.mds").exists()  # changed: gone before a's hand-over
    assert (tmp_path / "cache" / "b.mds").exists()
    check.vouch(b)
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    # c was fetched while the listing ran: of no known version, checked again at the next start.
    assert written.objects == {**listing, "c.mds": ""}
    assert written.generation == 2


def test_a_failed_listing_fails_the_reads_that_follow(tmp_path: Path):
    record = {"index.json": INDEX, "a.mds": "1:a", "b.mds": "1:b", "c.mds": "1:c"}
    gate = threading.Event()
    check, (a, _, c) = make(tmp_path, {"fail": ""}, gate, record)
    gate.set()
    with pytest.raises(StorageError, match="transfer error"):
        check.vouch(a)
    with pytest.raises(StorageError, match="transfer error"):
        check.vouch(c)  # once failed, a fetched shard's read fails too
    assert (tmp_path / "cache" / "a.mds").exists()  # nothing judged, nothing recorded
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.generation == 1


def test_a_listing_that_gives_the_index_another_identity_is_refused(tmp_path: Path):
    record = {"index.json": INDEX, "a.mds": "1:a", "b.mds": "1:b", "c.mds": "1:c"}
    gate = threading.Event()
    check, (a, _, _) = make(tmp_path, {**record, "index.json": "9:other"}, gate, record)
    gate.set()
    with pytest.raises(StorageError, match="index changed while"):
        check.vouch(a)
    written = read_record(str(tmp_path / "cache" / ".shardstream"))
    assert written is not None
    assert written.objects == record


def test_a_forked_child_whose_parent_is_still_listing_lists_itself(tmp_path: Path):
    """The parent's listing thread is not in a forked child: the child's vouch lists anew."""
    record = {"index.json": INDEX, "a.mds": "1:old", "b.mds": "1:b", "c.mds": "1:c"}
    gate = threading.Event()  # never set in the parent before the child ends
    check, (a, _, _) = make(tmp_path, {**record, "a.mds": "1:new"}, gate, record)
    gate_of_child = os.getpid()
    with warnings.catch_warnings():  # forking with threads running is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its copy of the gate opens at once, as a listing of its own would
        code = 1
        try:
            assert os.getpid() != gate_of_child
            gate.set()
            check.vouch(a)
            code = 0 if not (tmp_path / "cache" / "a.mds").exists() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    gate.set()
    check.wait()
