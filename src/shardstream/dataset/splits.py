"""A dataset root that holds splits (``train/``, ``validation/``) and no index of its own.

Pointing a reader at such a root, or naming a split that is not there, fails for want of an
``index.json``; the error then lists the splits there are and says how to pick one (``split=``
in Python, ``--split`` on the command line), suggesting the closest name to a misspelt one.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Iterable

from shardstream.errors import ShardstreamError, StorageError
from shardstream.format.index import INDEX_BASENAME
from shardstream.storage import DownloadOptions, fetch_listing, open_store

__all__ = ["listed_splits", "local_splits", "remote_splits", "split_advice"]


def listed_splits(keys: Iterable[str]) -> list[str]:
    """The folders right below a root holding an ``index.json``, from the root's keys, sorted."""
    found = set()
    for key in keys:
        folder, sep, name = key.rpartition("/")
        if sep and name == INDEX_BASENAME and "/" not in folder:
            found.add(folder)
    return sorted(found)


def local_splits(root: str) -> list[str]:
    """The sub-folders of the local folder ``root`` that hold an ``index.json``, sorted."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(n for n in names if os.path.isfile(os.path.join(root, n, INDEX_BASENAME)))


def remote_splits(url: str, options: DownloadOptions) -> list[str]:
    """The prefixes right below ``url`` holding an ``index.json`` (none when it cannot list)."""
    with contextlib.suppress(ShardstreamError, StorageError, OSError):
        store = open_store(url, timeout=options.timeout)
        return listed_splits(fetch_listing(store, "", options))
    return []


def split_advice(split: str, found: list[str], *, flag: str = "split=") -> str:
    """What to tell a user whose root (or split ``split``) has no index, given the splits found.

    ``flag`` is how the user names a split: ``"split="`` (Python) or ``"--split"`` (command
    line). Empty when no split is found.

    Example:
        split_advice("trian", ["train", "validation"])  # "... did you mean split='train'?"
    """
    if not found:
        return ""

    def named(name: str) -> str:
        return f"split={name!r}" if flag == "split=" else f"{flag} {name}"

    listed = ", ".join(found)
    if not split:
        return f"it holds the splits {listed}: pick one with {named(found[0])}"
    close = difflib.get_close_matches(split, found, n=1, cutoff=0.5)
    guess = f"; did you mean {named(close[0])}?" if close else ""
    return f"there is no split {split!r}; the splits are {listed}{guess}"
