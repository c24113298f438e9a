"""``index.json``: the list of a dataset's shards, parsed strictly and written byte-for-byte.

Each shard entry becomes a frozen :class:`ShardEntry`. Entries come from files we did not write,
so every key, type and basename is checked: a basename that is absolute or climbs out of the
dataset root is refused.
"""

from __future__ import annotations

import gc
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from shardstream.errors import IndexFormatError, UnsafePathError
from shardstream.format.index_values import (
    column_set,
    is_int,
    is_utf8,
    known_columns,
    optional_str,
    shared,
)

__all__ = [
    "INDEX_BASENAME",
    "INDEX_VERSION",
    "FileInfo",
    "ShardEntry",
    "dump_index",
    "most_samples",
    "parse_index",
    "safe_basename",
]

INDEX_BASENAME = "index.json"
INDEX_VERSION = 2
_UINT32_LIMIT = 1 << 32  # a shard file stores its sample count as uint32
_OFFSET_BYTES = 4  # each sample has one uint32 offset in its shard's offset table
_MAX_PATH_PARTS = 64

_COMMON_KEYS = frozenset(
    {"compression", "format", "hashes", "raw_data", "samples", "size_limit", "version", "zip_data"}
)
# The exact key set of each shard format's entry (the reference rejects any other key).
_FORMAT_KEYS: Mapping[str, frozenset[str]] = {
    "mds": _COMMON_KEYS | {"column_encodings", "column_names", "column_sizes"},
    "json": _COMMON_KEYS | {"columns", "newline", "raw_meta", "zip_meta"},
    "csv": _COMMON_KEYS | {"column_encodings", "column_names", "newline", "raw_meta", "zip_meta"},
    "tsv": _COMMON_KEYS | {"column_encodings", "column_names", "newline", "raw_meta", "zip_meta"},
    "xsv": _COMMON_KEYS
    | {"column_encodings", "column_names", "newline", "raw_meta", "separator", "zip_meta"},
}


