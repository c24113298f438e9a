"""``Stream``: one dataset (a remote root and its local cache) and its weight in the mix."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from shardstream import config
from shardstream.cache import ensure_private_folder
from shardstream.errors import ConfigurationError
from shardstream.format.hashing import HASH_ALGORITHMS
from shardstream.format.index import safe_basename
from shardstream.sampling.mixing import StreamWeight
from shardstream.storage import DownloadOptions, is_remote, local_path
from shardstream.tables.filters import Filters

__all__ = ["Stream"]


class Stream:
    """One MDS dataset read by a :class:`~shardstream.StreamingDataset`, and how much of it.

    The same arguments as mosaicml-streaming's ``Stream``. Knobs left at ``None`` take the
    dataset's values. Once a dataset has loaded its streams, ``proportion``, ``repeat`` and
    ``choose`` read the values it derived for each (numpy scalars, as the reference writes them
    back); the weight given still decides every later load.

    Args:
        remote: Where the dataset lives: a URL (``s3://``, ``gs://``, ``azure://``,
            ``oci://``, ``dbfs:/Volumes/...``, ``https://``) or a local path. ``None``: the
            data is in ``local`` already, and is read in place: never written to, it may be
            read-only (decompressed shards and their locks go to a folder of their own under
            ``SHARDSTREAM_CACHE_DIR``). A local path given as both is read in place too.
        local: The node-local cache folder: a new or empty folder, which shardstream marks
            as its cache, or one it marked before; any other is refused
            (:class:`~shardstream.errors.CacheFolderError`: its files are never deleted).
            ``None``: a folder per remote under ``SHARDSTREAM_CACHE_DIR`` (default:
            ``$TMPDIR/shardstream-<uid>``).
        split: A sub-folder of both, holding the split's ``index.json``.
        proportion: Relative weight of this stream in an epoch.
        repeat: How many times over the stream is taken per epoch (``0.5``, ``2``).
        choose: Exactly how many samples of the stream an epoch takes.
        download_retry: Retries after a failed download (``2``: up to three attempts).
        download_timeout: Seconds allowed for each request to the remote (see
            :class:`~shardstream.StreamingDataset`).
        validate_hash: Check shard files against this digest from the index.
        keep_zip: Keep compressed shard files after decompressing them (data read in place
            always keeps them).
        format: ``'mds'``, ``'parquet'`` (a folder of ``*.parquet`` files, read row group by
            row group: see ``docs/parquet.md``), ``'delta'`` (a Delta table's version, read as
            its Parquet files: see ``docs/delta.md``), or ``None``: MDS where an
            ``index.json`` is, else Delta where a ``_delta_log/`` is, else Parquet where
            ``*.parquet`` files are.
        columns: The columns to read from a Parquet stream (``None``: the dataset's).
        filters: pyarrow's DNF filters (``[("year", ">=", 2021)]``) for a Parquet stream:
            files in ``key=value`` folders whose values cannot pass are left out. Terms on
            other columns are not applied to rows here.
        version: The Delta table's version to read: ``None`` (the latest when the dataset
            loads), a version number, or a ``datetime`` (or ISO 8601 text): the last version
            committed at or before it. The version read is recorded in state dicts.
        files: The Parquet files to read, as paths under the stream's root (``"a.parquet"``,
            ``"year=2024/b.parquet"``; one named twice is read twice); ``None``: every
            ``*.parquet`` file under it.

    Raises:
        ConfigurationError: Neither ``remote`` nor ``local``, several weights, or bad values.

    Example:
        web = Stream(remote="s3://bucket/web", proportion=0.7)
        code = Stream(remote="s3://bucket/code", local="/tmp/cache/code", proportion=0.3)
        ds = StreamingDataset(streams=[web, code], batch_size=32, shuffle=True)
    """

    def __init__(
        self,
        *,
        remote: str | os.PathLike[str] | None = None,
        local: str | os.PathLike[str] | None = None,
        split: str | None = None,
        proportion: float | None = None,
        repeat: float | None = None,
        choose: int | None = None,
        download_retry: int | None = None,
        download_timeout: float | None = None,
        validate_hash: str | None = None,
        keep_zip: bool | None = None,
        format: str | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Any] | None = None,
        version: int | datetime | str | None = None,
        files: Sequence[str] | None = None,
    ) -> None:
        if remote is None and local is None:
            raise ConfigurationError(
                "a Stream needs a remote, a local folder, or both: pass remote=... and/or local=..."
            )
        self.remote = None if remote is None else os.fspath(remote)
        self.local = None if local is None else os.fspath(local)
        self.split = None if split is None else safe_basename(split, where="split")
        self.weight = StreamWeight(proportion=proportion, repeat=repeat, choose=choose)
        self._derived: tuple[Any, Any, Any] | None = None  # set by settle()
        if download_retry is not None and (
            not isinstance(download_retry, int) or isinstance(download_retry, bool)
            or download_retry < 0
        ):  # fmt: skip
            raise ConfigurationError(
                f"download_retry counts retries and must be an integer >= 0, got {download_retry!r}"
            )
        if download_timeout is not None and (
            not isinstance(download_timeout, (int, float)) or download_timeout <= 0
        ):
            raise ConfigurationError(
                f"download_timeout must be a number of seconds > 0, got {download_timeout!r}"
            )
        if validate_hash is not None and validate_hash not in HASH_ALGORITHMS:
            raise ConfigurationError(
                f"validate_hash={validate_hash!r} is not a known algorithm; use one of "
                f"{', '.join(HASH_ALGORITHMS)}"
            )
        self.download_retry = download_retry
        self.download_timeout = download_timeout
        self.validate_hash = validate_hash
        self.keep_zip = keep_zip
        if format not in (None, "mds", "parquet", "delta"):
            raise ConfigurationError(
                f"format={format!r}; use 'mds', 'parquet', 'delta' or None (detect)"
            )
        self.format = format
        self.version = _version(version, format)
        self.columns = _list(columns)
        self.filters = None if filters is None else Filters.parse(filters)
        self.files = _files(files, format)

    @property
    def proportion(self) -> float | None:
        """The stream's share of an epoch's weight, once derived; before, the one given."""
        return self.weight.proportion if self._derived is None else self._derived[0]

    @property
    def repeat(self) -> float | None:
        """Times over the stream an epoch takes, once derived; before, the one given."""
        return self.weight.repeat if self._derived is None else self._derived[1]

    @property
    def choose(self) -> int | np.integer[Any] | None:
        """Samples of the stream an epoch takes, once derived; before, the count given."""
        return self.weight.choose if self._derived is None else self._derived[2]

    def settle(self, proportion: np.float64, repeat: np.float64, choose: np.int64) -> None:
        """Record the weights a dataset derived for this stream (its ``weight`` is kept)."""
        self._derived = (proportion, repeat, choose)

    def __repr__(self) -> str:
        return f"Stream(remote={self.remote!r}, local={self.local!r}, split={self.split!r})"

    def resolve(
        self,
        *,
        download_retry: int,
        download_timeout: float,
        validate_hash: str | None,
        keep_zip: bool,
        download_concurrency: int,
        columns: Sequence[str] | None = None,
        split: str | None = None,
    ) -> ResolvedStream:
        """This stream with the dataset's defaults filled in and its folders decided."""
        split = self.split or split
        remote = self.remote
        local = self.local
        if remote is not None and not is_remote(remote):
            remote_path = os.path.abspath(local_path(remote))
            if local is None or os.path.abspath(local_path(local)) == remote_path:
                remote, local = None, remote_path  # a local dataset is read in place
        if local is None:
            assert remote is not None
            digest = hashlib.blake2s(remote.rstrip("/").encode(), digest_size=8).hexdigest()
            default_root = config.cache_root()
            ensure_private_folder(default_root)
            local = os.path.join(default_root, digest)
        root = os.path.abspath(local_path(local))
        remote_root = remote
        if split:
            root = os.path.join(root, split)
            if remote_root is not None:
                remote_root = remote_root.rstrip("/") + "/" + split
        retry = self.download_retry if self.download_retry is not None else download_retry
        timeout = self.download_timeout if self.download_timeout is not None else download_timeout
        options = DownloadOptions(
            retry=retry, timeout=float(timeout), concurrency=download_concurrency
        )
        return ResolvedStream(
            remote=remote_root,
            local=root,
            options=options,
            validate_hash=self.validate_hash or validate_hash,
            keep_zip=bool(self.keep_zip if self.keep_zip is not None else keep_zip),
            weight=self.weight,
            format=self.format,
            columns=self.columns if self.columns is not None else _list(columns),
            split=split or "",
            filters=self.filters,
            version=self.version,
            files=self.files,
        )


