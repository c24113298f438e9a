"""Reading one version of a Delta table's log: which files, which values, which rows are gone.

The log (``_delta_log/``) is read by ``deltalake`` (delta-rs, the ``delta`` extra). A table on
local disk is read in place. For a remote table, the log's files are copied into the stream's
cache folder first (``.shardstream/delta-log/``) with the store shardstream already reads the
table with, so the table is read the same way on every store (credentials, retries and
timeouts included). A copy is kept by the identity of the object it was copied from (size and
version tag: ETag, generation, a local file's inode, size and mtime; recorded in
``.shardstream/delta-log.json``), as cached shards are: log files never change once written,
so later starts fetch only the new ones, but a table deleted and written again at its path,
whose commits have the same names and sizes, is fetched again. The table's listing, asked
once per start, also says which data files still exist: a version whose files were vacuumed
is refused, naming the oldest version whose files are all there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

import numpy as np

from shardstream._optional import require
from shardstream.cache.layout import STATE_FOLDER
from shardstream.cache.locks import FileLock
from shardstream.cache.provenance import identity, read_record, read_state_document
from shardstream.cache.safe_paths import write_file
from shardstream.errors import (
    ConfigurationError,
    ShardNotFoundError,
    TableVersionError,
    UnsupportedTableError,
)
from shardstream.storage import DownloadOptions, ObjectStore, fetch_bytes, fetch_listing
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key
from shardstream.tables.delta_snapshot import DeltaFile, DeltaSnapshot, TableColumn

__all__ = ["LOG_FOLDER", "SUPPORTED_READER_FEATURES", "TableVersion", "read_snapshot"]

logger = logging.getLogger(__name__)

#: The transaction log's folder in a table.
LOG_FOLDER = "_delta_log"
#: The reader features whose tables are read correctly: deletion vectors are applied, column
#: mapping renamed, widened types cast; the others change only how the log is stored.
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)
_MIRROR = "delta-log"
_COPIED = "delta-log.json"  # each copied file's key and the identity it was copied from
_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(\.\d+\.\d+)?(\.[^/]*)?\.parquet")
_DELETION_VECTOR = re.compile(r"(.*/)?deletion_vector_[^/]*\.bin")

#: A version as asked for: the latest (``None``), a number, or a point in time.
TableVersion = int | datetime | str | None


def read_snapshot(
    table: str,
    store: ObjectStore | None,
    local: str,
    version: TableVersion,
    options: DownloadOptions,
) -> tuple[DeltaSnapshot, dict[str, ObjectInfo] | None]:
    """The files, values and schema of one version of the Delta table at ``table``.

    Args:
        table: The table's URL or path, named in messages.
        store: The table's store, or ``None`` for a table on local disk at ``local``.
        local: The table itself (``store`` is ``None``), or the stream's cache folder.
        version: The version: ``None`` (the latest), a number, or a ``datetime`` (or ISO 8601
            text): the last version committed at or before it.
        options: Retries and timeout of the requests.

    Returns:
        The version, and for a remote table the listed size and tag of each of its files.

    Raises:
        MissingDependencyError: ``deltalake`` is not installed.
        ShardNotFoundError: There is no ``_delta_log/`` at ``table``.
        TableVersionError: The version is not there: vacuumed, its log entries cleaned up, or
            newer than the table; the message names the versions that are.
        UnsupportedTableError: The version needs a reader feature this reader lacks.
    """
    dl = require("deltalake", extra="delta", purpose="Reading Delta tables")
    listing = None
    if store is None:
        root = local
        if not os.path.isdir(os.path.join(root, LOG_FOLDER)):
            raise ShardNotFoundError(
                f"{table} is not a Delta table: it has no {LOG_FOLDER}/ folder; point remote= "
                "(or local=) at the table's root folder"
            )
    else:
        listing = fetch_listing(store, "", options)
        root = _mirror(store, listing, local, options, table)
    current = _latest_logged(root)
    latest = None if isinstance(version, int) else _open(dl, root, None, table)
    number = _resolve(latest, current, version, table)
    current = max(current, number)  # a commit may have landed since the log was listed
    logger.info("reading version %d of the Delta table %s (its latest is %d)",
                number, table, current)  # fmt: skip
    pinned = latest if latest is not None and number == current else _open(dl, root, number, table)
    snapshot = _snapshot(pinned, table, number, root, current)
    if store is None:
        exists: Callable[[str], bool] = lambda key: os.path.isfile(os.path.join(root, key))  # noqa: E731
    else:
        assert listing is not None
        present = listing
        exists = lambda key: key in present  # noqa: E731
    missing = [file.key for file in snapshot.files if not exists(file.key)]
    if missing:
        oldest = _oldest_complete(dl, root, number + 1, current, exists, table)
        left = (
            f"the oldest version whose files are all there is {oldest}"
            if oldest is not None
            else "no version has all its files"
        )
        raise TableVersionError(
            f"version {number} of the Delta table {table} has been vacuumed: {missing[0]} "
            f"(and {len(missing) - 1} more of its files) is gone; {left}. Read that version "
            "or a later one (version=...), or restore the files"
        )
    infos = None if listing is None else {file.key: listing[file.key] for file in snapshot.files}
    return snapshot, infos


def _open(dl: Any, root: str, version: int | None, table: str) -> Any:
    """``DeltaTable`` at ``root``, at ``version`` (the latest when ``None``)."""
    try:
        return dl.DeltaTable(root, version=version)
    except Exception as exc:  # deltalake's errors share no base class of ours
        if version is not None and version < _oldest_logged(root):
            raise TableVersionError(
                f"version {version} of the Delta table {table} cannot be read: its log entries "
                f"are gone (cleaned up after the log retention); the oldest version left is "
                f"{_oldest_logged(root)}. Read that version or a later one (version=...)"
            ) from exc
        raise _refused(table, exc) from exc


def _refused(table: str, exc: Exception) -> Exception:
    """A clear error for a log deltalake refused: an unsupported feature is named as such."""
    text = str(exc)
    if "feature" in text.lower() or "unsupported" in text.lower():
        known = ", ".join(sorted(SUPPORTED_READER_FEATURES))
        return UnsupportedTableError(
            f"the Delta table {table} cannot be read: {text}; it needs a reader feature "
            f"shardstream does not read (those it does: {known})"
        )
    return ShardNotFoundError(
        f"the Delta table {table} cannot be read: {text}; check that remote= names the table's "
        "root (the folder holding _delta_log/)"
    )


def _resolve(latest: Any, current: int, version: TableVersion, table: str) -> int:
    """The version number ``version`` names (``latest``: the table loaded, for times)."""
    if version is None:
        return int(latest.version())
    if isinstance(version, int):
        if version > current:
            raise TableVersionError(
                f"the Delta table {table} has no version {version} yet: its latest is {current}"
            )
        return version
    when = _instant(version)
    commits = sorted(
        (int(entry["version"]), int(entry["timestamp"]))
        for entry in latest.history()
        if "version" in entry and "timestamp" in entry
    )
    millis = when.timestamp() * 1000
    before = [number for number, stamp in commits if stamp <= millis]
    if not before:
        first = commits[0] if commits else (current, 0)
        stamp = datetime.fromtimestamp(first[1] / 1000, timezone.utc).isoformat()
        raise TableVersionError(
            f"the Delta table {table} has no version committed at or before {when.isoformat()}: "
            f"its oldest version left, {first[0]}, was committed at {stamp}"
        )
    return max(before)


def _instant(version: datetime | str) -> datetime:
    """A point in time; one without a zone is UTC."""
    when = version if isinstance(version, datetime) else datetime.fromisoformat(
        version.replace("Z", "+00:00")
    )  # fmt: skip
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _snapshot(table_at: Any, table: str, version: int, root: str, latest: int) -> DeltaSnapshot:
    """The :class:`DeltaSnapshot` of a loaded version."""
    pa = require("pyarrow", extra="delta", purpose="Reading Delta tables")
    protocol = table_at.protocol()
    features = set(protocol.reader_features or ())
    unknown = sorted(features - SUPPORTED_READER_FEATURES)
    if protocol.min_reader_version > 3 or unknown:
        needs = unknown or [f"reader version {protocol.min_reader_version}"]
        raise UnsupportedTableError(
            f"version {version} of the Delta table {table} needs the reader feature(s) "
            f"{', '.join(needs)}, which shardstream does not read (it reads "
            f"{', '.join(sorted(SUPPORTED_READER_FEATURES))}); convert the table, or read a "
            "version from before the feature was enabled"
        )
    metadata = table_at.metadata()
    mapping = (metadata.configuration or {}).get("delta.columnMapping.mode", "none")
    partitions = set(metadata.partition_columns or ())
    arrow = pa.schema(table_at.schema().to_arrow())
    columns = []
    for field, kind in zip(table_at.schema().fields, arrow, strict=True):
        physical = (field.metadata or {}).get("delta.columnMapping.physicalName", field.name)
        if mapping != "none" and _nested(pa, kind.type):
            raise UnsupportedTableError(
                f"the Delta table {table} maps column names ({mapping!r} column mapping) and "
                f"its column {field.name!r} is nested ({kind.type}); nested fields under column "
                "mapping are not read: convert the table without column mapping"
            )
        columns.append(
            TableColumn(field.name, str(physical), kind.type, partition=field.name in partitions)
        )
    actions = pa.table(table_at.get_add_actions(flatten=True))
    keeps = _deletions(table_at, features, root)
    files = []
    for row in actions.to_pylist():
        key = unquote(str(row["path"]))  # the log holds paths URL-encoded
        if "://" in key or key.startswith("/"):
            raise UnsupportedTableError(
                f"the Delta table {table} names a data file outside its folder ({key}); such "
                "tables (shallow clones) are not read: deep-clone the table"
            )
        values = tuple(
            row.get(f"partition.{c.name}", row.get(f"partition.{c.physical}"))
            for c in columns
            if c.partition
        )
        files.append(DeltaFile(key, int(row["size_bytes"]), values, keeps.get(key)))
    files.sort(key=lambda file: file.key)
    return DeltaSnapshot(table, version, tuple(columns), tuple(files), latest)


def _nested(pa: Any, kind: Any) -> bool:
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return bool(_nested(pa, kind.value_type))
    return False


def _deletions(table_at: Any, features: set[str], root: str) -> dict[str, np.ndarray[Any, Any]]:
    """Each file's rows left by its deletion vector (``True``: kept), by key."""
    if "deletionVectors" not in features:
        return {}
    pa = require("pyarrow", extra="delta", purpose="Reading Delta tables")
    vectors = pa.table(pa.RecordBatchReader.from_stream(table_at.deletion_vectors()))
    prefix = _uri_prefix(table_at.table_uri, root)
    keeps = {}
    for path, selection in zip(
        vectors.column("filepath").to_pylist(),
        vectors.column("selection_vector").to_pylist(),
        strict=True,
    ):
        path = unquote(path)
        keeps[path[len(prefix) :] if path.startswith(prefix) else path] = np.asarray(
            selection, dtype=bool
        )
    return keeps


