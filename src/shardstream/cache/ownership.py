"""Which folders are caches: those the library created, and marked so when it did.

The cache deletes and replaces files in a stream's ``local=`` folder (changed shards, evicted
ones, a newer index). It may do so only in a folder it owns, so the rule, enforced here alone
(:func:`claim_cache_folder`, before anything of a remote is read into the folder), is:

    A folder is a cache when it holds the marker ``.shardstream/cache-folder``, which the
    library writes when it creates the folder. Files in any other folder are never deleted
    or overwritten.

Claiming ``local=`` for a remote therefore:

* creates and marks a folder that is missing, empty, or holds nothing but ``.shardstream``
  (a claim another process has just begun);
* accepts a marked folder;
* adopts (marks) a folder that an earlier version cached a remote in: its ``.shardstream``
  holds that version's record of the remote (``source.json``, or the older ``index.stamp``),
  which is written nowhere else, as a regular file of this user's reached through no link;
* refuses a folder this process cannot write (:mod:`~shardstream.cache.folder_access`);
* refuses, with :class:`~shardstream.errors.CacheFolderError` naming both paths, any other
  folder: one holding files but no marker, one holding a dataset of its own, and, whatever it
  holds, one that is (after resolving links) the remote itself, inside it, or above it.

A dataset read in place (``remote=None``, or ``local=`` given the remote's own path) is never
claimed: it is never written to, and nothing here suggests deleting it.
"""

from __future__ import annotations

import contextlib
import os

from shardstream.cache.folder_access import require_writable
from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.safe_paths import read_file, write_file
from shardstream.errors import CacheFolderError
from shardstream.format.index import INDEX_BASENAME
from shardstream.storage import is_remote, local_path

__all__ = ["MARKER", "claim_cache_folder", "is_cache_folder", "mark_cache_folder"]

#: The marker's name in a cache folder's state folder.
MARKER = "cache-folder"

_MARKER_TEXT = (
    b"This folder is a shardstream cache: shardstream created it, and deletes and replaces\n"
    b"the files in it. Keep nothing else here.\n"
)
# What an earlier version wrote into a folder only when it cached a remote there.
_LEGACY_RECORDS = ("source.json", "index.stamp")
# Top-level names by which a folder holds a dataset (MDS, Delta); *.parquet files too.
_DATASET_NAMES = (INDEX_BASENAME, "_delta_log")


def marker_path(folder: str) -> str:
    """The marker's path in ``folder``."""
    return os.path.join(folder, STATE_FOLDER, MARKER)


def is_cache_folder(folder: str) -> bool:
    """Whether ``folder`` holds the marker (a regular file of this user's, not a link)."""
    return _readable(marker_path(folder), folder)


def mark_cache_folder(folder: str) -> None:
    """Create ``folder`` (and those above it) if missing, and write its marker.

    Raises:
        CacheFolderError: ``.shardstream`` in it is a link or another user's.
    """
    os.makedirs(folder, exist_ok=True)
    write_file(marker_path(folder), [_MARKER_TEXT], root=folder)


def claim_cache_folder(local: str, remote: str, split: str = "") -> None:
    """Make ``local`` the cache folder of ``remote``, or refuse it (the module's rule).

    Args:
        local: The stream's cache folder (its split's folder, when it has a split).
        remote: The stream's remote root (a URL, or a local path), its split's likewise.
        split: The split both end with (``""``: none); the folders given apart from it are
            the ones that must not overlap.

    Raises:
        CacheFolderError: ``local`` overlaps the remote, is a folder the library did not
            create (files without the marker, or a dataset of its own), or is no folder and
            none can be made there (a file, a link to a missing folder); the message names
            both paths and says what to do.
    """
    if split:
        _check_apart(local[: -len(split) - 1], remote[: -len(split) - 1])
    _check_apart(local, remote)
    require_writable(local, remote=remote)  # before the marker, the first write
    if is_cache_folder(local):
        return
    try:
        names = os.listdir(local)
    except FileNotFoundError:
        names = []
    except NotADirectoryError:
        raise _not_a_folder(local, remote) from None
    others = [name for name in names if name != STATE_FOLDER]
    # The marker is written before anything else: files seen here with the marker there now
    # are another process's claim that began after the check above.
    if others and not is_cache_folder(local) and not _legacy_cache(local):
        raise _not_ours(local, remote, others)
    try:
        os.makedirs(local, exist_ok=True)
    except (FileExistsError, FileNotFoundError, NotADirectoryError):
        # A link to a missing folder (an unmounted disk), or a file on the way: what the
        # folder would be is not known, so nothing is created through it.
        raise _not_a_folder(local, remote) from None
    try:
        mark_cache_folder(local)
    except (NotADirectoryError, IsADirectoryError):
        raise CacheFolderError(
            f"local={local} holds a {STATE_FOLDER} that shardstream did not make ({STATE_FOLDER} "
            f"is not a folder, or {STATE_FOLDER}/{MARKER} not a file), so it is not used to "
            f"cache {remote}: pass local= a new or empty folder (or leave local= out: each "
            f"remote then gets its own)"
        ) from None


