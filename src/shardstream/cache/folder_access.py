"""Whether a remote stream's cache folder can be written, asked once before the first write.

A remote's shards, index, footers and log are fetched into its cache folder (``local=``), so a
folder this process may not write to (a read-only mount, a folder of mode ``0555`` or another
user's) fails the first write, deep in whichever file that happens to be, with a bare
``PermissionError`` or ``OSError: [Errno 30] Read-only file system: '.shardstream'``. The rule:
before a remote stream writes anything, the folder (or, if it does not exist yet, the nearest
folder above it, where it would be made) and its ``.shardstream`` folder, where it exists, must
be writable by this process; if not, a :class:`~shardstream.errors.CacheFolderError` names the
folder and says what to do. A dataset read in place (``local=`` only) is never written to and
is not asked about.
"""

from __future__ import annotations

import os

from shardstream.cache.layout import STATE_FOLDER
from shardstream.errors import CacheFolderError

__all__ = ["require_writable"]


def require_writable(folder: str, *, remote: str) -> None:
    """Raise unless this process may write the cache folder ``folder`` of ``remote``.

    Raises:
        CacheFolderError: The folder (or where it would be made) is read-only to this process.
    """
    for path in (folder, os.path.join(folder, STATE_FOLDER)):
        nearest = path
        while not os.path.lexists(nearest) and os.path.dirname(nearest) != nearest:
            nearest = os.path.dirname(nearest)
        if os.path.isdir(nearest) and not _writable(nearest):
            raise CacheFolderError(
                f"the cache folder {folder} is read-only to this process ({nearest} cannot be "
                f"written: a read-only mount, or no write permission), and {remote} is fetched "
                "into it. Pass a writable local= folder (or set SHARDSTREAM_CACHE_DIR), or, if "
                "the folder already holds the whole dataset, read it in place: local= alone, "
                "without remote="
            )


def _writable(path: str) -> bool:
    """Whether this process may create files in the folder ``path`` (access(2), no write)."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK | os.X_OK, effective_ids=effective)
