"""Files and folders in a cache folder, opened without following symbolic links.

A cache folder may be shared (a scratch disk, a group's folder) and the names shardstream
creates in it are predictable, so whoever can write there could plant a symbolic link at one
(``.shardstream/locks/<hash>.lock`` pointing at any file of yours) and have an ordinary read
write through it. The cache folder itself is the user's choice and is trusted; below it, each
folder is opened relative to its parent's descriptor with ``O_NOFOLLOW``, each file likewise,
and each must be a real folder or regular file that this user owns. Anything else is refused
with :class:`~shardstream.errors.CacheFolderError`, which names it.

Renaming a temporary over a final name replaces a link planted there instead of following it,
so files written whole (``index.json``, shards) only need their temporary created exclusively.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterable

from shardstream.cache.layout import STATE_FOLDER
from shardstream.errors import CacheFolderError
from shardstream.storage import atomic_write

__all__ = ["make_folders", "open_file", "read_file", "split_root", "write_file"]


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A FIFO planted at a file's name must not hang the open; regular files ignore the flag.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# Without descriptor-relative calls and O_NOFOLLOW (Windows) paths are opened plainly.
_GUARDED = bool(_NOFOLLOW) and os.open in os.supports_dir_fd and hasattr(os, "geteuid")
# What opening a link, a folder or a FIFO as a file fails with under the flags above.
_NOT_A_FILE = frozenset({errno.ELOOP, errno.EISDIR, errno.ENXIO})


def split_root(path: str) -> tuple[str, str]:
    """``path`` as (the trusted cache folder, the path below it).

    The cache folder is the one holding the path's last ``.shardstream`` component, or else
    the path's own folder (only the file itself is then checked).
    """
    parts = path.split(os.sep)
    if STATE_FOLDER in parts[:-1]:
        cut = len(parts) - 1 - parts[::-1].index(STATE_FOLDER)
        return os.sep.join(parts[:cut]) or os.sep, os.sep.join(parts[cut:])
    folder, name = os.path.split(path)
    return folder or os.curdir, name


def make_folders(path: str, *, root: str | None = None) -> None:
    """Create the folder ``path`` and those above it, below ``root``, following no links.

    Args:
        path: The folder.
        root: The trusted folder ``path`` lies under (default: as :func:`split_root` says).

    Raises:
        CacheFolderError: A folder on the way is a link, not a folder, or not this user's.
    """
    if not _GUARDED:
        os.makedirs(path, exist_ok=True)
        return
    base, relative = _below(path, root)
    os.close(_open_folder(base, _parts(relative), create=True))


def open_file(path: str, flags: int, mode: int = 0o666, *, root: str | None = None) -> int:
    """Open (with ``os.O_CREAT`` in ``flags``: create) a file in a cache folder; its descriptor.

    The folders between ``root`` and the file are created when ``flags`` creates the file.

    Args:
        path: The file.
        flags: ``os.open`` flags; ``O_NOFOLLOW`` and ``O_CLOEXEC`` are added.
        mode: Permissions of a new file (before the umask).
        root: The trusted folder ``path`` lies under (default: as :func:`split_root` says).

    Raises:
        CacheFolderError: The file or a folder on the way is a symbolic link, not a regular
            file (or folder), or belongs to another user.
        FileNotFoundError: It is missing and ``flags`` does not create it.
    """
    if not _GUARDED:
        if flags & os.O_CREAT:
            os.makedirs(os.path.dirname(path) or os.curdir, exist_ok=True)
        return os.open(path, flags | _CLOEXEC, mode)
    base, relative = _below(path, root)
    *folders, name = _parts(relative) or [""]
    folder = _open_folder(base, folders, create=bool(flags & os.O_CREAT))
    try:
        fd = os.open(name, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, mode, dir_fd=folder)
    except OSError as exc:
        if exc.errno not in _NOT_A_FILE:
            raise
        problem = "is a symbolic link" if exc.errno == errno.ELOOP else "is not a regular file"
        raise _refused(path, problem) from None
    finally:
        os.close(folder)
    _check(fd, path, folder=False)
    return fd


def read_file(path: str, *, root: str | None = None) -> bytes:
    """The bytes of a file in a cache folder, opened as :func:`open_file` does.

    Raises:
        CacheFolderError: As :func:`open_file`.
        FileNotFoundError: The file (or a folder above it) is missing.
    """
    fd = open_file(path, os.O_RDONLY, root=root)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def write_file(path: str, parts: Iterable[bytes | memoryview], *, root: str | None = None) -> int:
    """Write a file in a cache folder whole: a new temporary (``O_EXCL``), then renamed.

    Readers see the old file or the whole new one; a link at ``path`` is replaced, not
    followed. The folders between ``root`` and the file are created when missing.

    Returns:
        The number of bytes written.

    Raises:
        CacheFolderError: A folder on the way is a link, not a folder, or not this user's.
    """
    if not _GUARDED:
        return atomic_write(path, parts)
    base, relative = _below(path, root)
    *folders, name = _parts(relative) or [""]
    temporary = f".{name}.tmp-{uuid.uuid4().hex[:12]}"  # storage.local.is_temporary's form
    folder = _open_folder(base, folders, create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        fd = os.open(temporary, flags, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                written = sum(handle.write(part) for part in parts)
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)
            raise
    finally:
        os.close(folder)
    return written


def _below(path: str, root: str | None) -> tuple[str, str]:
    if root is None:
        return split_root(path)
    relative = os.path.relpath(path, root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        raise ValueError(f"{path} is not inside {root}")
    return root, relative


def _parts(relative: str) -> list[str]:
    parts = [part for part in relative.split(os.sep) if part not in ("", os.curdir)]
    if os.pardir in parts:
        raise ValueError(f"{relative!r} does not name a path below a cache folder")
    return parts


def _open_folder(base: str, folders: list[str], *, create: bool) -> int:
    """A descriptor of ``base/folders...``, each folder below ``base`` opened without links."""
    flags = os.O_RDONLY | _DIRECTORY | _CLOEXEC
    try:
        fd = os.open(base, flags)
    except FileNotFoundError:
        if not create:
            raise
        os.makedirs(base, exist_ok=True)
        fd = os.open(base, flags)
    where = base
    try:
        for name in folders:
            where = os.path.join(where, name)
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
            try:
                child = os.open(name, flags | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not _is_link(name, fd):
                    raise  # a file where a folder belongs: the caller's error, as without links
                raise _refused(where, "is a symbolic link") from None
            os.close(fd)
            fd = -1
            _check(child, where, folder=True)
            fd = child
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


def _is_link(name: str, folder: int) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    return False


def _check(fd: int, path: str, *, folder: bool) -> None:
    """Close ``fd`` and refuse it unless it is a regular file (or folder) this user owns."""
    status = os.fstat(fd)
    problem = None
    if not (stat.S_ISDIR if folder else stat.S_ISREG)(status.st_mode):
        problem = "is not a folder" if folder else "is not a regular file"
    elif status.st_uid != os.geteuid():
        problem = f"belongs to user id {status.st_uid}, not to you ({os.geteuid()})"
    if problem is not None:
        os.close(fd)
        raise _refused(path, problem)


def _refused(path: str, problem: str) -> CacheFolderError:
    return CacheFolderError(
        f"{path} {problem}: shardstream opens nothing in a cache folder through links or "
        f"files of others, which whoever can write there could plant. Remove {path}, and give "
        f"local= a folder only you can write to",
    )