def _not_a_folder(local: str, remote: str) -> CacheFolderError:
    if os.path.isfile(local):
        why = "it is a file"
    elif os.path.islink(local):
        why = f"it is a link to {os.readlink(local)}, which is no folder"
    else:
        why = "a path above it is a file, or a link to a missing folder"
    return CacheFolderError(
        f"local={local} is not a folder and none can be made there ({why}), so it cannot "
        f"cache {remote}: pass local= a new or empty folder (or leave local= out: each remote "
        f"then gets its own)"
    )


def _legacy_cache(local: str) -> bool:
    """Whether an earlier version recorded a remote it cached in ``local`` (so: ours).

    The record counts only as :func:`~shardstream.cache.safe_paths.read_file` reads it: a
    regular file of this user's, reached through no link, as an earlier version wrote it.
    """
    return any(
        _readable(os.path.join(local, STATE_FOLDER, name), local) for name in _LEGACY_RECORDS
    )


def _readable(path: str, root: str) -> bool:
    try:
        read_file(path, root=root)
    except (OSError, CacheFolderError):
        return False
    return True


def _not_ours(local: str, remote: str, names: list[str]) -> CacheFolderError:
    dataset = sorted(name for name in names if name in _DATASET_NAMES or name.endswith(".parquet"))
    if dataset:
        return CacheFolderError(
            f"local={local} holds a dataset of its own ({', '.join(dataset[:3])}), not a cache "
            f"of {remote} made by shardstream, so nothing is written to it: the cache deletes "
            f"and replaces the files of its folder. To read that dataset, pass local= alone "
            f"(no remote=: it is read in place, never written to); to stream {remote}, pass "
            f"local= a new or empty folder (or leave local= out)"
        )
    shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
    return CacheFolderError(
        f"local={local} holds files that shardstream did not write ({shown}) and no "
        f"{STATE_FOLDER}/{MARKER} marker, so it is not used to cache {remote}: the cache "
        f"deletes and replaces the files of its folder, and only in folders it created. Pass "
        f"local= a new or empty folder (or leave local= out: each remote then gets its own)"
    )


def _check_apart(local: str, remote: str) -> None:
    """Refuse a cache folder that is a local remote, lies inside it, or holds it."""
    if is_remote(remote):
        return
    there = os.path.realpath(local_path(remote))
    here = os.path.realpath(local)
    if here == there:
        relation = "is the same folder as"
    elif _inside(here, there):
        relation = "lies inside"
    elif _inside(there, here):
        relation = "holds"
    else:
        return
    raise CacheFolderError(
        f"local={local} {relation} remote={remote} (after resolving links), so it cannot be "
        f"its cache: caching deletes and replaces files in local=. To read {remote} where it "
        f"is, pass it as local= alone (no remote=: read in place, never written to); to cache "
        f"it, pass local= a folder apart from it (or leave local= out)"
    )


def _inside(path: str, folder: str) -> bool:
    with contextlib.suppress(ValueError):  # other drives (Windows): apart
        return os.path.commonpath([path, folder]) == folder
    return False