def _version(version: Any, format: str | None) -> int | datetime | str | None:
    """A Delta version as asked for, checked for its type alone (no I/O here)."""
    if version is None:
        return None
    if format not in (None, "delta"):
        raise ConfigurationError(f"version= applies to Delta tables; this stream is {format!r}")
    if isinstance(version, bool) or not isinstance(version, (int, datetime, str)):
        raise ConfigurationError(
            f"version must be a version number, a datetime or ISO 8601 text, got {version!r}"
        )
    if isinstance(version, int) and version < 0:
        raise ConfigurationError(f"version must be >= 0, got {version}")
    if isinstance(version, str):
        try:
            datetime.fromisoformat(version.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigurationError(
                f"version={version!r} is not ISO 8601 text such as '2026-01-31T12:00:00Z'"
            ) from None
    return version


def _files(files: Sequence[str] | None, format: str | None) -> tuple[str, ...] | None:
    """The Parquet files named, checked to be relative paths (no I/O here)."""
    if files is None:
        return None
    if format not in (None, "parquet"):
        raise ConfigurationError(f"files= applies to Parquet streams; this stream is {format!r}")
    if isinstance(files, str) or not files or not all(isinstance(f, str) for f in files):
        raise ConfigurationError(f"files must be a non-empty list of file paths, got {files!r}")
    bad = [f for f in files if f.startswith("/") or ".." in f.split("/") or not f.strip("/")]
    if bad:
        raise ConfigurationError(
            f"files= holds {bad!r}: give paths under the stream's root, such as 'a.parquet'"
        )
    return tuple(files)


def _list(columns: Sequence[str] | None) -> list[str] | None:
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise ConfigurationError(f"columns must be a list of column names, got {columns!r}")
    return None if columns is None else list(columns)


@dataclass(frozen=True)
class ResolvedStream:
    """A stream with every knob decided.

    Attributes:
        remote: The split's remote root URL, or ``None`` for data that is local already.
        local: The split's local folder (where ``index.json`` and the shards are).
        options: Download retries, timeout and parallelism.
        validate_hash: A digest to check shard files against, or ``None``.
        keep_zip: Keep compressed files after decompressing.
        weight: The stream's weight in the mix.
        format: ``'mds'``, ``'parquet'`` or ``None`` (detected when loaded).
        columns: The Parquet columns to read, or ``None`` for all.
        split: The split's sub-folder (``""``: none), the last part of ``local``.
        filters: Which Parquet files to read, by their partition values (``None``: all).
        version: The Delta version asked for (``None``: the latest).
        files: The Parquet files to read, under the root (``None``: all).
    """

    remote: str | None
    local: str
    options: DownloadOptions
    validate_hash: str | None
    keep_zip: bool
    weight: StreamWeight
    format: str | None = None
    columns: list[str] | None = None
    split: str = ""
    filters: Filters | None = None
    version: int | datetime | str | None = None
    files: tuple[str, ...] | None = None

    def pinned(self, version: int) -> ResolvedStream:
        """This stream reading the Delta version ``version``."""
        return replace(self, format="delta", version=version)
