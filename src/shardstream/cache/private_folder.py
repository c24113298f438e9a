"""The default cache folder: this user's alone.

Datasets streamed without an explicit ``local`` are cached under one folder in the system's
temporary directory, which every user can write to. Someone else could create that folder (or a
symbolic link of that name) first and then read or replace what is cached there; so the folder
is created readable by its owner only, and an existing one is used only if it is a real folder
that this user owns and nobody else may write to. One that others may only read (an older
version made it so) is closed to them first: nobody else could have put anything in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat

from shardstream.errors import CacheFolderError

__all__ = ["ensure_private_folder"]

logger = logging.getLogger(__name__)


def ensure_private_folder(path: str) -> None:
    """Create ``path`` (mode 0700) or check that an existing one is this user's alone.

    Raises:
        CacheFolderError: ``path`` is a symbolic link or not a folder, another user owns it,
            or its permissions let others in.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    status = os.lstat(path)
    if not hasattr(os, "getuid"):  # no POSIX owners to check (Windows)
        return
    problem = None
    if stat.S_ISLNK(status.st_mode) or not stat.S_ISDIR(status.st_mode):
        problem = "is not a folder (a symbolic link, or a file)"
    elif status.st_uid != os.getuid():
        problem = f"belongs to user id {status.st_uid}, not to you ({os.getuid()})"
    elif status.st_mode & 0o022:
        problem = f"is open to other users (mode {stat.S_IMODE(status.st_mode):o})"
    elif status.st_mode & 0o077:  # readable by others, writable by nobody else: close it
        os.chmod(path, 0o700, follow_symlinks=False)
        logger.info(
            "closed the cache folder %s to other users (it was mode %o)",
            path,
            stat.S_IMODE(status.st_mode),
        )
    if problem is not None:
        raise CacheFolderError(
            f"the default cache folder {path} {problem}: shardstream caches there only if it "
            f"is yours alone. Remove it, run 'chmod 700 {path}' if it is yours, or set "
            f"SHARDSTREAM_CACHE_DIR (or pass local=...) to a folder of your own"
        )
