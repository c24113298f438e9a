"""JSON Lines and CSV files to MDS, streamed a block at a time through Arrow's readers.

Types are inferred by Arrow from each file's first block (give ``schema`` to fix them), and
then mapped to encodings as for every other source
(:mod:`shardstream.converters.arrow_types`). Files are written in the order given, as one
dataset; every file must read to the first file's schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from shardstream._optional import require
from shardstream.converters.arrow_samples import OnNull
from shardstream.converters.arrow_types import arrow_module
from shardstream.converters.tables import arrow_to_mds
from shardstream.errors import ConfigurationError

__all__ = ["csv_to_mds", "jsonl_to_mds"]

Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

_BLOCK_BYTES = 1 << 22


def jsonl_to_mds(
    paths: Paths,
    out: Any,
    *,
    columns: Mapping[str, str] | None = None,
    schema: Any = None,
    on_null: OnNull = "error",
    progress: bool = True,
    **writer_kwargs: Any,
) -> int:
    """Write JSON Lines files (one JSON object per line) as one MDS dataset.

    Nested objects become ``struct`` columns (written as ``json``), arrays of numbers
    ``ndarray``; a key missing from a line is a null, handled by ``on_null``.

    Args:
        paths: A file or a list of files, read in order.
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        columns: Column name to encoding; inferred from the Arrow schema when None.
        schema: A ``pyarrow.Schema`` to parse with, instead of inferring one per file.
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments.

    Returns:
        The number of samples written.

    Example:
        paths = ["/tmp/raw/part-0.jsonl", "/tmp/raw/part-1.jsonl"]
        jsonl_to_mds(paths, "/tmp/my-ds", on_null="skip")
    """
    json = require("pyarrow.json", extra="arrow", purpose="Reading JSON Lines files")
    files = _paths(paths)
    parse = json.ParseOptions(explicit_schema=schema) if schema is not None else None

    def reader(path: str) -> Any:
        return json.open_json(
            path, read_options=json.ReadOptions(block_size=_BLOCK_BYTES), parse_options=parse
        )

    return arrow_to_mds(
        _batches(files, reader),
        out,
        columns=columns,
        on_null=on_null,
        progress=progress,
        where=f"{len(files)} JSON Lines file(s)",
        **writer_kwargs,
    )


def csv_to_mds(
    paths: Paths,
    out: Any,
    *,
    columns: Mapping[str, str] | None = None,
    schema: Any = None,
    delimiter: str = ",",
    on_null: OnNull = "error",
    progress: bool = True,
    **writer_kwargs: Any,
) -> int:
    r"""Write CSV files with a header row as one MDS dataset.

    An empty field of a number column is a null (handled by ``on_null``); in a text column it
    is the empty string.

    Args:
        paths: A file or a list of files, read in order; each starts with the header.
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        columns: Column name to encoding; inferred from the Arrow schema when None.
        schema: A ``pyarrow.Schema`` giving column types, instead of inferring them.
        delimiter: The field separator (``"\t"`` for TSV).
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments.

    Returns:
        The number of samples written.

    Example:
        columns = {"text": "str", "label": "int"}
        csv_to_mds("/tmp/raw/train.csv", "s3://bucket/my-ds", columns=columns)
    """
    csv = require("pyarrow.csv", extra="arrow", purpose="Reading CSV files")
    files = _paths(paths)
    convert = csv.ConvertOptions(
        column_types=None if schema is None else dict(zip(schema.names, schema.types, strict=True))
    )

    def reader(path: str) -> Any:
        return csv.open_csv(
            path,
            read_options=csv.ReadOptions(block_size=_BLOCK_BYTES),
            parse_options=csv.ParseOptions(delimiter=delimiter),
            convert_options=convert,
        )

    return arrow_to_mds(
        _batches(files, reader),
        out,
        columns=columns,
        on_null=on_null,
        progress=progress,
        where=f"{len(files)} CSV file(s)",
        **writer_kwargs,
    )


def _paths(paths: Paths) -> list[str]:
    files = (
        [os.fspath(paths)]
        if isinstance(paths, (str, os.PathLike))
        else [os.fspath(path) for path in paths]
    )
    if not files:
        raise ConfigurationError(
            "no files to convert: pass a file path or a non-empty list of them"
        )
    for path in files:
        if not os.path.isfile(path):
            raise ConfigurationError(
                f"{path} is not a file: pass existing files (for a folder, list its files)"
            )
    return files


def _batches(files: list[str], open_reader: Any) -> Iterator[Any]:
    """Every record batch of every file, each cast to the first file's schema."""
    pa = arrow_module()
    schema = None
    for path in files:
        try:
            reader = open_reader(path)
        except pa.ArrowInvalid as exc:
            raise ConfigurationError(
                f"{path} does not read as this kind of file: {exc}; check the file and the "
                "reader options"
            ) from exc
        if schema is None:
            schema = reader.schema
        elif not reader.schema.equals(schema):
            try:
                reader = reader.cast(schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
                raise ConfigurationError(
                    f"{path} reads as {reader.schema}, unlike the first file's {schema}; "
                    f"give schema= to read every file alike"
                ) from exc
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as exc:
                raise ConfigurationError(
                    f"{path}: {exc}; give schema= if a later block has other types"
                ) from exc
            yield batch