def _uri_prefix(uri: str, root: str) -> str:
    """The table's URI as the (decoded) file paths of ``deletion_vectors()`` begin."""
    text = unquote(uri)
    if not text.endswith("/"):
        text += "/"
    return text if "://" in text else "file://" + os.path.abspath(root) + "/"


def _latest_logged(root: str) -> int:
    """The newest version the log at ``root`` holds."""
    names = os.listdir(os.path.join(root, LOG_FOLDER))
    versions = [int(m.group(1)) for name in names if (m := _COMMIT.fullmatch(name))]
    versions += [int(m.group(1)) for name in names if (m := _CHECKPOINT.fullmatch(name))]
    if not versions:
        raise ShardNotFoundError(
            f"{os.path.join(root, LOG_FOLDER)} holds no commit: the Delta table is empty or "
            "was not written whole"
        )
    return max(versions)


def _oldest_logged(root: str) -> int:
    """The oldest version the log at ``root`` still holds (a checkpoint, or commit 0)."""
    names = os.listdir(os.path.join(root, LOG_FOLDER))
    commits = {int(m.group(1)) for name in names if (m := _COMMIT.fullmatch(name))}
    checkpoints = {int(m.group(1)) for name in names if (m := _CHECKPOINT.fullmatch(name))}
    if 0 in commits:
        return 0
    return min(checkpoints or commits or {0})


