"""Opening the files of a shard on local disk: decompress once, check digests, map or read."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Iterator
from typing import Literal, Protocol

from shardstream.cache.layout import in_place_cache
from shardstream.cache.safe_paths import write_file
from shardstream.errors import (
    ChecksumError,
    ConfigurationError,
    ShardFormatError,
    ShardNotFoundError,
)
from shardstream.format.compression import get_compression
from shardstream.format.encodings import Buffer
from shardstream.format.hashing import HASH_ALGORITHMS, hash_bytes, hash_chunks
from shardstream.format.index import FileInfo, ShardEntry
from shardstream.format.mds import MDSSchema, MDSShardView
from shardstream.format.mds_file import CAN_PREAD, MDSFileView, ShardFile
from shardstream.format.shard_view import ShardView
from shardstream.format.split import SplitShardView
from shardstream.storage.local import file_identity

__all__ = ["FileOpening", "ShardFiles", "ShardOpening", "shard_file_pairs"]

Opened = Buffer | ShardFile  # a file's bytes, its mapping, or the open file

#: How a shard file is opened: read into memory, memory-mapped, or kept open for ``pread``.
ShardOpening = Literal["whole", "map", "pread"]


class FileOpening(Protocol):
    """How a reader opens shard files: a decision the reader's read policy makes.

    The cache decides nothing about reading: the dataset passes its policy
    (``shardstream.ReadPolicy``), whose thresholds say when a file is read whole, mapped or
    read with ``pread``.
    """

    @property
    def zero_copy(self) -> bool:
        """``bytes`` columns of mapped shards come as memoryviews of the mapping."""
        ...

    def opening(
        self,
        file_bytes: int,
        samples: int,
        *,
        can_pread: bool,
        shared: bool = False,
        shared_bytes: int | None = None,
    ) -> ShardOpening:
        """How to open a file of ``file_bytes`` holding ``samples`` samples (0: not MDS data).

        ``shared``: the file is the dataset's, read in place; ``shared_bytes``: that dataset's
        MDS data files total this many bytes (``None``: not known).
        """
        ...

    def reads_runs(self, file_bytes: int, samples: int) -> bool:
        """Whether a shard opened for ``pread`` reads each batch's samples as runs."""
        ...


class _Unread:
    """The opening of files no reader reads here: decompressed and checked, then let go.

    Mapped (the pages are the file's, not the process's), except a file read in place, which
    another process may cut short while it is open: ``pread``, or read whole if not MDS data.
    """

    zero_copy = False

    def opening(
        self,
        file_bytes: int,
        samples: int,
        *,
        can_pread: bool,
        shared: bool = False,
        shared_bytes: int | None = None,
    ) -> ShardOpening:
        if shared and can_pread:
            return "pread" if samples else "whole"
        return "map" if file_bytes else "whole"

    def reads_runs(self, file_bytes: int, samples: int) -> bool:
        return False


