"""The MDS shard file: header, offset table, embedded config, and samples.

Layout (uint32 little-endian): ``N``, ``N + 1`` absolute offsets (the last is the file size),
the shard's config JSON, then the samples. A sample holds one uint32 size per variable-size
column, then every column's payload in column order. This module works on bytes and buffers
only; opening files is the caller's job.
"""

from __future__ import annotations

import array
import functools
import json
import mmap
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import (
    MissingColumnError,
    SampleEncodingError,
    ShardFormatError,
    ShardTooLargeError,
    UnsafeEncodingError,
)
from shardstream.format.batch_decode import ColumnsDecoder, ColumnValues
from shardstream.format.encodings import Buffer, Encoding, get_encoding
from shardstream.format.index import INDEX_VERSION
from shardstream.format.sample_codec import (
    FileGetterFactory,
    GetterFactory,
    SampleEncoder,
    compile_encoder,
    compile_file_getter_factory,
    compile_getter_factory,
)
from shardstream.format.shard_file import SampleFile, ShardFile

__all__ = [
    "MAX_SHARD_BYTES",
    "MDSSchema",
    "MDSShardView",
    "ShardSamples",
    "parse_offsets",
    "shard_header",
]

#: Offsets are uint32, so a shard file must be smaller than this.
MAX_SHARD_BYTES = 1 << 32


