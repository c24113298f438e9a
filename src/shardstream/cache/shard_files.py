"""Opening the files of a shard on local disk: decompress once, check digests, map or read."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Iterator

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
from shardstream.format.split import SplitShardView

__all__ = ["PREAD_MEAN", "ShardFiles", "ShardView", "shard_file_pairs"]

ShardView = MDSShardView | MDSFileView | SplitShardView
Opened = Buffer | ShardFile  # a file's bytes, its mapping, or the open file


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
        zero_copy: Views return ``bytes`` columns as memoryviews of the mapped file.

    MDS shards of large samples (``PREAD_MEAN`` bytes or more on average, ``zero_copy``
    off) are not mapped but read value by value (:class:`MDSFileView`), so that reading them
    does not grow the process's resident memory.
    """

    def __init__(
        self,
        root: str,
        cache_root: str | None = None,
        validate_hash: str | None = None,
        *,
        zero_copy: bool = False,
    ) -> None:
        if validate_hash is not None and validate_hash not in HASH_ALGORITHMS:
            raise ConfigurationError(
                f"validate_hash={validate_hash!r} is not a known algorithm; use one of "
                f"{', '.join(HASH_ALGORITHMS)}"
            )
        self.root = root
        self._cache_root = cache_root or None
        self.validate_hash = validate_hash
        self.zero_copy = zero_copy

    @property
    def cache_root(self) -> str:
        """Where decompressed shards go (the default one is looked up on first use)."""
        if self._cache_root is None:
            self._cache_root = in_place_cache(self.root)
        return self._cache_root

    def open(self, entry: ShardEntry, schema: MDSSchema | None) -> ShardView:
        """Return a random-access view of a shard's samples.

        Raises:
            ShardNotFoundError: A file the index names is missing.
            ChecksumError: ``validate_hash`` is set and a file's digest differs from the index.
            ShardFormatError: A file is corrupt, truncated or of the wrong size.
        """
        source = os.path.join(self.root, entry.data_file.basename)
        if entry.format == "mds":
            assert schema is not None
            large = 0 if self.zero_copy else entry.samples
            data = self._buffer(entry, entry.raw_data, entry.zip_data, large_samples=large)
            if isinstance(data, ShardFile):
                return MDSFileView(data, schema, entry.samples, source=source)
            return MDSShardView(
                data,
                schema,
                entry.samples,
                source=source,
                zero_copy=self.zero_copy,
                path=self.uncompressed_path(entry.raw_data, entry.zip_data),
            )
        data = self._buffer(entry, entry.raw_data, entry.zip_data)
        assert entry.raw_meta is not None
        meta = self._buffer(entry, entry.raw_meta, entry.zip_meta)
        assert not isinstance(data, ShardFile)  # opened for pread only when samples are given
        assert not isinstance(meta, ShardFile)
        return SplitShardView(data, meta, entry, source=source)

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
        self, entry: ShardEntry, raw: FileInfo, zipped: FileInfo | None, *, large_samples: int = 0
    ) -> Opened:
        """The uncompressed file, decompressed first if need be.

        A file of ``large_samples`` samples that average ``PREAD_MEAN`` bytes or more comes
        back open (:class:`ShardFile`), not mapped.
        """
        path = self.uncompressed_path(raw, zipped)
        if zipped is None:
            buffer = _map(path, large_samples)
            self._check(entry, raw, buffer, path)
            return buffer
        try:
            if os.path.getsize(path) == raw.bytes:
                return _map(path, large_samples)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE:
                raise
        zip_path = os.path.join(self.root, zipped.basename)
        packed = _map(zip_path)
        assert not isinstance(packed, ShardFile)  # no samples were given
        self._check(entry, zipped, packed, zip_path)
        assert entry.compression is not None
        pieces = get_compression(entry.compression).decompress_chunks(
            packed, source=zip_path, max_size=raw.bytes
        )
        try:
            # Its folders are made through no planted link, and a link at ``path`` is replaced.
            write_file(path, _exactly(pieces, raw.bytes, zip_path), root=self.cache_root)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE | {errno.EEXIST}:
                raise
            raise ShardFormatError(
                f"cannot store the decompressed shard at {path} ({exc}): index.json's "
                f"raw_data.basename {raw.basename!r} does not name a file"
            ) from exc
        return _map(path, large_samples)

    def uncompressed_path(self, raw: FileInfo, zipped: FileInfo | None) -> str:
        """Where the uncompressed file is: the dataset's, or the one decompressed from it."""
        return os.path.join(self.root if zipped is None else self.cache_root, raw.basename)

    def _check(self, entry: ShardEntry, info: FileInfo, buffer: Opened, path: str) -> None:
        if len(buffer) != info.bytes:
            raise ShardFormatError(
                f"{path} is {len(buffer)} bytes but index.json says {info.bytes}; the file is "
                f"truncated or was replaced: delete it so it is fetched again"
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
                f"file is corrupt: delete it so it is fetched again"
            )


def _exactly(pieces: Iterator[bytes], size: int, source: str) -> Iterator[bytes]:
    """``pieces``, written as they come; short of ``size`` bytes, an error before the rename."""
    written = 0
    for piece in pieces:
        written += len(piece)
        yield piece
    if written != size:
        raise ShardFormatError(
            f"{source} decompresses to {written} bytes but index.json says {size}; "
            f"the file is corrupt: delete it so it is fetched again"
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


# Shards are mapped lazily: pages come in as samples are read (a fault maps a whole cached
# folio, not 4 KiB). Mapping every page up front (MAP_POPULATE) made a reader wait for whole
# shards it had barely touched: a warm first batch from 16 shards of 64 MiB took 50 ms against
# 20 ms lazily, and no read measured faster with it (benchmarks/README.md).


# Files up to this size are read into memory instead: a mapping keeps a file descriptor open
# (Python's mmap holds a duplicate), and a reader may keep thousands of small shards open.
_READ_WHOLE = 8 << 20

#: Larger files whose samples average this many bytes or more are read sample by sample with
#: ``pread`` instead of mapped (:mod:`shardstream.format.mds_file`): mapped, every shard page a
#: process touches stays in its resident memory, and on kernels that map a whole cached folio
#: per fault (up to 2 MiB) a shuffled epoch leaves the whole dataset resident after a few
#: batches. A read costs a system call per sample, so it is kept for large samples. Measured
#: here, random batches through ``get_many`` from the page cache, read / mapped speed: 0.58 at
#: 8 KiB, 0.64 at 16 KiB, 0.71-0.74 at 32-64 KiB, 0.79 at 100 KiB; resident file memory after
#: 256 MiB, 19 MiB read against 275 MiB mapped.
PREAD_MEAN = 32 << 10


def _map(path: str, large_samples: int = 0) -> Opened:
    """A whole file, read-only: memory-mapped, or read into bytes when small (or empty).

    A file of ``large_samples`` samples (0: no samples worth it) that average
    :data:`PREAD_MEAN` bytes or more stays open instead, for ``pread``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
            if size <= _READ_WHOLE:
                return _read_whole(fd, size)
            if CAN_PREAD and large_samples and size >= PREAD_MEAN * large_samples:
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


def _read_whole(fd: int, size: int) -> bytes:
    """The file's bytes: ``size`` of them, or what it holds if it shrank meanwhile."""
    data = os.read(fd, size + 1)  # one more: a file that grew shows it
    if len(data) >= size:
        return data
    parts = [data]
    while chunk := os.read(fd, size + 1 - sum(map(len, parts))):
        parts.append(chunk)
    return b"".join(parts)