class ShardFiles:
    """Finds, decompresses, verifies and maps the files of shards under one dataset folder.

    Compressed files are decompressed into ``cache_root`` under their uncompressed basename,
    written to a temporary name and renamed, so a crash never leaves half a shard under its
    final name; a later open reuses the decompressed file when its size matches the index.
    Reading writes nothing into ``root`` unless ``cache_root`` is ``root`` (a remote dataset's
    cache folder); only :meth:`materialize` told not to keep the compressed files deletes there.

    Args:
        root: The folder holding ``index.json`` (the split folder, if any).
        cache_root: Where decompressed shards go (default: the dataset's own folder in the
            user's cache, :func:`~shardstream.cache.layout.in_place_cache`, found when a
            compressed file is first opened).
        validate_hash: A digest algorithm to check each stored file against, or ``None``.
        policy: How files are opened (read whole, mapped, or read with ``pread``) and whether
            views return ``bytes`` columns as memoryviews of the mapped file: the reader's
            read policy. Without one, files are opened only to be decompressed and checked
            (mapped, or read with ``pread`` where shared).
    """

    def __init__(
        self,
        root: str,
        cache_root: str | None = None,
        validate_hash: str | None = None,
        *,
        policy: FileOpening | None = None,
    ) -> None:
        if validate_hash is not None and validate_hash not in HASH_ALGORITHMS:
            raise ConfigurationError(
                f"validate_hash={validate_hash!r} is not a known algorithm; use one of "
                f"{', '.join(HASH_ALGORITHMS)}"
            )
        self.root = root
        self._cache_root = cache_root or None
        # The files under ``root`` are the reader's own copies only in a remote's cache folder
        # (``cache_root`` is ``root``); else they are the dataset's, read in place.
        self.in_place = cache_root is None or os.path.realpath(cache_root) != os.path.realpath(root)
        self.validate_hash = validate_hash
        self.policy: FileOpening = policy or _Unread()
        # Each file of the dataset read whole in place: its identity when last read.
        self._read_as: dict[str, str] = {}

    @property
    def zero_copy(self) -> bool:
        """Whether views return ``bytes`` columns as memoryviews of the mapped file."""
        return self.policy.zero_copy

    @property
    def cache_root(self) -> str:
        """Where decompressed shards go (the default one is looked up on first use)."""
        if self._cache_root is None:
            self._cache_root = in_place_cache(self.root)
        return self._cache_root

    def open(
        self, entry: ShardEntry, schema: MDSSchema | None, *, shared_bytes: int | None = None
    ) -> ShardView:
        """Return a random-access view of a shard's samples.

        ``shared_bytes``: the MDS data files of the dataset read in place total this many
        bytes, which the policy weighs against reading them whole (``None``: not known).

        Raises:
            ShardNotFoundError: A file the index names is missing.
            ChecksumError: ``validate_hash`` is set and a file's digest differs from the index.
            ShardFormatError: A file is corrupt, truncated or of the wrong size.
        """
        source = os.path.join(self.root, entry.data_file.basename)
        if entry.format == "mds":
            assert schema is not None
            data = self._buffer(
                entry, entry.raw_data, entry.zip_data, samples=entry.samples,
                shared_bytes=shared_bytes,
            )  # fmt: skip
            if isinstance(data, ShardFile):
                runs = self.policy.reads_runs(len(data), entry.samples)
                return MDSFileView(
                    data, schema, entry.samples, source=source, zero_copy=self.zero_copy,
                    runs=runs,
                )  # fmt: skip
            return MDSShardView(
                data,
                schema,
                entry.samples,
                source=source,
                zero_copy=self.zero_copy,
                path=self.uncompressed_path(entry.raw_data, entry.zip_data),
                shared=isinstance(data, bytes) and self.whole_in_place(entry, shared_bytes),
            )
        data = self._buffer(entry, entry.raw_data, entry.zip_data)
        assert entry.raw_meta is not None
        meta = self._buffer(entry, entry.raw_meta, entry.zip_meta)
        assert not isinstance(data, ShardFile)  # opened for pread only when samples are given
        assert not isinstance(meta, ShardFile)
        return SplitShardView(data, meta, entry, source=source)

    def whole_in_place(self, entry: ShardEntry, shared_bytes: int | None) -> bool:
        """Whether the policy reads ``entry``'s data file whole only as its dataset is small.

        A shard of small samples of a dataset read in place whose MDS data files total
        ``shared_bytes`` (as :meth:`open` takes it), over ``read_whole_bytes``: without the
        dataset's size it would be read with ``pread``. Judged from the index entry: nothing
        is read.
        """
        if not self.in_place or entry.format != "mds" or entry.zip_data is not None:
            return False
        size, samples, opening = entry.raw_data.bytes, entry.samples, self.policy.opening
        alone = opening(size, samples, can_pread=CAN_PREAD, shared=True)
        small = opening(size, samples, can_pread=CAN_PREAD, shared=True, shared_bytes=shared_bytes)
        return alone == "pread" and small == "whole"

    def changed_since_read(self, entry: ShardEntry) -> bool:
        """Whether ``entry``'s data file, read whole in place, changed since it was last read.

        Judged by the file's identity (``file_identity``: inode, size, modification and change
        times), taken as it was opened: any write or replacement after that shows, and a file
        gone counts as changed. ``False`` for a file never read whole here.
        """
        path = self.uncompressed_path(entry.raw_data, entry.zip_data)
        known = self._read_as.get(path)
        if known is None:
            return False
        try:
            return file_identity(os.stat(path)) != known
        except OSError:
            return True

    def materialize(self, entry: ShardEntry, *, keep_zip: bool = True) -> None:
        """Make sure the shard's uncompressed files exist, decompressing (and checking) them.

        Args:
            entry: The shard.
            keep_zip: Keep the compressed files once decompressed (else they are deleted).

        Raises:
            ShardNotFoundError: A file the index names is missing.
            ChecksumError: ``validate_hash`` is set and a file's digest differs from the index.
            ShardFormatError: A file is corrupt, truncated or of the wrong size.
        """
        for raw, zipped in shard_file_pairs(entry):
            if zipped is None:
                continue
            buffer = self._buffer(entry, raw, zipped)
            if isinstance(buffer, mmap.mmap):  # never a ShardFile: no samples were given
                buffer.close()
            if not keep_zip:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.root, zipped.basename))

    def _buffer(
        self,
        entry: ShardEntry,
        raw: FileInfo,
        zipped: FileInfo | None,
        *,
        samples: int = 0,
        shared_bytes: int | None = None,
    ) -> Opened:
        """The uncompressed file, decompressed first if need be, opened as the policy says.

        Only an MDS data file gives its ``samples``; others are never read with ``pread``.
        """
        path = self.uncompressed_path(raw, zipped)
        if zipped is None:
            buffer = self._map(path, samples, shared=self.in_place, shared_bytes=shared_bytes)
            self._check(entry, raw, buffer, path)
            return buffer
        try:
            if os.path.getsize(path) == raw.bytes:
                return self._map(path, samples)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE:
                raise
        zip_path = os.path.join(self.root, zipped.basename)
        packed = self._map(zip_path, shared=self.in_place)
        assert not isinstance(packed, ShardFile)  # no samples were given
        self._check(entry, zipped, packed, zip_path)
        assert entry.compression is not None
        pieces = get_compression(entry.compression).decompress_chunks(
            packed, source=zip_path, max_size=raw.bytes
        )
        try:
            # Its folders are made through no planted link, and a link at ``path`` is replaced.
            written = _exactly(pieces, raw.bytes, zip_path, self._remedy())
            write_file(path, written, root=self.cache_root)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE | {errno.EEXIST}:
                raise
            raise ShardFormatError(
                f"cannot store the decompressed shard at {path} ({exc}): index.json's "
                f"raw_data.basename {raw.basename!r} does not name a file"
            ) from exc
        return self._map(path, samples)

    def _map(
        self,
        path: str,
        samples: int = 0,
        *,
        shared: bool = False,
        shared_bytes: int | None = None,
    ) -> Opened:
        """A whole file, read-only: read into memory, memory-mapped, or open for ``pread``.

        ``shared``: the file is the dataset's, read in place, and never mapped
        (the read policy's ``opening`` says why); ``shared_bytes``: as :meth:`open`'s.
        """
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                status = os.fstat(fd)
                size = status.st_size
                how = self.policy.opening(
                    size, samples, can_pread=CAN_PREAD, shared=shared, shared_bytes=shared_bytes
                )
                if how == "whole":
                    if shared:  # what is read is at least as new as this (changed_since_read)
                        self._read_as[path] = file_identity(status)
                    return _read_whole(fd, size)
                if how == "pread":
                    file, fd = ShardFile(fd, size), -1  # it owns the descriptor now
                    return file
                return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            finally:
                if fd >= 0:
                    os.close(fd)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE:
                raise
            raise ShardNotFoundError(
                f"shard file {path} is missing (or not a file); the dataset is incomplete or "
                f"index.json belongs to another dataset"
            ) from exc

    def uncompressed_path(self, raw: FileInfo, zipped: FileInfo | None) -> str:
        """Where the uncompressed file is: the dataset's, or the one decompressed from it."""
        return os.path.join(self.root if zipped is None else self.cache_root, raw.basename)

    def _remedy(self) -> str:
        """What to do about a bad file in ``root``: only a remote's cached copy may go."""
        if self._cache_root == self.root:  # a remote's cache folder: the copy is fetched anew
            return "delete it so it is fetched again"
        return (  # the dataset itself, read in place: nothing of it is the cache's to delete
            "the dataset read in place is damaged; restore the file from where the dataset "
            "came from, or write the dataset again"
        )

    def _check(self, entry: ShardEntry, info: FileInfo, buffer: Opened, path: str) -> None:
        if len(buffer) != info.bytes:
            raise ShardFormatError(
                f"{path} is {len(buffer)} bytes but index.json says {info.bytes}; the file is "
                f"truncated or was replaced: {self._remedy()}"
            )
        algorithm = self.validate_hash
        if algorithm is None:
            return
        expected = info.hashes.get(algorithm)
        if expected is None:
            raise ConfigurationError(
                f"validate_hash={algorithm!r}, but index.json records only "
                f"{sorted(info.hashes) or 'no'} digests for {path}; choose one of those"
            )
        if isinstance(buffer, ShardFile):
            actual = hash_chunks(algorithm, buffer.chunks(path))
        else:
            actual = hash_bytes(
                algorithm, buffer if isinstance(buffer, bytes) else memoryview(buffer)
            )
        if actual != expected:
            raise ChecksumError(
                f"{path}: {algorithm} digest is {actual} but index.json says {expected}; the "
                f"file is corrupt: {self._remedy()}"
            )