class MDSSchema:
    """The columns of an MDS dataset: names, encodings and the per-sample layout they imply.

    Args:
        columns: Column name to encoding name. Writers sort the names (as the format requires);
            readers pass the order stored in the index.
        sort: Sort the column names.
    """

    def __init__(self, columns: Mapping[str, str], *, sort: bool = True) -> None:
        names = sorted(columns) if sort else list(columns)
        self.names: list[str] = names
        self.encodings: list[Encoding] = [get_encoding(columns[name]) for name in names]
        self.sizes: list[int | None] = [encoding.size for encoding in self.encodings]
        self._plan = list(zip(self.names, self.encodings, self.sizes, strict=True))
        variable = sum(size is None for size in self.sizes)
        self._sizes_struct = struct.Struct(f"<{variable}I")
        self._head = 4 * variable
        self._getter_factories: dict[bool, GetterFactory] = {}  # compiled on first use
        self._columns_decoders: dict[bool, ColumnsDecoder] = {}
        self._file_getter_factories: dict[bool, FileGetterFactory] = {}

    def __getstate__(self) -> dict[str, Any]:
        # LocalDataset pickles its schemas (DataLoader workers); a struct.Struct and generated
        # functions do not pickle, so they are rebuilt after unpickling.
        state = self.__dict__.copy()
        state["_sizes_struct"] = self._sizes_struct.format
        state["_getter_factories"] = {}
        state["_columns_decoders"] = {}
        state["_file_getter_factories"] = {}
        state.pop("encode_sample_sized", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _sizes_struct=struct.Struct(state["_sizes_struct"]))

    @functools.cached_property
    def encode_sample_sized(self) -> SampleEncoder:
        """Encode one sample to ``(parts, total bytes)``, its offset-table entry included.

        The fast twin of :meth:`encode_sample`, generated for these columns; it accepts and
        refuses exactly the same values.
        """
        return compile_encoder(self._plan, self.encode_sample)

    @property
    def columns(self) -> dict[str, str]:
        """Column name to encoding name, in stored order."""
        return {name: enc.name for name, enc in zip(self.names, self.encodings, strict=True)}

    def check_safe(self, allow_unsafe_types: bool, *, source: str) -> None:
        """Refuse columns whose decoding can run code unless the user opted in.

        Raises:
            UnsafeEncodingError: A column is ``pkl`` and ``allow_unsafe_types`` is False.
        """
        if allow_unsafe_types:
            return
        for name, encoding in zip(self.names, self.encodings, strict=True):
            if encoding.unsafe:
                raise UnsafeEncodingError(
                    f"{source}: column {name!r} uses the {encoding.name!r} encoding, which can "
                    f"execute code when read. Pass allow_unsafe_types=True only if you trust "
                    f"whoever wrote this dataset."
                )

    def config_bytes(
        self, *, compression: str | None, hashes: Sequence[str], size_limit: int | None
    ) -> bytes:
        """The config JSON embedded in every shard (the index entry less files and samples)."""
        config = {
            "column_encodings": [encoding.name for encoding in self.encodings],
            "column_names": self.names,
            "column_sizes": self.sizes,
            "compression": compression,
            "format": "mds",
            "hashes": list(hashes),
            "size_limit": size_limit,
            "version": INDEX_VERSION,
        }
        return json.dumps(config, sort_keys=True).encode("utf-8")

    def encode_sample(self, sample: Mapping[str, Any]) -> list[bytes]:
        """Encode one sample as the list of its byte parts (sizes first, then payloads).

        Raises:
            MissingColumnError: The sample lacks a column.
            SampleEncodingError: A value does not fit its column's encoding; the message
                names the column.
        """
        parts: list[bytes] = [b""]
        sizes: list[int] = []
        for name, encoding, fixed in self._plan:
            try:
                value = sample[name]
            except KeyError:
                raise MissingColumnError(
                    f"sample has no column {name!r}; the writer's columns are {self.names}"
                ) from None
            try:
                data = encoding.encode(value)
            except SampleEncodingError as exc:
                # The same class, so that callers' except clauses (UnicodeError, ...) still match.
                raise type(exc)(f"column {name!r}: {exc}") from exc.__cause__ or exc
            if fixed is None:
                sizes.append(len(data))
            elif len(data) != fixed:
                raise SampleEncodingError(
                    f"column {name!r}: encoding {encoding.name!r} is {fixed} bytes, got {len(data)}"
                )
            parts.append(data)
        parts[0] = self._sizes_struct.pack(*sizes)
        return parts

    def decode_sample(self, data: Buffer) -> dict[str, Any]:
        """Decode one sample's bytes into a dict of column values.

        Raises:
            ShardFormatError: The bytes do not hold a sample of these columns.
        """
        buffer = data if isinstance(data, (bytes, mmap.mmap)) else bytes(data)
        return self.sample_getter(buffer, memoryview(buffer), [0, len(buffer)], "sample")(0)

    def columns_decoder(self, *, zero_copy: bool = False) -> ColumnsDecoder:
        """The batch decoder of these columns (built once per mode)."""
        decoder = self._columns_decoders.get(zero_copy)
        if decoder is None:
            decoder = ColumnsDecoder(self._plan, zero_copy=zero_copy)
            self._columns_decoders[zero_copy] = decoder
        return decoder

    def sample_getter(
        self,
        buffer: bytes | mmap.mmap,
        view: memoryview,
        offsets: Sequence[int],
        source: str,
        *,
        zero_copy: bool = False,
    ) -> Callable[[int], dict[str, Any]]:
        """Return ``get(k)``, which decodes the sample at ``buffer[offsets[k]:offsets[k + 1]]``.

        ``view`` is ``memoryview(buffer)``; releasing it releases the getter's hold on the buffer.
        With ``zero_copy``, ``bytes`` columns are returned as read-only memoryviews of the buffer.

        Raises (from ``get``):
            IndexError: ``k`` is out of range.
            ShardFormatError: The sample's bytes do not fit these columns; names ``source``.
        """
        factory = self._getter_factories.get(zero_copy)
        if factory is None:
            factory = compile_getter_factory(self._plan, zero_copy=zero_copy)
            self._getter_factories[zero_copy] = factory
        return factory(buffer, view, offsets, source)

    def file_getters(
        self, file: Any, offsets: Sequence[int], source: str, *, zero_copy: bool = False
    ) -> tuple[Callable[[int], dict[str, Any]], Callable[[int], tuple[Any, ...]]]:
        """Return ``(get, row)``, which read sample ``k`` with ``pread`` from ``file.fd``.

        ``get(k)`` returns the sample as a dict, ``row(k)`` its values in column order; see
        :func:`~shardstream.format.sample_codec.compile_file_getter_factory`.
        """
        factory = self._file_getter_factories.get(zero_copy)
        if factory is None:
            factory = compile_file_getter_factory(self._plan, zero_copy=zero_copy)
            self._file_getter_factories[zero_copy] = factory
        return factory(file, offsets, source)


#: ``madvise`` advice that unmaps pages of a shared file mapping (``None`` where unknown).
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


def _released(indices: Sequence[int]) -> list[ColumnValues]:
    raise ValueError("the shard view was released")