def _oldest_complete(
    dl: Any, root: str, low: int, high: int, exists: Callable[[str], bool], table: str
) -> int | None:
    """The oldest version in ``[low, high]`` whose files all exist (vacuum removes old ones)."""
    pa = require("pyarrow", extra="delta", purpose="Reading Delta tables")
    found = None
    while low <= high:  # a version's files are there when a later one's are not never happens
        middle = (low + high) // 2
        try:
            actions = pa.table(dl.DeltaTable(root, version=middle).get_add_actions(flatten=True))
            complete = all(exists(unquote(str(k))) for k in actions.column("path").to_pylist())
        except Exception:  # noqa: BLE001 - a version whose log is gone is not complete
            complete = False
        if complete:
            found, high = middle, middle - 1
        else:
            low = middle + 1
    return found


def _mirror(
    store: ObjectStore,
    listing: Mapping[str, ObjectInfo],
    local: str,
    options: DownloadOptions,
    table: str,
) -> str:
    """Copy the remote log (and deletion vector files) into the cache; return the copy's root."""
    wanted = {
        key: info
        for key, info in listing.items()
        if key.startswith(LOG_FOLDER + "/") or _DELETION_VECTOR.fullmatch(key)
    }
    if not any(key.startswith(LOG_FOLDER + "/") for key in wanted):
        raise ShardNotFoundError(
            f"{table} is not a Delta table: it has no {LOG_FOLDER}/ folder; point remote= at "
            "the table's root"
        )
    state = os.path.join(local, STATE_FOLDER)
    record = read_record(state)
    if record is not None:  # nothing is copied into a folder that caches another remote
        record.check_remote(store.url(""), local)
    root = os.path.join(state, _MIRROR)
    lock = FileLock(os.path.join(state, "delta-log.lock"))
    with lock.hold(timeout=options.timeout * (options.retry + 1) + 60, what="the Delta log"):
        record_path = os.path.join(state, _COPIED)
        copied = _copied(record_path, table)
        before = dict(copied)
        fetched = 0
        try:
            for key, info in sorted(wanted.items()):
                # A listed key is the store's word: one that climbs with '..' is refused.
                path = os.path.join(root, *check_key(key, table).split("/"))
                tag = identity(info)
                # The one rule for a copy: it is used while the object it came from has the
                # same identity, compared for equality (never by time). An object without a
                # version tag has none that tells a rewrite of the same size: fetched each time.
                if info.etag and copied.get(key) == tag and os.path.isfile(path):
                    continue
                write_file(path, [fetch_bytes(store, key, options)], root=local)
                copied[key] = tag
                fetched += 1
            for key in [key for key in copied if key not in wanted]:  # gone from the table
                del copied[key]
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(root, *key.split("/")))
            for folder, _, names in os.walk(os.path.join(root, LOG_FOLDER)):
                for name in names:  # entries cleaned up remotely go here too
                    path = os.path.join(folder, name)
                    key = os.path.relpath(path, root).replace(os.sep, "/")
                    if key not in wanted and not name.startswith("."):
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(path)
        finally:  # what was fetched before a failure is not fetched again
            if copied != before:
                document = {"version": 1, "files": copied}
                write_file(record_path, [json.dumps(document).encode()])
    logger.debug("fetched %d files of the Delta log of %s", fetched, table)
    return root


def _copied(path: str, table: str) -> dict[str, str]:
    """The identity each copied log file was fetched from, by key (none: nothing trusted).

    The record is read as :func:`~shardstream.cache.provenance.read_state_document` says: a
    key that ``check_key`` refuses (absolute, climbing with ``..``) is dropped, so no file
    outside the copy is ever deleted, nor kept, on the record's word.
    """
    document = read_state_document(path)
    if document is None:
        return {}  # a copy made before identities were kept is fetched again, once
    try:
        files = {str(key): str(tag) for key, tag in document["files"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        logger.warning("ignoring the malformed %s (%s): the log is fetched again", path, exc)
        return {}
    kept = {key: tag for key, tag in files.items() if _names_a_copy(key, table)}
    if len(kept) < len(files):
        logger.warning("ignoring keys of %s that name no file of the table: %s", path, table)
    return kept


def _names_a_copy(key: str, table: str) -> bool:
    """Whether ``key`` names a file under the copy's root, as ``check_key`` accepts."""
    try:
        check_key(key, table)
    except ConfigurationError:
        return False
    return True
