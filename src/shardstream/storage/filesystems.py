"""Which file system a local path lives on: a disk of this machine, or a network behind it.

A local path is not always local storage: NFS, SMB and FUSE mounts (Databricks' ``/Volumes``,
gcsfuse, s3fs-fuse, ...) answer each read over a network. Readers fetch ahead with several
threads to hide that latency; from a disk of this machine a fetch is a copy of microseconds,
and more threads only contend for the interpreter's lock (see
:func:`shardstream.dataset.prepared.fetch_threads`).
"""

from __future__ import annotations

import functools
import os
import shutil

from shardstream.storage.base import ObjectStore
from shardstream.storage.local import LocalStore

__all__ = ["free_bytes", "is_local_disk", "mount_type"]

#: File systems whose reads never leave the machine. Anything else (nfs, cifs, fuse.*, 9p,
#: ceph, lustre, ...) or an unknown type counts as remote: guessing "remote" costs a few
#: threads, guessing "local" would serialize reads that wait on a network.
LOCAL_TYPES = frozenset(
    {
        "bcachefs", "btrfs", "exfat", "ext2", "ext3", "ext4", "f2fs", "jfs", "msdos",
        "ntfs3", "overlay", "ramfs", "reiserfs", "tmpfs", "vfat", "xfs", "zfs",
    }
)  # fmt: skip

_MOUNTINFO = "/proc/self/mountinfo"


def is_local_disk(store: ObjectStore) -> bool:
    """Whether reading from ``store`` is a copy from a disk of this machine.

    True for a :class:`~shardstream.storage.local.LocalStore` whose folder lies on a local
    file system type (:data:`LOCAL_TYPES`); False for object stores, network and FUSE mounts,
    and wherever the mount table cannot be read (not Linux).

    Example:
        from shardstream.storage import open_store
        from shardstream.storage.filesystems import is_local_disk

        is_local_disk(open_store("s3://bucket/dataset"))  # False
    """
    if not isinstance(store, LocalStore):
        return False
    return _on_local_disk(store.root, _mounts())


@functools.lru_cache(maxsize=256)
def _on_local_disk(root: str, mounts: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``root`` lies on a local file system type (asked once, by reading the mount table).

    ``mounts``, the mount table, is part of the cache's key only.
    """
    return mount_type(root) in LOCAL_TYPES


def mount_type(path: str) -> str | None:
    """The file system type of the mount holding ``path`` (``"ext4"``, ``"nfs4"``, ...).

    The path need not exist: its nearest existing parent decides. ``None`` where the mount
    table cannot be read.

    Example:
        from shardstream.storage.filesystems import mount_type

        mount_type("/")  # e.g. "ext4" on Linux, None elsewhere
    """
    mounts = _mounts()
    if not mounts:
        return None
    resolved = os.path.realpath(os.path.abspath(path))
    best, kind = "", None
    for point, fstype in mounts:
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the last of equal mount points is on top
            best, kind = point, fstype
    return kind


@functools.lru_cache(maxsize=1)
def _mounts() -> tuple[tuple[str, str], ...]:
    """``(mount point, file system type)`` of every mount, in the table's order; read once."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ()
    mounts = []
    for line in lines:
        # id parent major:minor root mount-point options [optional...] - fstype source super
        before, separator, after = line.partition(" - ")
        fields = before.split(" ")
        if not separator or len(fields) < 5 or not after:
            continue
        mounts.append((_unescape(fields[4]), after.split(" ", 1)[0]))
    return tuple(mounts)


def _unescape(field: str) -> str:
    r"""Undo the table's octal escapes (``\040`` for a space, ``\134`` for a backslash)."""
    if "\\" not in field:
        return field
    out, index = [], 0
    while index < len(field):
        digits = field[index + 1 : index + 4]
        if field[index] == "\\" and len(digits) == 3 and all(c in "01234567" for c in digits):
            out.append(chr(int(digits, 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def free_bytes(folder: str) -> int | str:
    """Bytes free on the disk of ``folder`` for a disk-full message (``"unknown"`` if unknown)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return "unknown"
