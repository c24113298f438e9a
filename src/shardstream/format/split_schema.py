"""Writing the split formats: a JSON-lines or delimited-text sample, a shard's two files.

The bytes are mosaicml-streaming's, so that its readers and ours read either library's shards:

- ``json``: each sample is ``json.dumps(sample, sort_keys=True)`` plus ``newline``;
- ``csv``, ``tsv``, ``xsv``: the data file starts with a header line of the sorted column
  names, then each sample is its values in that order, as text, joined by ``separator``,
  plus ``newline``;
- the ``.meta`` file: uint32 ``N``, ``N + 1`` uint32 offsets into the data file, then the
  config JSON (keys sorted), which is also the shard's ``index.json`` entry less its files.

Column encodings are ``str``, ``int`` and ``float`` only (what the readers decode), and every
value is checked so that a reader gets back exactly what was written
(``SplitSchema.encode_sample_sized``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from shardstream.errors import (
    ConfigurationError,
    MissingColumnError,
    SampleTypeError,
    SampleValueError,
    ShardTooLargeError,
    UnencodableTextError,
)
from shardstream.format.mds import MAX_SHARD_BYTES

__all__ = ["SPLIT_ENCODINGS", "SplitSchema"]

#: The column encodings a split shard holds, and the Python type each one takes.
SPLIT_ENCODINGS: Mapping[str, type] = {"str": str, "int": int, "float": float}
# What json.loads skips after a value: a JSON sample's newline may hold only these.
_JSON_WHITESPACE = frozenset(" \t\n\r")
# The separators csv and tsv shards imply (their index entries do not store one).
_IMPLIED_SEPARATORS = {"csv": ",", "tsv": "\t"}


class SplitSchema:
    """The columns and layout of ``json``, ``csv``, ``tsv`` or ``xsv`` shards being written.

    Args:
        format: ``"json"``, ``"csv"``, ``"tsv"`` or ``"xsv"``.
        columns: Column name to encoding (``str``, ``int`` or ``float``).
        newline: Text ending every sample.
        separator: Text between a sample's values (``xsv`` only; ``csv`` and ``tsv`` imply
            theirs).

    Raises:
        ConfigurationError: An encoding is not one of the three, or ``newline``/``separator``
            cannot be read back (see the message).
    """

    def __init__(
        self,
        format: str,
        columns: Mapping[str, str],
        *,
        newline: str,
        separator: str | None = None,
    ) -> None:
        if format == "json":
            separator = None
        elif format in _IMPLIED_SEPARATORS:
            separator = _IMPLIED_SEPARATORS[format]
        elif format != "xsv":
            raise ConfigurationError(f"unknown split format {format!r}")
        for name, encoding in columns.items():
            if not isinstance(name, str):
                raise ConfigurationError(f"column names must be str, got {name!r}")
            if not isinstance(encoding, str) or encoding not in SPLIT_ENCODINGS:
                raise ConfigurationError(
                    f"column {name!r} has encoding {encoding!r}; {format} shards hold only "
                    f"{', '.join(SPLIT_ENCODINGS)}: use MDSWriter for other encodings"
                )
        if not isinstance(newline, str):
            raise ConfigurationError(f"newline must be a str, got {newline!r}")
        self.format = format
        self.newline = newline
        self.separator = separator
        if format == "json":
            # A reader parses each sample's text, newline included, with json.loads.
            if not _JSON_WHITESPACE.issuperset(newline):
                raise ConfigurationError(
                    f"newline={newline!r}: a json shard's newline may hold only spaces, tabs, "
                    "'\\n' and '\\r', which JSON readers skip; pass newline='\\n'"
                )
            #: Column name to encoding, as given (``index.json`` stores it with sorted keys).
            self.columns: dict[str, str] = dict(columns)
            self.names: list[str] = list(columns)
        else:
            self._check_delimiters(separator)
            self.names = sorted(columns)
            self.columns = {name: columns[name] for name in self.names}
            for name in self.names:
                if _unencodable(name):
                    raise ConfigurationError(
                        f"column name {name!r} holds a lone surrogate, which UTF-8 cannot store"
                    )
                for delimiter, role in ((separator, "separator"), (newline, "newline")):
                    if delimiter and delimiter in name:
                        raise ConfigurationError(
                            f"column name {name!r} holds the {role} {delimiter!r}, which the "
                            f"shard's header line cannot hold: rename the column"
                        )
        self._plan: list[tuple[str, str, type]] = [
            (name, encoding, SPLIT_ENCODINGS[encoding]) for name, encoding in self.columns.items()
        ]

    def _check_delimiters(self, separator: str | None) -> None:
        if not isinstance(separator, str) or not separator:
            raise ConfigurationError(
                f"separator={separator!r}: an xsv shard needs a non-empty str between values"
            )
        if not self.newline:
            raise ConfigurationError(
                f"newline='': {self.format} samples need a non-empty newline to end each line"
            )

    def _check_field(self, text: str, what: str) -> None:
        """Refuse text a reader would split in the wrong place: it holds a delimiter."""
        for delimiter, role in ((self.separator, "separator"), (self.newline, "newline")):
            if delimiter and delimiter in text:
                raise SampleValueError(
                    f"{what} holds the {role} {delimiter!r}, so a reader would split it; "
                    f"remove it, or write with another {role} (or with MDSWriter)"
                )

    def config(
        self, *, compression: str | None, hashes: Sequence[str], size_limit: int | None
    ) -> dict[str, Any]:
        """The shard config: its ``index.json`` entry less the files and the sample count."""
        config: dict[str, Any] = {
            "version": 2,
            "format": self.format,
            "compression": compression,
            "hashes": list(hashes),
            "size_limit": size_limit,
            "newline": self.newline,
        }
        if self.format == "json":
            config["columns"] = dict(self.columns)
        else:
            config["column_names"] = list(self.names)
            config["column_encodings"] = list(self.columns.values())
            if self.format == "xsv":
                config["separator"] = self.separator
        return config

    def encode_sample_sized(self, sample: Mapping[str, Any]) -> tuple[list[bytes], int]:
        """Encode one sample to ``([its bytes], its size)``; keys that are not columns are left out.

        Raises:
            MissingColumnError: The sample lacks a column.
            SampleTypeError: A value is not of its column's type (a ``bool`` is not an ``int``
                here: it would be read back as ``True``, or not at all).
            SampleValueError: A csv/tsv/xsv value holds the separator or the newline, or a
                multi-character separator would split the line elsewhere.
            UnencodableTextError: A ``str`` value holds a lone surrogate.
        """
        values = []
        for name, encoding, kind in self._plan:
            try:
                value = sample[name]
            except KeyError:
                raise MissingColumnError(
                    f"sample has no column {name!r}; the writer's columns are {self.names}"
                ) from None
            if not isinstance(value, kind) or isinstance(value, (bool, np.bool_)):
                shown = repr(value)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise SampleTypeError(
                    f"column {name!r}: encoding {encoding!r} expects {kind.__name__}, got "
                    f"{type(value).__name__}: {shown}"
                )
            values.append(value)
        try:
            if self.format == "json":
                text = json.dumps(dict(zip(self.names, values, strict=True)), sort_keys=True)
            else:
                text = self._line(values)
        except SampleValueError:
            raise
        except ValueError as exc:  # an int of more digits than Python converts to text
            raise SampleValueError(f"a value cannot be written as text: {exc}") from exc
        try:
            data = (text + self.newline).encode("utf-8")
        except UnicodeEncodeError as exc:
            name = next(n for n, v in zip(self.names, values, strict=True) if _unencodable(v))
            raise UnencodableTextError(
                f"column {name!r}: the text holds a lone surrogate ({exc.reason}), which "
                "UTF-8 cannot store: fix the text (e.g. decode its source with "
                "errors='replace')"
            ) from exc
        return [data], len(data)

    def _line(self, values: list[Any]) -> str:
        fields = []
        for (name, _, kind), value in zip(self._plan, values, strict=True):
            field = _TEXT[kind](value)
            self._check_field(field, f"column {name!r}: value {field[:60]!r}")
            fields.append(field)
        assert self.separator is not None  # set for every delimited format
        line = self.separator.join(fields)
        # A separator of several characters can reappear across a value's edge ("a" + "aa").
        if len(self.separator) > 1 and line.split(self.separator) != fields:
            raise SampleValueError(
                f"values {fields!r} joined by the separator {self.separator!r} would split "
                "differently on reading; use a single-character separator"
            )
        return line

    def shard_files(
        self, samples: Sequence[bytes], sizes: Sequence[int], config: bytes
    ) -> tuple[list[bytes], list[bytes]]:
        """The parts of a shard's data file and of its ``.meta`` file.

        Args:
            samples: Each sample's bytes, in order.
            sizes: Each sample's size.
            config: The config JSON (:meth:`config`, dumped with sorted keys).

        Raises:
            ShardTooLargeError: The data file would reach 4 GiB, past the reach of 32-bit
                offsets.
        """
        header = b""
        if self.format != "json":
            assert self.separator is not None
            header = (self.separator.join(self.names) + self.newline).encode("utf-8")
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        offsets += len(header)
        if offsets[-1] >= MAX_SHARD_BYTES:
            raise ShardTooLargeError(
                f"a {self.format} shard of {len(sizes)} samples would be {int(offsets[-1])} "
                "bytes, but its offsets are 32-bit: keep size_limit under 4 GiB and each "
                "sample well below it"
            )
        count = np.uint32(len(sizes)).tobytes()
        meta = [count, offsets.astype("<u4").tobytes(), config]
        return ([header, *samples] if header else list(samples)), meta


# Each type's text is its plain repr, what the reader's int() and float() parse back; an int or
# float subclass (an IntEnum) is written as the number it holds.
_TEXT: dict[type, Callable[[Any], str]] = {
    str: str.__str__,
    int: int.__repr__,
    float: float.__repr__,
}


def _unencodable(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
