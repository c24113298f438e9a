"""Local files: atomic writes (temporary name, then rename) and a folder used as a store."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable

__all__ = ["LocalStore", "atomic_write", "temporary_sibling"]


def temporary_sibling(path: str) -> str:
    """A unique temporary name in the same folder as ``path`` (so a rename is atomic)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex[:12]}")


def atomic_write(path: str, parts: Iterable[bytes | memoryview]) -> int:
    """Write ``parts`` to ``path`` so that readers see either the old file or the whole new one.

    Returns:
        The number of bytes written.
    """
    temporary = temporary_sibling(path)
    written = 0
    try:
        with open(temporary, "wb") as handle:
            for part in parts:
                written += handle.write(part)
        os.replace(temporary, path)
    except BaseException:
        _remove_quietly(temporary)
        raise
    return written


class LocalStore:
    """A local folder used as the remote side of a writer (``file://`` URLs and plain paths).

    Args:
        root: The dataset folder.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def put_file(self, local_path: str, key: str) -> None:
        """Copy ``local_path`` to ``<root>/<key>`` atomically."""
        target = os.path.join(self.root, key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = temporary_sibling(target)
        try:
            shutil.copyfile(local_path, temporary)
            os.replace(temporary, target)
        except BaseException:
            _remove_quietly(temporary)
            raise

    def url(self, key: str) -> str:
        """The path of ``key`` in this folder."""
        return os.path.join(self.root, key)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
