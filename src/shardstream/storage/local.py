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
    try:
        with open(temporary, "wb") as handle:
            written = _write_all(handle.fileno(), list(parts))
        os.replace(temporary, path)
    except BaseException:
        _remove_quietly(temporary)
        raise
    return written


def _write_all(fd: int, parts: list[bytes | memoryview]) -> int:
    """Write every part with as few system calls as possible (``writev``, batched)."""
    if not hasattr(os, "writev"):  # not on Windows
        return sum(os.write(fd, part) for part in parts)
    written = 0
    start = 0
    while start < len(parts):
        batch = parts[start : start + _IOV_MAX]
        count = os.writev(fd, batch)
        written += count
        expected = sum(map(len, batch))
        if count < expected:  # a short write: finish this batch part by part
            done = count
            for part in batch:
                size = len(part)
                if done >= size:
                    done -= size
                    continue
                view = memoryview(part)[done:]
                while view:
                    step = os.write(fd, view)
                    written += step
                    view = view[step:]
                done = 0
        start += _IOV_MAX
    return written


_IOV_MAX = 1024  # Linux's limit on buffers per writev; POSIX promises at least 16 ...
if hasattr(os, "sysconf"):
    _IOV_MAX = max(16, min(_IOV_MAX, os.sysconf("SC_IOV_MAX")))  # ... so ask when we can


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
