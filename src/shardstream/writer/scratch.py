"""The temporary folder a writer with a URL ``out`` writes its shards to before uploading them.

Each such folder holds a lock file its writer keeps locked (``flock``) while it writes. The
kernel releases the lock however its holder ends, ``kill -9`` included, so the next writer to
start finds a folder whose lock it can take and deletes it: a killed writer's shards never stay
in the temporary folder for long. Folders without a lock file (kept with ``keep_local=True``)
are never deleted. On a system without ``flock`` (Windows) nothing is swept.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import tempfile

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["ScratchFolder"]

logger = logging.getLogger(__name__)

_PREFIX = "shardstream-write-"
_LOCK = ".writer.lock"


class ScratchFolder:
    """A fresh temporary folder, locked by this writer until :meth:`release`."""

    def __init__(self) -> None:
        _sweep()
        self.path = tempfile.mkdtemp(prefix=_PREFIX)
        self._fd: int | None = None
        if fcntl is not None:
            # Locked before it takes the name a sweep looks for: never a moment when it is free.
            fresh = os.path.join(self.path, _LOCK + ".new")
            fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(fresh, os.path.join(self.path, _LOCK))
            self._fd = fd

    def release(self, *, keep: bool) -> None:
        """Delete the folder, or with ``keep`` leave it (and its files) for the user."""
        if keep:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.path, _LOCK))
        else:
            shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _sweep() -> None:
    """Delete the scratch folders of writers that ended without cleaning up."""
    if fcntl is None:
        return
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), _PREFIX + "*")):
        try:
            fd = os.open(os.path.join(folder, _LOCK), os.O_RDWR)
        except OSError:  # no lock file: kept on purpose, or its writer is still creating it
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live writer holds it
            os.close(fd)
            continue
        try:
            logger.info("deleting %s: the temporary folder of a writer that was killed", folder)
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)