def shard_header(config: bytes, sample_sizes: Sequence[int]) -> bytes:
    """The bytes before the first sample: count, offsets and config.

    Raises:
        ShardTooLargeError: The shard would reach 4 GiB, past the reach of 32-bit offsets.
    """
    count = len(sample_sizes)
    start = 4 + 4 * (count + 1) + len(config)
    offsets = np.empty(count + 1, np.int64)
    offsets[0] = start
    np.cumsum(np.asarray(sample_sizes, np.int64), out=offsets[1:])
    offsets[1:] += start
    if offsets[-1] >= MAX_SHARD_BYTES:
        raise ShardTooLargeError(
            f"a shard of {count} samples would be {int(offsets[-1])} bytes, but MDS offsets are "
            f"32-bit: keep size_limit under 4 GiB and each sample well below it"
        )
    return struct.pack("<I", count) + offsets.astype("<u4").tobytes() + config


def parse_offsets(head: Buffer, size: int, samples: int, source: str) -> NDArray[np.int64]:
    """The sample offsets of an MDS shard of ``size`` bytes (``samples + 1`` of them).

    Args:
        head: The file's first bytes: at least its offset table (``4 * (samples + 2)`` bytes),
            unless the file is shorter.
        size: The file's size.
        samples: The sample count the index records.
        source: The file's path or URL, named in errors.

    Raises:
        ShardFormatError: The header or offset table is truncated or inconsistent.
    """
    if size < 8 or len(head) < 8:
        raise ShardFormatError(
            f"{source}: {size} bytes is too short for an MDS shard; the file is truncated: "
            "delete it so it is fetched again"
        )
    (count,) = struct.unpack_from("<I", head, 0)
    if count != samples:
        raise ShardFormatError(
            f"{source}: the shard holds {count} samples but index.json says {samples}; "
            "the file or index.json was replaced: fetch both again from one dataset"
        )
    header_end = 4 + 4 * (count + 1)
    if header_end > min(size, len(head)):
        raise ShardFormatError(
            f"{source}: truncated offset table ({size} bytes); delete the file so it is "
            "fetched again"
        )
    offsets = np.frombuffer(head, "<u4", count + 1, 4).astype(np.int64)
    if (
        offsets[-1] != size
        or offsets[0] < header_end
        or (count and bool((offsets[1:] < offsets[:-1]).any()))  # cheaper than np.diff
    ):
        raise ShardFormatError(
            f"{source}: corrupt offset table (first {int(offsets[0])}, last "
            f"{int(offsets[-1])}, file {size} bytes); delete the file so it is fetched again"
        )
    return offsets


