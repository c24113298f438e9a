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

from shardstream.errors import (
    DISK_FULL_ERRNOS,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageError,
)
from shardstream.storage.base import ObjectInfo
from shardstream.storage.store_base import Failure, Kind, WritableStore

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


class LocalStore(WritableStore):
    """A local folder used as a dataset root (``file://`` URLs and plain paths).

    Writes are atomic (a temporary sibling renamed into place); files that are still being
    written, under such temporary names, are not listed.

    Args:
        root: The dataset folder. It need not exist until something is written.
    """

    _noun = "file"
    # A listing is one walk, filtered: it can start after a key (for the same result either
    # way), and is never split, as every range would walk the whole folder again.
    _lists_from_key = False
    _identifies_reads = True  # the open file's inode, size and modification time
    _ties_ranges = True  # the open file's identity, before and after the read

    def __init__(self, root: str) -> None:
        self.root = root
        super().__init__()

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def url(self, key: str) -> str:
        """The path of ``key`` in this folder."""
        return os.path.join(self.root, key)

    def exists(self, key: str) -> bool:
        """Whether a file (not a folder) exists under ``key``."""
        return os.path.isfile(self._path(key))

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
                        raise self._shrank(key, done)
                    pwrite_all(fd, chunk, done)
                    done += len(chunk)
            finally:
                os.close(source)
        return size

    def list_temporaries(self) -> list[str]:
        """The keys of the temporary siblings under the root (copies under way, or killed).

        :meth:`list` leaves them out; a writer deletes those of its own files that a killed
        writer left (:func:`shardstream.writer.publish.remove_unnamed`).
        """
        return sorted(key for key, _ in self._walk(temporaries=True))

    # --- the primitives -------------------------------------------------------------------------

    def _write(self, local_path: str, key: str) -> None:
        """Copy ``local_path`` to ``<root>/<key>`` through a temporary sibling, renamed."""
        target = self._path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = temporary_sibling(target)
        try:
            shutil.copyfile(local_path, temporary)
            os.replace(temporary, target)
        except BaseException:
            _remove_quietly(temporary)
            raise

    def _remove(self, key: str) -> None:
        _remove_quietly(self._path(key))

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        fd = os.open(self._path(key), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            size = os.fstat(fd).st_size
            stop = size if end is None else end
            if stop > size:
                raise self._past_the_end(key, start, stop, size)
            return self._pread(fd, key, start, stop)
        finally:
            os.close(fd)

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        """The whole file and the identity of the open file, unchanged while it was read."""
        fd = os.open(self._path(key), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            before = _file_info(os.fstat(fd))
            data = self._pread(fd, key, 0, before.size)
            after = _file_info(os.fstat(fd))
        finally:
            os.close(fd)
        if after != before:  # written in place while read: the bytes may be of neither
            raise StorageError(
                f"reading {self.url(key)} failed: the file changed while it was read"
            )
        return data, before

    def _read_range_info(
        self, key: str, start: int, end: int, etag: str | None
    ) -> tuple[bytes, ObjectInfo | None]:
        """The range; the open file's size and identity (:func:`file_identity`), unchanged.

        With ``etag``, only if that identity is ``etag``.
        """
        fd = os.open(self._path(key), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            before = os.fstat(fd)
            answered = file_identity(before)
            if etag is not None and answered != etag:
                raise ObjectChangedError(self.url(key))
            if end > before.st_size:
                raise self._past_the_end(key, start, end, before.st_size)
            data = self._pread(fd, key, start, end)
            if file_identity(os.fstat(fd)) != answered:  # written in place while read
                if etag is not None:
                    raise ObjectChangedError(self.url(key))
                raise StorageError(
                    f"reading {self.url(key)} failed: the file changed while it was read"
                )
        finally:
            os.close(fd)
        return data, ObjectInfo(size=before.st_size, etag=answered)

    def _pread(self, fd: int, key: str, start: int, stop: int) -> bytes:
        parts = []
        offset = start
        while offset < stop:
            chunk = os.pread(fd, stop - offset, offset)
            if not chunk:  # the file shrank under us
                raise self._shrank(key, offset)
            parts.append(chunk)
            offset += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _head(self, key: str) -> ObjectInfo:
        """The file's size, and an etag made of its inode, size and modification time."""
        status = os.stat(self._path(key))
        if not stat.S_ISREG(status.st_mode):
            raise ObjectNotFoundError(
                f"checking {self.url(key)} failed: it is not a file (a folder?); name a file"
            )
        return _file_info(status)

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """The whole walk as one page; files being written (temporary siblings) left out."""
        found: dict[str, ObjectInfo] = {}
        for key, entry in self._walk():
            if key.startswith(prefix) and (start_after is None or key > start_after):
                with contextlib.suppress(FileNotFoundError):  # removed since it was listed
                    status = entry.stat()
                    if stat.S_ISREG(status.st_mode):
                        found[key] = _file_info(status)
        return found, None

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
            return Failure(Kind.NOT_FOUND, str(exc.strerror))
        if isinstance(exc, OSError):
            if exc.errno in DISK_FULL_ERRNOS:  # a copy's destination (copy_into), not the store
                return None
            return Failure(Kind.OTHER, str(exc))
        return None

    def _not_found_hint(self) -> str:
        return f"; check the key, and that the folder {self.root} is the complete dataset"

    # --- internals ------------------------------------------------------------------------------

    def _shrank(self, key: str, size: int) -> StorageError:
        return StorageError(
            f"reading {self.url(key)}: the file shrank to {size} bytes while it was read; "
            "something rewrote it: start again"
        )

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
        return os.path.join(self.root, self._key(key))


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