def safe_basename(basename: object, *, where: str) -> str:
    """Return ``basename`` if it is a relative path that stays inside the dataset root.

    Raises:
        UnsafePathError: It is absolute, has ``..``, a backslash or a NUL byte.
        IndexFormatError: It is not a non-empty string of valid Unicode, or is nested absurdly
            deep.
    """
    if not isinstance(basename, str) or not basename:
        raise IndexFormatError(f"{where}: basename must be a non-empty string, got {basename!r}")
    if not is_utf8(basename):
        raise IndexFormatError(f"{where}: basename {basename!r} is not valid Unicode")
    parts = basename.split("/")
    if (
        basename.startswith("/")
        or "\\" in basename
        or "\x00" in basename
        or (len(basename) > 1 and basename[1] == ":")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise UnsafePathError(
            f"{where}: basename {basename!r} is not a plain relative path inside the dataset "
            f"root (no leading '/', no '..', no '\\\\'); the index is corrupt or hostile"
        )
    if len(parts) > _MAX_PATH_PARTS:  # a cache would make each folder, recursively
        raise IndexFormatError(
            f"{where}: basename {basename[:60]!r}... is {len(parts) - 1} folders deep; at most "
            f"{_MAX_PATH_PARTS - 1} are allowed"
        )
    return posixpath.normpath(basename)


@dataclass(frozen=True)
class FileInfo:
    """One file of a shard: its path relative to the index, size in bytes and digests."""

    basename: str
    bytes: int
    hashes: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``{"basename", "bytes", "hashes"}`` object of ``index.json``."""
        return {"basename": self.basename, "bytes": self.bytes, "hashes": dict(self.hashes)}

    @classmethod
    def from_json(cls, obj: object, *, where: str) -> FileInfo:
        """Parse and check a file object of ``index.json``."""
        if not isinstance(obj, dict) or set(obj) != {"basename", "bytes", "hashes"}:
            raise IndexFormatError(
                f"{where}: expected an object with exactly basename, bytes and hashes, got {obj!r}"
            )
        size, hashes = obj["bytes"], obj["hashes"]
        if not is_int(size) or size < 0:
            raise IndexFormatError(f"{where}: bytes must be a non-negative integer, got {size!r}")
        if not isinstance(hashes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
        ):
            raise IndexFormatError(f"{where}: hashes must map names to hex digests, got {hashes!r}")
        return cls(safe_basename(obj["basename"], where=where), size, dict(hashes))


@dataclass(frozen=True)
class ShardEntry:
    """One shard of ``index.json``.

    ``columns`` maps column names to encodings in stored order (for ``mds``: sorted names).
    ``meta`` fields are set only for the split formats (json, csv, tsv, xsv).
    """

    format: str
    samples: int
    raw_data: FileInfo
    zip_data: FileInfo | None
    compression: str | None
    hashes: tuple[str, ...]
    size_limit: int | None
    columns: Mapping[str, str]
    column_sizes: tuple[int | None, ...] = ()
    raw_meta: FileInfo | None = None
    zip_meta: FileInfo | None = None
    newline: str | None = None
    separator: str | None = None

    @property
    def data_file(self) -> FileInfo:
        """The file that is stored: the compressed one when there is one."""
        return self.zip_data or self.raw_data

    def to_json(self) -> dict[str, Any]:
        """The entry as ``index.json`` stores it: exactly its format's keys (``_FORMAT_KEYS``)."""
        obj: dict[str, Any] = {
            "compression": self.compression,
            "format": self.format,
            "hashes": list(self.hashes),
            "raw_data": self.raw_data.to_json(),
            "samples": self.samples,
            "size_limit": self.size_limit,
            "version": INDEX_VERSION,
            "zip_data": None if self.zip_data is None else self.zip_data.to_json(),
        }
        if self.format == "json":
            obj["columns"] = dict(self.columns)
        else:
            obj["column_encodings"] = list(self.columns.values())
            obj["column_names"] = list(self.columns)
        if self.format == "mds":
            obj["column_sizes"] = list(self.column_sizes)
            return obj
        assert self.raw_meta is not None, "a split shard entry has its .meta file"
        obj["newline"] = self.newline
        obj["raw_meta"] = self.raw_meta.to_json()
        obj["zip_meta"] = None if self.zip_meta is None else self.zip_meta.to_json()
        if self.format == "xsv":  # csv and tsv imply theirs
            obj["separator"] = self.separator
        return obj

    @classmethod
    def from_json(cls, obj: object, *, where: str) -> ShardEntry:
        """Parse and check one shard entry of ``index.json``."""
        if not isinstance(obj, dict):
            raise IndexFormatError(f"{where}: a shard entry must be an object, got {obj!r}")
        fmt = obj.get("format")
        keys = _FORMAT_KEYS.get(fmt) if isinstance(fmt, str) else None
        if keys is None or not isinstance(fmt, str):
            raise IndexFormatError(
                f"{where}: unknown shard format {fmt!r}; expected one of {', '.join(_FORMAT_KEYS)}"
            )
        if set(obj) != keys:
            missing, extra = sorted(keys - set(obj)), sorted(set(obj) - keys)
            raise IndexFormatError(
                f"{where}: a {fmt!r} shard entry has keys {sorted(keys)}; missing {missing}, "
                f"unexpected {extra}"
            )
        if obj["version"] != INDEX_VERSION:
            raise IndexFormatError(f"{where}: shard version must be 2, got {obj['version']!r}")
        samples = obj["samples"]
        if not is_int(samples) or samples < 0:
            raise IndexFormatError(
                f"{where}: samples must be a non-negative integer, got {samples!r}"
            )
        if samples >= _UINT32_LIMIT:
            raise IndexFormatError(
                f"{where}: samples is {samples}, but a shard stores its count as uint32"
            )
        compression = optional_str(obj["compression"], f"{where}: compression")
        size_limit = obj["size_limit"]
        if size_limit is not None and not is_int(size_limit):
            raise IndexFormatError(
                f"{where}: size_limit must be an integer or null, got {size_limit!r}"
            )
        hashes = obj["hashes"]
        if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
            raise IndexFormatError(f"{where}: hashes must be a list of names, got {hashes!r}")
        raw_data = FileInfo.from_json(obj["raw_data"], where=f"{where}: raw_data")
        zip_data = _optional_file(obj["zip_data"], f"{where}: zip_data")
        if (compression is None) != (zip_data is None):
            raise IndexFormatError(f"{where}: zip_data must be present exactly when compressed")
        fields: dict[str, Any] = {}
        table = raw_data  # the file holding the offset table: for split formats, the .meta
        if fmt != "mds":
            table = FileInfo.from_json(obj["raw_meta"], where=f"{where}: raw_meta")
        _check_sample_count(samples, table, where)
        if fmt == "json":
            columns = obj["columns"]
            if not isinstance(columns, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in columns.items()
            ):
                raise IndexFormatError(
                    f"{where}: columns must map names to encodings (strings), got {columns!r}"
                )
        else:
            columns = _columns(obj, where)
        if fmt == "mds":
            sizes = obj["column_sizes"]
            if (
                not isinstance(sizes, list)
                or len(sizes) != len(columns)
                or not all(s is None or (is_int(s) and s >= 0) for s in sizes)
            ):
                raise IndexFormatError(
                    f"{where}: column_sizes must hold one size or null per column of "
                    f"{list(columns)} (sizes >= 0), got {sizes!r}"
                )
            fields["column_sizes"] = tuple(sizes)
        else:
            fields["raw_meta"] = table
            fields["zip_meta"] = _optional_file(obj["zip_meta"], f"{where}: zip_meta")
            fields["newline"] = optional_str(obj["newline"], f"{where}: newline") or "\n"
            if fmt != "json":
                fields["separator"] = {"csv": ",", "tsv": "\t"}.get(fmt) or optional_str(
                    obj.get("separator"), f"{where}: separator"
                )
                if not fields["separator"]:
                    raise IndexFormatError(f"{where}: an xsv shard needs a non-empty separator")
        return cls(
            format=fmt,
            samples=samples,
            raw_data=raw_data,
            zip_data=zip_data,
            compression=compression,
            hashes=tuple(hashes),
            size_limit=size_limit,
            columns=columns,
            **fields,
        )


def most_samples(table_bytes: int) -> int:
    """The most samples a shard can hold whose offset table lies in a file of ``table_bytes``.

    The table (an MDS shard's head; a split shard's ``.meta`` file) is a uint32 count and
    ``samples + 1`` uint32 offsets, so a sample count beyond this is a lie.
    """
    return max(table_bytes // _OFFSET_BYTES - 2, 0)


def _check_sample_count(samples: int, table: FileInfo, where: str) -> None:
    """Refuse a count the shard's offset table cannot hold, before anything is sized by it."""
    most = most_samples(table.bytes)
    if samples > most:
        raise IndexFormatError(
            f"{where} ({table.basename}): samples is {samples}, but a {table.bytes}-byte file "
            f"holds the offsets of at most {most}; index.json is corrupt or belongs to other "
            "shards: fetch it again, or rewrite the dataset"
        )


def parse_index(data: bytes | str, *, source: str) -> list[ShardEntry]:
    """Parse the text of an ``index.json``; ``source`` (its path or URL) names it in errors.

    Raises:
        IndexFormatError: The text is not a version-2 index or an entry is malformed.
    """
    # An index of 10,000 shards makes some 300,000 objects, none of them garbage; in a process
    # that has imported torch, the collections they set off cost more than the parsing itself.
    # Pause it, if it was on.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _parse_index(data, source)
    finally:
        if paused:
            gc.enable()


def _parse_index(data: bytes | str, source: str) -> list[ShardEntry]:
    entries = _typed_index(data)  # the common index, fast; else the checks that say why
    return _json_index(data, source) if entries is None else entries


def _json_index(data: bytes | str, source: str) -> list[ShardEntry]:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:  # also: too deep, or an int of 4300+ digits
        raise IndexFormatError(
            f"{source} is not valid JSON: {exc}; the file is truncated or not an MDS "
            "index: fetch it again, or rewrite the dataset"
        ) from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("shards"), list):
        raise IndexFormatError(
            f"{source} must be an object with a 'shards' list; is it an MDS dataset's "
            "index.json? Point remote=/local= at the dataset's root"
        )
    if obj.get("version") != INDEX_VERSION:
        raise IndexFormatError(
            f"{source} has version {obj.get('version')!r}; only MDS index version 2 is "
            "supported: rewrite the dataset with a current writer"
        )
    entries = []
    for number, entry in enumerate(obj["shards"]):
        parsed = _plain_mds_entry(entry)
        if parsed is None:  # anything unusual: the full checks, with their precise errors
            parsed = ShardEntry.from_json(entry, where=f"{source}, shard {number}")
        entries.append(parsed)
    return entries


# --- the common case, checked quickly -------------------------------------------------------
#
# Nearly every entry of a real index is an MDS entry with plain ASCII basenames and the same
# columns, hashes and sizes as its neighbours. ``_plain_mds_entry`` accepts exactly such
# entries, checking the same rules as ``ShardEntry.from_json`` in fewer steps (and sharing the
# tuples and column dicts that repeat); for anything else it returns None and the full checks
# run. It never accepts what the full checks refuse (tested on every fuzzed index).

_MDS_KEYS = _FORMAT_KEYS["mds"]
_FILE_KEYS = frozenset({"basename", "bytes", "hashes"})
# A relative path of plain components: letters, digits, '_', '-' and '.', never starting with
# '.', so never '.', '..' or empty; posixpath.normpath leaves it as it is.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*")


# The quick path builds its frozen objects by filling their __dict__, as copy and pickle do:
# a frozen dataclass's __init__ sets each field through object.__setattr__, a slow call made
# for every field of every entry.
_new = object.__new__


def _file_info(basename: str, size: int, hashes: Mapping[str, str]) -> FileInfo:
    info = _new(FileInfo)
    info.__dict__.update(basename=basename, bytes=size, hashes=hashes)
    return info


def _plain_basename(basename: str) -> bool:
    """Whether ``safe_basename`` accepts ``basename`` as it is (no normalising needed)."""
    return _PLAIN_PATH.fullmatch(basename) is not None and basename.count("/") < _MAX_PATH_PARTS


def _plain_file(obj: object) -> FileInfo | None:
    if type(obj) is not dict or obj.keys() != _FILE_KEYS:
        return None
    basename, size, hashes = obj["basename"], obj["bytes"], obj["hashes"]
    if (
        type(size) is not int
        or size < 0
        or type(basename) is not str
        or not _plain_basename(basename)
        or type(hashes) is not dict
    ):
        return None
    for key, value in hashes.items():
        if type(key) is not str or type(value) is not str:
            return None
    return _file_info(basename, size, hashes)


def _plain_mds_entry(obj: object) -> ShardEntry | None:
    if type(obj) is not dict or obj.keys() != _MDS_KEYS:
        return None
    samples, compression, size_limit = obj["samples"], obj["compression"], obj["size_limit"]
    hashes, sizes = obj["hashes"], obj["column_sizes"]
    if (
        obj["format"] != "mds"
        or type(obj["version"]) is not int
        or obj["version"] != INDEX_VERSION
        or type(samples) is not int
        or not 0 <= samples < _UINT32_LIMIT
        or (compression is not None and type(compression) is not str)
        or (size_limit is not None and type(size_limit) is not int)
        or type(hashes) is not list
        or type(sizes) is not list
    ):
        return None
    raw_data = _plain_file(obj["raw_data"])
    zipped = obj["zip_data"]
    zip_data = None if zipped is None else _plain_file(zipped)
    if raw_data is None or (zipped is not None and zip_data is None):
        return None
    if (compression is None) != (zip_data is None) or samples > most_samples(raw_data.bytes):
        return None
    for name in hashes:
        if type(name) is not str:
            return None
    for size in sizes:
        if size is not None and (type(size) is not int or size < 0):
            return None
    hash_names = shared(tuple(hashes))
    column_sizes = shared(tuple(sizes))
    names, encodings = obj["column_names"], obj["column_encodings"]
    if type(names) is not list or type(encodings) is not list:
        return None
    columns = known_columns(names, encodings)
    if columns is None or len(column_sizes) != len(columns):
        return None  # a column set seen for the first time takes the full checks once
    return _mds_entry(
        samples, raw_data, zip_data, compression, hash_names, size_limit, columns, column_sizes
    )


def _mds_entry(
    samples: int,
    raw_data: FileInfo,
    zip_data: FileInfo | None,
    compression: str | None,
    hashes: tuple[str, ...],
    size_limit: int | None,
    columns: dict[str, str],
    column_sizes: tuple[int | None, ...],
) -> ShardEntry:
    """A checked MDS entry, built without the frozen dataclass's per-field ``__setattr__``."""
    entry = _new(ShardEntry)
    entry.__dict__.update(
        format="mds",
        samples=samples,
        raw_data=raw_data,
        zip_data=zip_data,
        compression=compression,
        hashes=hashes,
        size_limit=size_limit,
        columns=columns,
        column_sizes=column_sizes,
        raw_meta=None,
        zip_meta=None,
        newline=None,
        separator=None,
    )
    return entry


# --- the common index, decoded and type-checked in C ----------------------------------------
#
# msgspec decodes an index whose every entry is a plain MDS entry straight into the structs
# below, checking each key and type as it goes, in less time than json.loads alone takes.
# What types cannot say (sample counts, plain basenames, known column sets) is checked as
# ``_plain_mds_entry`` checks it. Any other index, and anything unusual in one, makes it give
# up (None): the JSON path then parses the text and says what is wrong.


class _TypedFile(msgspec.Struct, forbid_unknown_fields=True):
    basename: str
    bytes: int
    hashes: dict[str, str]


class _TypedEntry(msgspec.Struct, forbid_unknown_fields=True):
    column_encodings: list[str]
    column_names: list[str]
    column_sizes: list[int | None]
    compression: str | None
    format: str
    hashes: list[str]
    raw_data: _TypedFile
    samples: int
    size_limit: int | None
    version: int
    zip_data: _TypedFile | None


class _TypedIndex(msgspec.Struct):  # other top-level keys are allowed, as by the JSON path
    shards: list[_TypedEntry]
    version: int


_TYPED_DECODER = msgspec.json.Decoder(_TypedIndex)


def _typed_index(data: bytes | str) -> list[ShardEntry] | None:
    """The entries of a version-2 index of plain MDS entries, or ``None`` for any other text.

    What every entry must satisfy is checked over all entries at once (a comprehension or one
    regular expression each, not a dozen Python steps per entry); column sets, column sizes
    and hash lists, which repeat from entry to entry, are checked when they change.
    """
    try:
        index = _TYPED_DECODER.decode(data)
    except (msgspec.DecodeError, ValueError, RecursionError):  # bad UTF-8 is a ValueError
        return None
    shards = index.shards
    if index.version != INDEX_VERSION:
        return None
    if not shards:
        return []
    zipped = [typed.zip_data for typed in shards if typed.zip_data is not None]
    samples = [typed.samples for typed in shards]
    if (
        {typed.format for typed in shards} != {"mds"}
        or {typed.version for typed in shards} != {INDEX_VERSION}
        or min(samples) < 0
        or max(samples) >= _UINT32_LIMIT
        or any((typed.compression is None) != (typed.zip_data is None) for typed in shards)
        or not _plain_files([typed.raw_data for typed in shards])
        or not _plain_files(zipped)
        or any(typed.samples > most_samples(typed.raw_data.bytes) for typed in shards)
    ):
        return None
    entries = []
    last_names: list[str] | None = None
    last_encodings: list[str] | None = None
    last_sizes: list[int | None] | None = None
    last_hashes: list[str] | None = None
    columns: dict[str, str] = {}
    column_sizes: tuple[int | None, ...] = ()
    hashes: tuple[str, ...] = ()
    for typed in shards:
        changed = False
        if typed.column_names != last_names or typed.column_encodings != last_encodings:
            try:
                columns = column_set(typed.column_names, typed.column_encodings, where="")
            except IndexFormatError:
                return None
            last_names, last_encodings, changed = typed.column_names, typed.column_encodings, True
        if typed.column_sizes != last_sizes:
            if any(size is not None and size < 0 for size in typed.column_sizes):
                return None
            column_sizes = shared(tuple(typed.column_sizes))
            last_sizes, changed = typed.column_sizes, True
        if changed and len(column_sizes) != len(columns):
            return None
        if typed.hashes != last_hashes:
            hashes = shared(tuple(typed.hashes))
            last_hashes = typed.hashes
        raw, packed = typed.raw_data, typed.zip_data
        entries.append(
            _mds_entry(typed.samples, _file_info(raw.basename, raw.bytes, raw.hashes),
                       None if packed is None else
                       _file_info(packed.basename, packed.bytes, packed.hashes),
                       typed.compression, hashes, typed.size_limit, columns, column_sizes)
        )  # fmt: skip
    return entries


# Plain basenames, one a line: one match checks every basename of an index.
_PLAIN_LINES = re.compile(f"{_PLAIN_PATH.pattern}(?:\n{_PLAIN_PATH.pattern})*")


def _plain_files(files: list[_TypedFile]) -> bool:
    """Whether every file's basename is plain (see ``_PLAIN_PATH``) and no size negative."""
    if not files:
        return True
    if min(typed.bytes for typed in files) < 0:
        return False
    names = [typed.basename for typed in files]
    joined = "\n".join(names)
    if joined.count("\n") != len(names) - 1 or _PLAIN_LINES.fullmatch(joined) is None:
        return False  # a basename with a newline of its own, or one that is not plain
    return "/" not in joined or all(name.count("/") < _MAX_PATH_PARTS for name in names)


def dump_index(entries: Sequence[ShardEntry], *, source: Mapping[str, Any] | None = None) -> bytes:
    """Serialise shard entries as ``index.json`` bytes, as the reference writer lays them out.

    ``source`` (where the samples came from) is kept under the key ``"source"``, which
    readers, the reference's included, ignore.
    """
    obj: dict[str, Any] = {
        "shards": [entry.to_json() for entry in entries],
        "version": INDEX_VERSION,
    }
    if source is not None:
        obj["source"] = dict(source)
    return json.dumps(obj, sort_keys=True).encode("utf-8")


def _optional_file(value: object, where: str) -> FileInfo | None:
    return None if value is None else FileInfo.from_json(value, where=where)


def _columns(obj: dict[str, Any], where: str) -> dict[str, str]:
    return column_set(obj["column_names"], obj["column_encodings"], where)
