"""An open shard file read with ``pread``, and where a mapped MDS shard's samples lie in it."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ShardFormatError

if TYPE_CHECKING:
    from shardstream.format.mds import MDSSchema

__all__ = ["CAN_PREAD", "SampleFile", "ShardFile", "cut_short"]

#: Whether files can be read with ``os.pread`` here (POSIX).
CAN_PREAD = hasattr(os, "pread")


class ShardFile:
    """An open, read-only shard file, closed when the last object that holds it goes.

    Views and the getters they hand out hold it, so a getter that outlives its view (another
    thread's, say) never reads a closed descriptor, or one the number was given to since.

    Args:
        fd: The open descriptor; the object owns it from now on.
        size: The file's size.
    """

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path: str) -> ShardFile:
        """Open ``path`` read-only.

        Raises:
            OSError: It cannot be opened.
        """
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size)

    def __len__(self) -> int:
        return self.size

    def read(self, size: int, offset: int, source: str) -> bytes:
        """``size`` bytes at ``offset``.

        Raises:
            ShardFormatError: The file ends before them (it was cut short while open).
        """
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise cut_short(source, len(data), size, offset)
        return data

    def chunks(self, source: str, chunk: int = 8 << 20) -> Iterator[bytes]:
        """The whole file, in pieces of ``chunk`` bytes (the last may be shorter)."""
        for offset in range(0, self.size, chunk):
            yield self.read(min(chunk, self.size - offset), offset, source)

    def close(self) -> None:
        """Close the descriptor now (only when nothing else can still read it)."""
        self._closer()


@dataclass(frozen=True)
class SampleFile:
    """An MDS shard's open file, with what it takes to read and decode runs of its samples.

    Attributes:
        file: The open file.
        offsets: The sample offsets (``samples + 1``).
        schema: The shard's columns.
        source: The file's path, named in errors.
    """

    file: ShardFile
    offsets: NDArray[np.int64]
    schema: MDSSchema
    source: str


def cut_short(source: str, got: int, size: int, offset: int) -> ShardFormatError:
    """The error of a read that came back short: the file shrank while open."""
    return ShardFormatError(
        f"{source}: read {got} of {size} bytes at offset {offset}: the file was cut short "
        "while open (another process truncated or rewrote it): restore it and start again "
        "(a cache's copy: delete it so it is fetched again)"
    )
