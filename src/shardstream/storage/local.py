"""Local files: atomic writes (temporary name, then rename) and a folder used as a store."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterable, Iterator

from shardstream.errors import DISK_FULL_ERRNOS, ObjectNotFoundError, StorageError
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key, check_range

__all__ = ["LocalStore", "atomic_write", "is_temporary", "pwrite_all", "temporary_sibling"]

_TEMPORARY = re.compile(r"\..+\.tmp-[0-9a-f]{12}")


def temporary_sibling(path: str) -> str:
    """A unique temporary name in the same folder as ``path`` (so a rename is atomic).

    The name is ``.{name}.tmp-{12 hex digits}``; :func:`is_temporary` recognises it.
    """
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex[:12]}")


def is_temporary(name: str) -> bool:
    """Whether the file name ``name`` (no folder) is one :func:`temporary_sibling` makes."""
    return _TEMPORARY.fullmatch(name) is not None


def atomic_write(path: str, parts: Iterable[bytes | memoryview]) -> int:
    """Write ``parts`` to ``path`` so that readers see either the old file or the whole new one.

    Returns:
        The number of bytes written.
    """
    temporary = temporary_sibling(path)
    try:
        with open(temporary, "xb") as handle:  # exclusive: never through a link planted there
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
    """A local folder used as a dataset root (``file://`` URLs and plain paths).

    Writes are atomic (a temporary sibling renamed into place); files that are still being
    written, under such temporary names, are not listed.

    Args:
        root: The dataset folder. It need not exist until something is written.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def url(self, key: str) -> str:
        """The path of ``key`` in this folder."""
        return os.path.join(self.root, key)

    def put_file(self, local_path: str, key: str) -> None:
        """Copy ``local_path`` to ``<root>/<key>`` atomically.

        Raises:
            OSError: The copy failed (the source is missing, the disk is full, ...).
        """
        target = self._path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = temporary_sibling(target)
        try:
            shutil.copyfile(local_path, temporary)
            os.replace(temporary, target)
        except BaseException:
            _remove_quietly(temporary)
            raise

    def delete(self, key: str) -> None:
        """Remove the file under ``key`` (a missing file is already gone).

        Raises:
            StorageError: The file could not be removed.
        """
        path = self._path(key)
        with self._boundary("deleting", key):
            _remove_quietly(path)

    def get_bytes(self, key: str) -> bytes:
        """The whole file under ``key``.

        Raises:
            ObjectNotFoundError: No file under ``key``.
            StorageError: The file could not be read.
        """
        with self._boundary("reading", key), open(self._path(key), "rb") as handle:
            return handle.read()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start .. end - 1`` of the file under ``key``.

        Raises:
            ConfigurationError: The range is negative or reversed.
            ObjectNotFoundError: No file under ``key``.
            StorageError: The range runs past the end of the file, or it could not be read.
        """
        path = self._path(key)
        check_range(start, end, self.url(key))
        if start == end:
            return b""
        with self._boundary("reading", key):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            try:
                size = os.fstat(fd).st_size
                if end > size:
                    raise StorageError(
                        f"reading {self.url(key)}: byte range [{start}, {end}) runs past the "
                        f"end of the file ({size} bytes)"
                    )
                parts = []
                offset = start
                while offset < end:
                    chunk = os.pread(fd, end - offset, offset)
                    if not chunk:  # the file shrank under us
                        raise StorageError(
                            f"reading {self.url(key)}: the file shrank to {offset} bytes while "
                            "it was read; something rewrote it: start again"
                        )
                    parts.append(chunk)
                    offset += len(chunk)
            finally:
                os.close(fd)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def copy_into(self, key: str, fd: int) -> int:
        """Copy the file under ``key`` into the open file ``fd`` (from its start), in the kernel.

        ``copy_file_range`` where the system has it: no bytes pass through this process (no
        buffers, and less time than reading and writing in parts), and file systems that share
        blocks (XFS, Btrfs) clone instead of copying. Elsewhere, or across file systems that
        refuse it, 8 MiB reads and writes.

        Returns:
            The number of bytes copied: the file's size when it was opened.

        Raises:
            ObjectNotFoundError: No file under ``key``.
            StorageError: The file could not be read, or shrank while it was copied.
            OSError: ``fd``'s disk is full (``ENOSPC``, ``EDQUOT``): the destination's error,
                left for the caller to report as its own (a full cache is not a bad store).
        """
        with self._boundary("reading", key):
            source = os.open(self._path(key), os.O_RDONLY | getattr(os, "O_BINARY", 0))
            try:
                size = os.fstat(source).st_size
                done = _kernel_copy(source, fd, size)
                while done < size:
                    chunk = os.pread(source, min(_COPY_CHUNK, size - done), done)
                    if not chunk:
                        raise StorageError(
                            f"reading {self.url(key)}: the file shrank to {done} bytes while "
                            "it was copied; something rewrote it: start again"
                        )
                    pwrite_all(fd, chunk, done)
                    done += len(chunk)
            finally:
                os.close(source)
        return size

    def info(self, key: str) -> ObjectInfo:
        """The file's size, and an etag made of its inode, size and modification time.

        Raises:
            ObjectNotFoundError: No file under ``key``.
        """
        with self._boundary("checking", key):
            status = os.stat(self._path(key))
        if not stat.S_ISREG(status.st_mode):
            raise ObjectNotFoundError(
                f"checking {self.url(key)} failed: it is not a file (a folder?); name a file"
            )
        return _file_info(status)

    def exists(self, key: str) -> bool:
        """Whether a file (not a folder) exists under ``key``."""
        return os.path.isfile(self._path(key))

    def list_temporaries(self) -> list[str]:
        """The keys of the temporary siblings under the root (copies under way, or killed).

        :meth:`list` leaves them out; a writer deletes those of its own files that a killed
        writer left (:func:`shardstream.writer.publish.remove_unnamed`).
        """
        return sorted(key for key, _ in self._walk(temporaries=True))

    def list(self, prefix: str = "") -> list[str]:
        """The keys of the files under the root that start with ``prefix``, sorted.

        Files being written (temporary siblings) are left out; a missing root lists nothing.
        """
        return sorted(key for key, _ in self._walk() if key.startswith(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list`, with each file's size and an etag of its inode, size and mtime."""
        found: dict[str, ObjectInfo] = {}
        for key, entry in self._walk():
            if key.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):  # removed since it was listed
                    status = entry.stat()
                    if stat.S_ISREG(status.st_mode):
                        found[key] = _file_info(status)
        return found

    def _walk(self, *, temporaries: bool = False) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Each file's key and entry, as ``os.walk`` finds them (links to folders not followed).

        The files, or with ``temporaries`` the temporary siblings alone.
        """
        pending = [("", self.root)]
        while pending:
            base, folder = pending.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:  # gone, or unreadable: os.walk passes over it too
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append((f"{base}{entry.name}/", entry.path))
                elif entry.is_dir():  # a link to a folder: neither a file nor followed
                    continue
                elif is_temporary(entry.name) is temporaries:
                    yield base + entry.name, entry

    def _path(self, key: str) -> str:
        return os.path.join(self.root, check_key(key, self.root))

    @contextlib.contextmanager
    def _boundary(self, action: str, key: str) -> Iterator[None]:
        """Turn the operating system's errors into shardstream's, naming the path."""
        try:
            yield
        except StorageError:
            raise
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectNotFoundError(
                f"{action} {self.url(key)} failed: no such file ({exc.strerror}); check the "
                f"key, and that the folder {self.root} is the complete dataset"
            ) from exc
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:  # a copy's destination (copy_into), not the store
                raise
            raise StorageError(f"{action} {self.url(key)} failed: {exc}") from exc


_COPY_CHUNK = 8 << 20
#: ``copy_file_range`` errors that mean "not here": copy by reading and writing instead.
_NO_KERNEL_COPY = frozenset(
    getattr(errno, name)
    for name in ("EXDEV", "ENOSYS", "EINVAL", "EOPNOTSUPP", "ENOTSUP", "EBADF", "EPERM")
    if hasattr(errno, name)
)


def _kernel_copy(source: int, dest: int, size: int) -> int:
    """Copy up to ``size`` bytes of ``source`` to ``dest`` in the kernel; the bytes copied.

    Stops early, leaving the rest to the caller, at the end of ``source`` or where the kernel
    cannot copy between these files.
    """
    copy = getattr(os, "copy_file_range", None)
    done = 0
    while copy is not None and done < size:
        try:
            step = copy(source, dest, size - done, done, done)
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
            break
        if step == 0:  # the end of the file came early: the caller says it shrank
            break
        done += step
    return done


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd``, however short each ``pwrite`` is."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def file_identity(status: os.stat_result) -> str:
    """A local file's identity tag: it changes whenever the file is rewritten or replaced.

    Inode, size and modification time alone miss a rewrite in place that restores the old
    modification time (``cp -p`` over the file, ``touch -r``, ``rsync -t``); the change time
    is set by the kernel on every write and cannot be set back by a user, so it is part of
    the tag. A tag is only ever compared for equality, never ordered.
    """
    return f"{status.st_ino:x}-{status.st_size:x}-{status.st_mtime_ns:x}-{status.st_ctime_ns:x}"


def _file_info(status: os.stat_result) -> ObjectInfo:
    """A file's size and its identity tag (:func:`file_identity`)."""
    return ObjectInfo(size=status.st_size, etag=file_identity(status))
