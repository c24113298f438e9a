"""Whole-file shard compression: ``br``, ``bz2``, ``gz``, ``snappy`` and ``zstd``, with levels.

A compression is named ``<code>`` or ``<code>:<level>``; the name is stored in ``index.json``
as given, and the compressed file gets ``.<code>`` appended to its basename.
"""

from __future__ import annotations

import bz2
import gzip
import io
import mmap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import IO, Any, cast

from shardstream.errors import ConfigurationError, ShardFormatError

__all__ = ["COMPRESSIONS", "Compression", "CompressionFamily", "get_compression"]

Part = bytes | memoryview
#: What a compressed file is decompressed from: its bytes, or its mapping.
Packed = bytes | bytearray | memoryview | mmap.mmap


@dataclass(frozen=True)
class CompressionFamily:
    """One compression code with its valid levels.

    Attributes:
        code: The name and file extension (``zstd``).
        levels: The valid levels, empty when the code takes none.
        default_level: The level used when the name has none.
        decompress: ``decompress(data, max_size)``: the decompressed data in pieces of at
            most a MiB or so, raising as soon as they pass ``max_size`` bytes (``None``: no
            limit), so that untrusted data never takes more memory than the index promises.
        compress_parts: ``compress_parts(parts, size, level)``: the compressed concatenation of
            ``parts`` (``size`` bytes in all), in pieces, without joining them first; ``None``
            where the codec has no streaming form worth it (the parts are joined).
    """

    code: str
    levels: range | None
    default_level: int | None
    compress: Callable[[bytes, int | None], bytes] = field(repr=False)
    decompress: Callable[[Packed, int | None], Iterator[bytes]] = field(repr=False)
    compress_parts: Callable[[Sequence[Part], int, int | None], list[bytes]] | None = field(
        default=None, repr=False
    )


@dataclass(frozen=True)
class Compression:
    """A compression code at one level, as named in ``index.json`` (``'zstd:7'``)."""

    name: str
    family: CompressionFamily
    level: int | None

    @property
    def extension(self) -> str:
        """The suffix appended to the compressed file's basename, without the dot."""
        return self.family.code

    def compress(self, data: bytes) -> bytes:
        """Compress a whole shard file."""
        return self.family.compress(data, self.level)

    def compress_parts(self, parts: Sequence[Part]) -> list[bytes]:
        """Compress the shard file made of ``parts``; the result's pieces, joined, are the file.

        Where the codec streams (``zstd``), the parts are never joined into one buffer: a
        64 MiB join faults in fresh pages each time, and compressing into a cache-sized
        output is faster too; the output is one frame that records its content size, like
        ``compress``'s.
        """
        if self.family.compress_parts is None:
            return [self.compress(b"".join(parts))]
        return self.family.compress_parts(parts, sum(map(len, parts)), self.level)

    def decompress(
        self, data: Packed, *, source: str = "shard", max_size: int | None = None
    ) -> bytes:
        """Decompress a whole shard file; ``source`` names it in the error if the data is bad.

        ``max_size`` (the size index.json records) bounds the memory untrusted data can take:
        data that would decompress to more is refused before it has all been decompressed.

        Raises:
            ShardFormatError: The data is corrupt, or decompresses to more than ``max_size``.
        """
        return b"".join(self.decompress_chunks(data, source=source, max_size=max_size))

    def decompress_chunks(
        self, data: Packed, *, source: str = "shard", max_size: int | None = None
    ) -> Iterator[bytes]:
        """Decompress a whole shard file in pieces (of about a MiB), to write them as they come.

        Holds no more than a piece at a time beyond what the caller keeps; the pieces stop
        with an error as soon as they would pass ``max_size`` bytes.

        Raises:
            ShardFormatError: The data is corrupt, or decompresses to more than ``max_size``.
        """
        try:
            yield from self.family.decompress(data, max_size)
        except _OutputTooLarge as exc:
            raise ShardFormatError(
                f"{source} decompresses to more than the {max_size} bytes index.json records; "
                f"the file is corrupt: delete it so it is fetched again"
            ) from exc
        except Exception as exc:
            raise ShardFormatError(
                f"{source} is not valid {self.name} data ({type(exc).__name__}: {exc}); "
                f"the file is corrupt or truncated: delete it so it is fetched again"
            ) from exc


def _brotli_compress(data: bytes, level: int | None) -> bytes:
    import brotli

    return bytes(brotli.compress(data, quality=level))


class _OutputTooLarge(Exception):
    """Decompressing would produce more bytes than the caller allows."""


_CHUNK = 1 << 20


