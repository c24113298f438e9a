"""``MDSWriter``: samples in, MDS shards and ``index.json`` out, locally or to a store."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import struct
import sys
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, NoReturn

import numpy as np

from shardstream.errors import (
    DISK_FULL_ERRNOS,
    ConfigurationError,
    DatasetExistsError,
    DiskFullError,
    MissingColumnError,
    SampleEncodingError,
    UnknownColumnError,
)
from shardstream.format.compression import Compression, get_compression
from shardstream.format.hashing import check_hash_names, hash_chunks
from shardstream.format.index import INDEX_BASENAME, FileInfo, ShardEntry, dump_index
from shardstream.format.mds import MAX_SHARD_BYTES, MDSSchema, shard_header
from shardstream.storage import ObjectStore, atomic_write, is_remote, local_path, open_store
from shardstream.storage.filesystems import free_bytes
from shardstream.storage.keys import url_for_message
from shardstream.units import parse_bytes
from shardstream.writer.publish import (
    check_destination,
    new_write_token,
    remove_unnamed,
    shard_basename,
)
from shardstream.writer.scratch import ScratchFolder
from shardstream.writer.upload import Uploader, retried

__all__ = ["MDSWriter"]

logger = logging.getLogger(__name__)

Out = str | os.PathLike[str] | tuple[str | os.PathLike[str], str]


class MDSWriter:
    """Writes samples into an MDS dataset that mosaicml-streaming and shardstream both read.

    Shards are written under a temporary name and renamed into place, so a reader never sees
    half a shard; ``index.json`` is written last, after every shard is in place (and, for a
    remote ``out``, uploaded). Nothing is touched on disk until the first ``write``.

    To a store, a write is all or nothing (:mod:`shardstream.writer.publish`): its shards have
    names of their own (``shard.<token>.00000.mds``), so until its ``index.json`` replaces the
    old one readers see the old dataset whole, and a write that dies leaves them that.

    Args:
        out: Where the dataset goes: a local folder, a URL (written to a temporary folder and
            uploaded), or a ``(local, remote)`` pair (written to ``local``, uploaded to ``remote``).
        columns: Column name to encoding, e.g. ``{"text": "str", "label": "int"}``.
        compression: ``None``, or a compression such as ``"zstd"`` or ``"zstd:7"``.
        hashes: Digests to record for every file, e.g. ``["sha1", "xxh64"]`` (sorted, unique).
        size_limit: Start a new shard before a sample that would make the current one larger
            than this many uncompressed bytes (an int, or a string such as ``"64mb"``). ``None``
            or ``0`` means one shard. Must be under 4 GiB.
        keep_local: With a remote ``out``, keep the local copy after uploading. Without it,
            each shard's local file is deleted once it is uploaded.
        progress_bar: Show a progress bar of shards written and, with a remote ``out``, one of
            bytes uploaded.
        max_workers: Upload threads (default ``min(32, cpus + 4)``).
        retry: How many times a failed upload is retried.
        exist_ok: Allow a non-empty destination. A local folder's contents are deleted first;
            on a store, nothing is deleted until the new ``index.json`` is published, and then
            only the shards it does not name (other files stay).
        timeout: Seconds an upload may wait for the store at each step: to connect (at most
            10 s) and between two writes or reads of its socket. A store that stops answering
            fails an attempt after about ``timeout``, so a shard's upload after at most
            ``timeout * (retry + 1)`` seconds plus the backoff between attempts. It does not
            limit a whole upload, which for a large shard on a slow link takes longer.
        extra_keys: What to do with sample keys that are not columns: ``"error"`` (raise
            :class:`~shardstream.errors.UnknownColumnError`) or ``"drop"`` (leave them out of
            the dataset, as mosaicml-streaming's writer does without a word).
        source: Where the samples came from, recorded as ``"source"`` in ``index.json``
            (readers ignore it), e.g. ``{"format": "delta", "table": url, "version": 3}``.

    Example:
        columns = {"text": "str", "label": "int"}
        with MDSWriter(out="/tmp/my-ds", columns=columns, compression="zstd") as writer:
            for i in range(100):
                writer.write({"text": f"sample {i}", "label": i % 10})
    """

    def __init__(
        self,
        *,
        out: Out,
        columns: Mapping[str, str],
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        keep_local: bool = False,
        progress_bar: bool = False,
        max_workers: int | None = None,
        retry: int = 2,
        exist_ok: bool = False,
        timeout: float = 60.0,
        extra_keys: Literal["error", "drop"] = "error",
        source: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(columns, Mapping) or not columns:
            raise ConfigurationError(
                f"columns must be a non-empty dict of name to encoding, got {columns!r}"
            )
        self._compression: Compression | None = (
            get_compression(compression) if compression else None
        )
        self._hashes = check_hash_names(hashes)
        limit = parse_bytes(size_limit, what="size_limit") if size_limit else 0
        if limit >= MAX_SHARD_BYTES:
            raise ConfigurationError(
                f"size_limit={size_limit!r} is {limit} bytes; shard offsets are 32-bit, so it must "
                f"be under 4 GiB ({MAX_SHARD_BYTES} bytes). 64mb shards are a good default."
            )
        self._size_limit = limit or None
        self._names = self._set_format(columns, compression or None)
        if not isinstance(retry, int) or retry < 0:
            raise ConfigurationError(f"retry must be a non-negative integer, got {retry!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigurationError(
                f"timeout must be a positive number of seconds, got {timeout!r}"
            )
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ConfigurationError(f"max_workers must be a positive integer, got {max_workers!r}")
        if extra_keys not in ("error", "drop"):
            raise ConfigurationError(f"extra_keys must be 'error' or 'drop', got {extra_keys!r}")
        # A sample that encoded has every column, so more keys than columns means extra keys.
        self._max_keys = len(self._names) if extra_keys == "error" else sys.maxsize
        self._local, self._remote = _split_out(out)
        self._source = None if source is None else dict(source)
        self._keep_local = keep_local
        self._progress_bar = progress_bar
        self._max_workers = max_workers
        self._retry = retry
        self._timeout = float(timeout)
        self._exist_ok = exist_ok
        self._parts: list[bytes] = []
        self._sizes: list[int] = []
        self._shard_bytes = self._shard_overhead
        self._entries: list[ShardEntry] = []
        self._uploader: Uploader | None = None
        self._scratch: ScratchFolder | None = None
        self._token: str | None = None
        self._store: ObjectStore | None = None
        self._progress: Any = None
        self._upload_progress: Any = None
        self._started = False
        self._finished = False

    @property
    def local(self) -> str | None:
        """The local folder shards are written to (known once writing started)."""
        return self._local

    @property
    def remote(self) -> str | None:
        """The URL shards are uploaded to, or ``None``."""
        return self._remote

    def write(self, sample: Mapping[str, Any]) -> None:
        """Encode one sample and append it, starting a new shard when the limit is reached.

        Errors name the sample (its number among those written, from 0), the column and the
        dataset.

        Raises:
            MissingColumnError: The sample lacks a column.
            UnknownColumnError: The sample has keys that are not columns (unless
                ``extra_keys="drop"``).
            SampleEncodingError: A value does not fit its column's encoding; its subclasses
                :class:`~shardstream.errors.UnencodableTextError` (a lone surrogate) and
                :class:`~shardstream.errors.SampleTooDeepError` (nested too deep).
            DiskFullError: The output folder's disk filled up; no shard is left half-written.
            DatasetExistsError: (on the first write) The destination is not empty and
                ``exist_ok`` is False.
            UploadError: An earlier upload failed, or (on the first write) the store could
                not be listed to check that it is empty.
        """
        if self._finished:
            raise ConfigurationError("this MDSWriter is finished; create a new one to write more")
        if not self._started:
            self._start()
        try:
            parts, size = self._encode(sample)
        except (SampleEncodingError, MissingColumnError) as exc:
            self._raise_for_sample(exc, 0)
        if len(sample) > self._max_keys:
            self._raise_for_extra_keys(sample)
        if self._size_limit and self._sizes and self._shard_bytes + size > self._size_limit:
            self._flush()
        self._parts += parts
        self._sizes.append(size - self._offset_bytes)
        self._shard_bytes += size

    def write_columns(self, columns: Mapping[str, Sequence[bytes]]) -> None:
        """Append samples given column by column, each value already encoded.

        For converters that encode a whole column at once: ``columns[name][i]`` must be
        exactly what ``name``'s encoding returns for sample ``i`` (the caller vouches for it;
        only fixed sizes are checked). Shards are cut where :meth:`write` would cut them.

        Raises:
            ConfigurationError: The names are not the writer's columns (more are fine with
                ``extra_keys="drop"``), or the lists differ in length.
            SampleEncodingError: A value of a fixed-size column has the wrong length.
            DiskFullError: The output folder's disk filled up; no shard is left half-written.
        """
        if self._finished:
            raise ConfigurationError("this MDSWriter is finished; create a new one to write more")
        schema = self._schema
        names = set(columns)
        if names != set(schema.names) and not (
            self._max_keys == sys.maxsize and names.issuperset(schema.names)
        ):
            raise ConfigurationError(
                f"write_columns needs exactly the columns {schema.names}, got {sorted(columns)}: "
                "add the missing ones, and leave out the others or pass extra_keys='drop'"
            )
        ordered = [columns[name] for name in schema.names]
        count = len(ordered[0])
        if any(len(values) != count for values in ordered):
            counts = {name: len(values) for name, values in zip(schema.names, ordered, strict=True)}
            raise ConfigurationError(
                f"write_columns needs columns of one length, got {counts}: pass the same "
                "number of values for every column"
            )
        if not count:
            return
        fixed_total, variable = 4, []
        for name, values, size in zip(schema.names, ordered, schema.sizes, strict=True):
            if size is None:
                variable.append(values)
                fixed_total += 4
            elif set(map(len, values)) != {size}:
                bad = next(i for i, value in enumerate(values) if len(value) != size)
                self._raise_for_sample(
                    SampleEncodingError(
                        f"column {name!r}: values must be {size} bytes each (its encoding is "
                        f"fixed-size), got sizes {sorted(set(map(len, values)))[:5]}"
                    ),
                    bad,
                )
            else:
                fixed_total += size
        if not self._started:
            self._start()
        pack = struct.Struct(f"<{len(variable)}I").pack
        lengths = [list(map(len, values)) for values in variable]
        headers = list(map(pack, *lengths)) if variable else [b""] * count
        sizes: list[int] = (
            (np.sum(lengths, axis=0, dtype=np.int64) + fixed_total).tolist()
            if variable
            else [fixed_total] * count
        )
        limit = self._size_limit
        rows = zip(headers, sizes, zip(*ordered, strict=True), strict=True)
        for header, size, payloads in rows:
            if limit and self._sizes and self._shard_bytes + size > limit:
                self._flush()
            self._parts.append(header)
            self._parts += payloads
            self._sizes.append(size - 4)
            self._shard_bytes += size

    def finish(self) -> None:
        """Write the last shard and ``index.json``, wait for uploads, then publish the index.

        Raises:
            DiskFullError: The output folder's disk filled up; no index was published.
            UploadError: A shard could not be uploaded; no index was published.
        """
        if self._finished:
            return
        if not self._started:
            self._start()
        self._finished = True
        try:
            if self._sizes:
                self._flush()
            self._write_file(INDEX_BASENAME, [dump_index(self._entries, source=self._source)])
            if self._uploader is not None:
                self._uploader.wait()
                self._uploader.upload(INDEX_BASENAME)
                self._uploader.close()
        except BaseException:
            self._abort()
            raise
        self._close_progress()
        logger.info("wrote %d shards to %s", len(self._entries), self._remote or self._local)
        if self._uploader is not None and self._exist_ok:
            self._remove_earlier_writes()
        self._remove_local()

    def _remove_earlier_writes(self) -> None:
        """Delete the shards of earlier writes from the store, now that the index is published."""
        assert self._store is not None
        named = {(entry.zip_data or entry.raw_data).basename for entry in self._entries}
        remove_unnamed(self._store, named)

    def _remove_local(self) -> None:
        """Delete the local copy of a remote ``out`` unless ``keep_local``."""
        if self._scratch is not None:
            self._scratch.release(keep=self._keep_local)
        # Not before the start succeeded: the local folder of a refused write is the user's.
        elif self._started and self._remote is not None and not self._keep_local:
            shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> MDSWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        elif not self._finished:
            # The caller failed mid-way: publishing an index would present a partial dataset
            # as a whole one, so the shards written so far are left without one.
            self._finished = True
            self._abort()
            if not self._started:  # refused before writing anything: the error says it all
                return
            logger.warning(
                "writing stopped by %s; no index.json was published for %s",
                exc_type.__name__,
                self._remote or self._local,
            )

    @property
    def _folder(self) -> str:
        assert self._local is not None, "the local folder is set when writing starts"
        return self._local

    def _start(self) -> None:
        # _started is set last: a start that failed (a non-empty folder, say) fails again.
        store = None if self._remote is None else open_store(self._remote, timeout=self._timeout)
        if store is not None:  # first: refusing must not have emptied the local folder
            where = f"listing {store.url('')} (to check that it holds no dataset)"
            rng = np.random.default_rng()  # retry jitter only, as the uploader's
            listing = functools.partial(retried, where, store.list, self._retry, rng)
            check_destination(store, exist_ok=self._exist_ok, list_keys=listing)
            self._store, self._token = store, new_write_token()
        if self._local is None or self._scratch is not None:  # a URL out: a folder of its own
            self._scratch = self._scratch or ScratchFolder()
            self._local = self._scratch.path
        elif os.path.isdir(self._local) and os.listdir(self._local):
            if not self._exist_ok:
                raise DatasetExistsError(
                    f"output folder {self._local} is not empty; pass exist_ok=True to replace "
                    f"its contents, or choose an empty folder"
                )
            logger.warning("deleting the contents of %s (exist_ok=True)", self._local)
            shutil.rmtree(self._local)
        os.makedirs(self._local, exist_ok=True)
        if self._progress_bar:
            from tqdm.auto import tqdm

            self._progress = tqdm(desc="shards", unit="shard", dynamic_ncols=True)
            if store is not None:
                self._upload_progress = tqdm(
                    desc="uploaded", total=0, unit="B", unit_scale=True, dynamic_ncols=True
                )
        if store is not None:
            self._uploader = Uploader(
                store,
                self._local,
                max_workers=self._max_workers,
                retry=self._retry,
                progress=self._upload_progress,
                remove_uploaded=not self._keep_local,
            )
        self._started = True

    # What the shard format decides, in three hooks that the split-format writers
    # (writer/split_writer.py) override: the columns and sample encoder, the bytes a sample's
    # offset adds to its size, and the files and index entry of a shard.
    _offset_bytes = 4  # an MDS sample's size counts its uint32 entry in the offset table

    def _set_format(self, columns: Mapping[str, str], compression: str | None) -> list[str]:
        """Check ``columns``, set the sample encoder and shard overhead; return the names."""
        self._schema = MDSSchema(columns)
        self._encode = self._schema.encode_sample_sized
        self._config = self._schema.config_bytes(
            compression=compression, hashes=self._hashes, size_limit=self._size_limit
        )
        self._shard_overhead = 8 + len(self._config)
        return self._schema.names

    def _write_shard(self, number: int) -> ShardEntry:
        """Write the buffered samples as shard ``number``; return its index entry."""
        parts = [shard_header(self._config, self._sizes), *self._parts]
        raw_info, zip_info = self._write_shard_file(shard_basename(number, self._token), parts)
        return ShardEntry(
            format="mds",
            samples=len(self._sizes),
            raw_data=raw_info,
            zip_data=zip_info,
            compression=None if self._compression is None else self._compression.name,
            hashes=tuple(self._hashes),
            size_limit=self._size_limit,
            columns=self._schema.columns,
            column_sizes=tuple(self._schema.sizes),
        )

    def _flush(self) -> None:
        entry = self._write_shard(len(self._entries))
        self._entries.append(entry)
        logger.debug(
            "wrote %s: %d samples, %d bytes",
            entry.raw_data.basename,
            entry.samples,
            entry.raw_data.bytes,
        )
        self._parts = []
        self._sizes = []
        self._shard_bytes = self._shard_overhead
        if self._progress is not None:
            self._progress.update(1)

    def _write_shard_file(
        self, raw_name: str, parts: Sequence[bytes]
    ) -> tuple[FileInfo, FileInfo | None]:
        """Write one file of a shard, compressed if asked, and queue its upload.

        Returns the file's ``raw_*`` and ``zip_*`` index entries (``None`` uncompressed).
        """
        # The parts are never joined: a 64 MiB join faults in fresh pages every time.
        raw_info = FileInfo(raw_name, sum(map(len, parts)), self._digests(parts))
        zip_info = None
        if self._compression is None:
            self._write_file(raw_name, parts)
        else:
            zipped = self._compression.compress_parts(parts)
            zip_name = f"{raw_name}.{self._compression.extension}"
            zip_info = FileInfo(zip_name, sum(map(len, zipped)), self._digests(zipped))
            self._write_file(zip_name, zipped)
        if self._uploader is not None:
            self._uploader.submit((zip_info or raw_info).basename)
        return raw_info, zip_info

    def _write_file(self, name: str, parts: Sequence[bytes]) -> None:
        """Write a shard or the index under a temporary name and rename it into place."""
        try:
            atomic_write(os.path.join(self._folder, name), parts)
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            first = self._samples_published()
            what = (
                "the index"
                if name == INDEX_BASENAME
                else f"samples {first} to {first + len(self._sizes) - 1}"
            )
            raise DiskFullError(
                exc.errno,
                f"no space left in {self._folder} for {name} ({what}, "
                f"{sum(map(len, parts))} bytes; {free_bytes(self._folder)} bytes free now): "
                "free disk space or write to a roomier folder, then write the dataset again; "
                "no index.json was published and no file was left half-written",
            ) from exc

    def _raise_for_sample(self, exc: Exception, offset: int) -> NoReturn:
        """Re-raise ``exc`` naming the sample (``offset`` past the next one) and the dataset."""
        number = self._samples_published() + len(self._sizes) + offset
        # The same class, so that callers' except clauses (KeyError, UnicodeError, ...) match;
        # chained to the original error, not to each error that added context.
        message = f"sample {number} (counting from 0) of {self._where}: {exc}"
        raise type(exc)(message) from exc.__cause__ or exc

    def _raise_for_extra_keys(self, sample: Mapping[str, Any]) -> NoReturn:
        extra = sorted(map(str, set(sample).difference(self._names)))
        number = self._samples_published() + len(self._sizes)
        raise UnknownColumnError(
            f"sample {number} (counting from 0) of {self._where} has keys that are not "
            f"columns: {extra} (the columns are {self._names}); add them to columns=, "
            "leave them out of the sample, or pass extra_keys='drop' to drop them"
        )

    def _samples_published(self) -> int:
        """Samples in the shards finished so far (those of the shard being filled follow)."""
        return sum(entry.samples for entry in self._entries)

    @property
    def _where(self) -> str:
        """The dataset as messages name it: its URL, else its folder (set for a local ``out``)."""
        return url_for_message(self._remote) if self._remote is not None else str(self._local)

    def _digests(self, parts: Sequence[bytes]) -> dict[str, str]:
        return {algorithm: hash_chunks(algorithm, parts) for algorithm in self._hashes}

    def _abort(self) -> None:
        if self._uploader is not None:
            self._uploader.close(cancel=True)
        self._close_progress()
        self._remove_local()

    def _close_progress(self) -> None:
        for bar in (self._progress, self._upload_progress):
            if bar is not None:
                bar.close()
        self._progress = self._upload_progress = None


def _split_out(out: Out) -> tuple[str | None, str | None]:
    """Return ``(local folder or None for a temporary one, remote URL or None)``."""
    if isinstance(out, tuple):
        if len(out) != 2:
            raise ConfigurationError(
                f"out must be a path, a URL or a (local, remote) pair, got {out!r}"
            )
        local, remote = (os.fspath(part) for part in out)
        if is_remote(local):
            raise ConfigurationError(f"the first item of out={out!r} must be a local folder")
        return local_path(local), remote
    if not isinstance(out, (str, os.PathLike)):
        raise ConfigurationError(
            f"out must be a path, a URL or a (local, remote) pair, got {out!r}"
        )
    text = os.fspath(out)
    if is_remote(text):
        return None, text
    return local_path(text), None