def _exactly(pieces: Iterator[bytes], size: int, source: str, remedy: str) -> Iterator[bytes]:
    """``pieces``, written as they come; short of ``size`` bytes, an error before the rename."""
    written = 0
    for piece in pieces:
        written += len(piece)
        yield piece
    if written != size:
        raise ShardFormatError(
            f"{source} decompresses to {written} bytes but index.json says {size}; "
            f"the file is corrupt: {remedy}"
        )


def shard_file_pairs(entry: ShardEntry) -> list[tuple[FileInfo, FileInfo | None]]:
    """The shard's (uncompressed, compressed) file pairs: data, then meta for split formats."""
    pairs = [(entry.raw_data, entry.zip_data)]
    if entry.raw_meta is not None:
        pairs.append((entry.raw_meta, entry.zip_meta))
    return pairs


# The errors of a path that names no regular file (a basename from index.json is untrusted).
_NOT_A_FILE = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP}
)


# Shards are mapped lazily, pages coming in as samples are read: populating a mapping up
# front made a reader wait for whole shards it had barely touched.


def _read_whole(fd: int, size: int) -> bytes:
    """The file's bytes: ``size`` of them, or what it holds if it shrank meanwhile."""
    data = os.read(fd, size + 1)  # one more: a file that grew shows it
    if len(data) >= size:
        return data
    parts = [data]
    while chunk := os.read(fd, size + 1 - sum(map(len, parts))):
        parts.append(chunk)
    return b"".join(parts)