def _bounded(chunks: Iterable[bytes], max_size: int | None) -> Iterator[bytes]:
    """``chunks``, stopped with ``_OutputTooLarge`` once they pass ``max_size`` bytes."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if max_size is not None and total > max_size:
            raise _OutputTooLarge
        if chunk:
            yield chunk


def _read_chunks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """A decompressing stream, read to its end a chunk at a time."""
    while chunk := read(_CHUNK):
        yield chunk


def _as_file(data: Packed) -> IO[bytes]:
    """A file to read ``data`` from (a mapping is one already; bytes are not copied)."""
    if isinstance(data, mmap.mmap):
        data.seek(0)
        return cast(IO[bytes], data)
    return io.BytesIO(data)


def _brotli_decompress(data: Packed, max_size: int | None) -> Iterator[bytes]:
    import brotli

    yield from _bounded(_brotli_chunks(brotli.Decompressor(), memoryview(data)), max_size)


def _brotli_chunks(decompressor: Any, data: memoryview) -> Iterator[bytes]:
    # Each call's output is capped: a few bytes of input may expand to gigabytes.
    for start in range(0, len(data), _CHUNK):
        yield decompressor.process(data[start : start + _CHUNK], output_buffer_limit=_CHUNK)
        while not decompressor.can_accept_more_data():
            yield decompressor.process(b"", output_buffer_limit=_CHUNK)
    while not decompressor.is_finished():  # output held back by the cap, or a truncated stream
        piece = decompressor.process(b"", output_buffer_limit=_CHUNK)
        if not piece:
            raise ValueError("the brotli stream is truncated")
        yield piece


def _snappy_compress(data: bytes, level: int | None) -> bytes:
    import snappy

    return bytes(snappy.compress(data))


def _snappy_decompress(data: Packed, max_size: int | None) -> Iterator[bytes]:
    import snappy

    if max_size is not None and _snappy_length(data) > max_size:
        raise _OutputTooLarge  # the block's declared length is what decompress allocates
    yield bytes(snappy.decompress(bytes(data)))


def _snappy_length(data: Packed) -> int:
    """The uncompressed length a raw snappy block declares: its leading varint."""
    length = 0
    for position in range(min(len(data), 5)):
        byte = data[position]
        length |= (byte & 0x7F) << (7 * position)
        if byte < 0x80:
            return length
    raise ValueError("the snappy block's length is corrupt")


def _zstd_compress(data: bytes, level: int | None) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=level or 3).compress(data)


def _zstd_compress_parts(parts: Sequence[Part], size: int, level: int | None) -> list[bytes]:
    import zstandard

    chunker = zstandard.ZstdCompressor(level=level or 3).chunker(size=size, chunk_size=_CHUNK)
    pieces: list[bytes] = []
    for run in _runs(parts):
        pieces += chunker.compress(run)
    pieces += chunker.finish()  # type: ignore[no-untyped-call]
    return pieces


def _runs(parts: Sequence[Part], least: int = 256 << 10) -> Iterator[Part]:
    """``parts`` again, runs of small ones joined into pieces of at least ``least`` bytes.

    One call per small part (a 1 KiB sample) would cost more than the copy.
    """
    run: list[Part] = []
    run_bytes = 0
    for part in parts:
        if len(part) >= least:  # as it is, after the run before it
            if run:
                yield b"".join(run)
                run, run_bytes = [], 0
            yield part
            continue
        run.append(part)
        run_bytes += len(part)
        if run_bytes >= least:
            yield b"".join(run)
            run, run_bytes = [], 0
    if run:
        yield b"".join(run)


def _zstd_decompress(data: Packed, max_size: int | None) -> Iterator[bytes]:
    import zstandard

    # Streamed, so a frame header claiming a huge content size allocates nothing up front.
    with zstandard.ZstdDecompressor().stream_reader(
        memoryview(data), read_across_frames=True
    ) as reader:
        yield from _bounded(_read_chunks(reader.read), max_size)


def _gzip_decompress(data: Packed, max_size: int | None) -> Iterator[bytes]:
    with gzip.GzipFile(fileobj=_as_file(data)) as file:
        yield from _bounded(_read_chunks(file.read), max_size)


def _bz2_decompress(data: Packed, max_size: int | None) -> Iterator[bytes]:
    with bz2.BZ2File(_as_file(data)) as file:
        yield from _bounded(_read_chunks(file.read), max_size)


def _gzip_compress(data: bytes, level: int | None) -> bytes:
    # mtime=0 makes the output reproducible (the reference stamps the current time).
    return gzip.compress(data, 9 if level is None else level, mtime=0)


_FAMILIES = (
    CompressionFamily("br", range(12), 11, _brotli_compress, _brotli_decompress),
    CompressionFamily(
        "bz2", range(1, 10), 9, lambda d, lv: bz2.compress(d, lv or 9), _bz2_decompress
    ),
    CompressionFamily("gz", range(10), 9, _gzip_compress, _gzip_decompress),
    CompressionFamily("snappy", None, None, _snappy_compress, _snappy_decompress),
    CompressionFamily(
        "zstd", range(1, 23), 3, _zstd_compress, _zstd_decompress, _zstd_compress_parts
    ),
)

#: Every compression family by code, sorted.
COMPRESSIONS: Mapping[str, CompressionFamily] = MappingProxyType(
    {family.code: family for family in _FAMILIES}
)


@cache
def get_compression(name: str) -> Compression:
    """Return the compression named ``name`` (``'zstd'``, ``'zstd:7'``, ``'snappy'`` ...).

    Raises:
        ConfigurationError: The code is unknown or the level is out of range; the message lists
            the valid codes and levels.
    """
    code, sep, level_text = str(name).partition(":")
    family = COMPRESSIONS.get(code)
    if family is None:
        raise ConfigurationError(
            f"unknown compression {name!r}; use one of {', '.join(COMPRESSIONS)}, optionally "
            f"with a level such as 'zstd:7'"
        )
    if not sep:
        return Compression(name, family, family.default_level)
    if family.levels is None:
        raise ConfigurationError(
            f"compression {code!r} takes no level, got {name!r}: write just {code!r}"
        )
    if not (level_text.isascii() and level_text.isdigit() and len(level_text) <= 3) or (
        int(level_text) not in family.levels
    ):
        raise ConfigurationError(
            f"compression {name!r}: the level of {code!r} must be an integer from "
            f"{family.levels.start} to {family.levels.stop - 1}"
        )
    return Compression(name, family, int(level_text))