class ShardSamples:
    """What the views of one MDS shard share: its length, and samples by position."""

    source: str
    _offsets: Sequence[int]
    #: ``get(k)`` decodes sample ``k``; the same as ``self[k]``, one call cheaper.
    get: Callable[[int], dict[str, Any]]

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Decode sample ``index`` of this shard (negative counts from the end)."""
        if index < 0:
            index += len(self)
            if index < 0:
                raise IndexError(f"{self.source}: sample index out of range")
        return self.get(index)


class MDSShardView(ShardSamples):
    """Random access to the samples of one MDS shard held in a buffer (bytes or an mmap).

    Implements :class:`~shardstream.format.shard_view.ShardView`.

    Args:
        buffer: The whole uncompressed shard file.
        schema: The shard's columns, from its index entry.
        samples: The sample count the index records.
        source: The file's path or URL, named in errors.
        zero_copy: Return ``bytes`` columns as read-only memoryviews of ``buffer``.
        path: The file ``buffer`` maps, if it is a mapping (for reading runs of its samples
            with ``pread``: :meth:`sample_file`).
        shared: ``buffer`` was read whole from a file another process reads as cheaply (a
            dataset read in place, which each process reads whole once): not
            :attr:`in_memory`, so that a batch of it may be handed over by id.

    Raises:
        ShardFormatError: The header or offset table is truncated or inconsistent.
    """

    def __init__(
        self,
        buffer: Buffer,
        schema: MDSSchema,
        samples: int,
        *,
        source: str,
        zero_copy: bool = False,
        path: str | None = None,
        shared: bool = False,
    ) -> None:
        view = memoryview(buffer)
        offsets = parse_offsets(view, len(view), samples, source)
        self.source = source
        self.schema = schema
        # Unboxed ints for the per-sample getters: a list would cost most of opening the shard.
        self._offsets = array.array("q", offsets.tobytes())
        #: The sample offsets (``samples + 1``), as an array.
        self.offset_table = offsets
        if not isinstance(buffer, (bytes, mmap.mmap)):  # getters slice bytes or an mmap
            buffer = bytes(view)
            view = memoryview(buffer)
        self._view = view
        #: The shard's memory map, or ``None`` for a shard read into memory.
        self.mapped = buffer if isinstance(buffer, mmap.mmap) else None
        #: The mapped file's path (``None`` if not mapped, or not known).
        self.path = path if self.mapped is not None else None
        self._shared = shared
        self._size = len(view)
        self._file: SampleFile | None = None
        positions = self._offsets
        get = self.get = schema.sample_getter(buffer, view, positions, source, zero_copy=zero_copy)
        #: ``get_many(ks)`` decodes samples ``ks`` into columns (``schema.names``): a list each, or
        #: one array for a column of fixed-shape numeric arrays or numbers (its rows the values).
        self.get_many = schema.columns_decoder(zero_copy=zero_copy).bind(
            buffer, view, offsets, get, get
        )
        # Nothing bound here refers to ``self``: a view in a reference cycle would keep its
        # shard mapped after it is let go, until Python's cycle collector ran (once in many
        # epochs, while each epoch mapped its shards again).
        self._bind_views: Callable[[], Callable[[Sequence[int]], list[ColumnValues]]] | None = (
            None
            if zero_copy
            else lambda: schema.columns_decoder(zero_copy=True).bind(
                buffer,
                view,
                offsets,
                get,
                schema.sample_getter(buffer, view, positions, source, zero_copy=True),
            )
        )
        self._get_many_views: Callable[[Sequence[int]], list[ColumnValues]] | None = None

    grouped_decode = True
    reads_runs = False  # mapped or in memory: read from the mapping while few bytes are open

    @property
    def names(self) -> list[str]:
        """The columns, in :meth:`read_columns` order (the schema's list: not to be changed)."""
        return self.schema.names

    @property
    def held_bytes(self) -> int:
        """The shard file's size (mapped, or read into memory)."""
        return self._size

    @property
    def in_memory(self) -> bool:
        """Whether the shard was read into this process's memory (not mapped, not ``shared``)."""
        return self.mapped is None and not self._shared

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Samples ``indices`` as columns (:meth:`get_many`, or :meth:`get_many_views`)."""
        return self.get_many_views(indices) if views else self.get_many(indices)

    def sample_file(self) -> SampleFile | None:
        """The mapped file, open for ``pread`` (opened once); ``None`` if not mapped.

        Also ``None`` when the file cannot be opened or is no longer the mapping's size
        (replaced since): the samples are then read from the mapping.
        """
        if self._file is None and self.mapped is not None and self.path is not None:
            try:
                file = ShardFile.open(self.path)
            except OSError:
                return None
            if file.size != self._size:
                return None
            self._file = SampleFile(file, self.offset_table, self.schema, self.source)
        return self._file

    def get_many_views(self, indices: Sequence[int]) -> list[ColumnValues]:
        """Like ``get_many``, with ``bytes`` columns as read-only memoryviews of the shard.

        The views are valid until :meth:`release`; the caller must drop them before.
        """
        if self._bind_views is None:
            return self.get_many(indices)
        if self._get_many_views is None:
            self._get_many_views = self._bind_views()
        return self._get_many_views(indices)

    def sample_bytes(self, index: int) -> memoryview:
        """The raw bytes of sample ``index`` (a zero-copy view)."""
        return self._view[self._offsets[index] : self._offsets[index + 1]]

    def let_go(self, first: int, stop: int) -> None:
        """Unmap this process's pages of samples ``first`` to ``stop - 1`` of a mapped shard.

        They stay in the page cache, and the process's resident memory no longer counts them.
        Values read before stay valid: a page is mapped again, from the page cache, when
        next read. A shard read into memory is left as it is.
        """
        if self.mapped is None or _DONTNEED is None or first >= stop:
            return
        begin = self._offsets[first] // mmap.PAGESIZE * mmap.PAGESIZE
        end = min(self._offsets[stop], len(self.mapped))
        if end > begin:
            self.mapped.madvise(_DONTNEED, begin, end - begin)

    def release(self) -> None:
        """Drop the reference to the buffer (decoded arrays keep what they need alive)."""
        self.mapped = None
        self._file = None  # closed once no reader holds it either
        self.get_many = _released  # its array over the buffer goes with it
        self._bind_views = None
        self._get_many_views = _released
        self._view.release()
