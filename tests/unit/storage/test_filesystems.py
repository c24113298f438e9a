from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

from shardstream.cache import CacheStream
from shardstream.dataset.local import LocalDataset
from shardstream.dataset.prepared import MAX_FETCH_THREADS, fetch_threads, slot_share
from shardstream.storage import DownloadOptions, LocalStore, filesystems, open_store
from shardstream.storage.filesystems import LOCAL_TYPES, is_local_disk, mount_type

# A mount table as /proc/self/mountinfo lays it out: a local root, a network file system, a
# FUSE mount (Databricks' /Volumes), a tmpfs inside the NFS mount, and a mount point with a
# space in its name (escaped as \040).
MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /mnt/nfs rw,relatime shared:5 - nfs4 server:/export rw,vers=4.2
31 22 0:41 / /Volumes rw,nosuid - fuse.dbfs dbfs rw,user_id=0
32 30 0:42 / /mnt/nfs/scratch rw - tmpfs tmpfs rw
33 22 0:43 / /data/my\\040disk rw - xfs /dev/sdb1 rw
34 22 0:44 / /data/broken rw
"""


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTINFO)
    monkeypatch.setattr(filesystems, "_MOUNTINFO", str(path))
    filesystems._mounts.cache_clear()
    yield
    filesystems._mounts.cache_clear()


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/", "ext4"),
        ("/home/user/data", "ext4"),
        ("/mnt/nfs", "nfs4"),
        ("/mnt/nfs/datasets/train", "nfs4"),
        ("/mnt/nfsother", "ext4"),  # a sibling whose name starts alike is not inside
        ("/mnt/nfs/scratch/cache", "tmpfs"),  # the innermost mount decides
        ("/Volumes/catalog/schema/volume", "fuse.dbfs"),
        ("/data/my disk/shards", "xfs"),
        ("/data/broken/x", "ext4"),  # a line without its fields is skipped
        ("/mnt/nfs/../nfs/x", "nfs4"),  # normalised first
    ],
)
def test_mount_type_is_the_innermost_mount_holding_the_path(path: str, kind: str):
    assert mount_type(path) == kind


@pytest.mark.usefixtures("table")
def test_only_a_local_folder_on_a_local_file_system_is_local_disk():
    assert is_local_disk(LocalStore("/home/user/data"))
    assert is_local_disk(LocalStore("/mnt/nfs/scratch/x"))
    assert not is_local_disk(LocalStore("/mnt/nfs/datasets"))
    assert not is_local_disk(LocalStore("/Volumes/catalog/schema/volume"))
    assert not is_local_disk(open_store("https://127.0.0.1:9/data"))


def test_an_unreadable_mount_table_means_remote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filesystems, "_MOUNTINFO", str(tmp_path / "missing"))
    filesystems._mounts.cache_clear()
    try:
        assert mount_type("/") is None
        assert not is_local_disk(LocalStore(str(tmp_path)))
    finally:
        filesystems._mounts.cache_clear()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/mountinfo")
def test_this_machine_has_a_mount_table(tmp_path: Path):
    kind = mount_type(str(tmp_path))
    assert kind is not None
    assert is_local_disk(LocalStore(str(tmp_path))) == (kind in LOCAL_TYPES)


@pytest.mark.usefixtures("table")
def test_readers_of_local_disks_fetch_with_one_thread_others_with_one_a_slot():
    local, nfs = LocalStore("/home/user/data"), LocalStore("/mnt/nfs/datasets")
    web = open_store("https://127.0.0.1:9/data")
    assert fetch_threads([local], 8) == 1
    assert fetch_threads([local, None], 8) == 1  # a local-only stream fetches nothing
    # One thread a download slot: over a distant link, a first batch over many small shards
    # waits a round trip per thread's worth of shards.
    assert fetch_threads([local, nfs], 8) == 8
    assert fetch_threads([web], 16) == 16
    assert fetch_threads([web], 2) == 2
    assert fetch_threads([None], 8) == 4  # nothing to fetch: the default stands
    # Small shards share a slot (DownloadOptions.slot_share): a thread for each download the
    # slots carry at once, up to a bound.
    assert fetch_threads([web], 4, share=8) == 32
    assert fetch_threads([web], 16, share=8) == MAX_FETCH_THREADS
    assert fetch_threads([web], 40, share=8) == 40  # never fewer than the slots
    assert fetch_threads([local], 8, share=8) == 1


def test_a_slot_carries_concurrency_downloads_of_objects_that_fit_one_request(tmp_path: Path):
    options = DownloadOptions(part_size=1000, concurrency=6)
    assert options.slot_share(1000) == 6  # one request each
    assert options.slot_share(1001) == 1  # parallel ranges: the whole slot
    remote = write_dataset(tmp_path / "r", 100, size_limit=1024)
    entries = LocalDataset(remote).shards
    store = LocalStore(str(remote))
    streams = [CacheStream(str(tmp_path / "c"), store, entries, options)]
    assert slot_share(streams) == 6
    large = DownloadOptions(part_size=100, concurrency=6)
    assert slot_share([*streams, CacheStream(str(tmp_path / "d"), store, entries, large)]) == 1
    assert slot_share([CacheStream(str(remote), None, entries, options)]) == 1  # local-only
