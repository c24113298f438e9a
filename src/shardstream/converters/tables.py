"""In-memory tables to MDS: Arrow tables and streams, pandas DataFrames, Hugging Face datasets.

All three go through :func:`arrow_to_mds`, so they share the type mapping of
:mod:`shardstream.converters.arrow_types` and the null policy of
:mod:`shardstream.converters.arrow_samples`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from shardstream._optional import require
from shardstream.converters.arrow_samples import OnNull
from shardstream.converters.arrow_types import arrow_module
from shardstream.converters.batches import prepare_mds_kwargs, write_batches
from shardstream.errors import ConfigurationError

__all__ = ["arrow_to_mds", "hf_to_mds", "pandas_to_mds"]

logger = logging.getLogger(__name__)

DEFAULT_BATCH_ROWS = 8192


def arrow_to_mds(
    data: Any,
    out: Any,
    *,
    columns: Mapping[str, str] | None = None,
    on_null: OnNull = "error",
    progress: bool = True,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    where: str = "the table",
    total_rows: int | None = None,
    **writer_kwargs: Any,
) -> int:
    """Write an Arrow table, record batch, ``RecordBatchReader`` or batch iterable as MDS.

    Args:
        data: A ``pyarrow.Table`` or ``RecordBatch``, a ``pyarrow.RecordBatchReader``, or an
            iterable of record batches sharing one schema (then give ``columns`` or let the
            first batch's schema decide).
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        columns: Column name to encoding; inferred from the schema when None.
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        batch_rows: Rows converted at a time from a table.
        where: What the rows are, for error messages.
        total_rows: The row count of a stream, for the progress bar.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments (``compression``
            defaults to ``"zstd"``, ``size_limit``, ``hashes``, ``exist_ok``, ...).

    Returns:
        The number of samples written.

    Raises:
        ConfigurationError: No rows, or a column type with no encoding.
        SampleEncodingError: A null (with ``on_null="error"``) or a value its encoding cannot
            hold, naming the column and row.

    Example:
        import pyarrow.parquet as pq
        table = pq.read_table("/tmp/raw/train.parquet")
        arrow_to_mds(table, "s3://bucket/my-ds", size_limit="128mb")
    """
    pa = arrow_module()
    total = total_rows
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        total = data.num_rows
        schema = data.schema
        batches: Iterable[Any] = (
            data.to_batches(max_chunksize=batch_rows) if isinstance(data, pa.Table) else [data]
        )
    elif isinstance(data, pa.RecordBatchReader):
        schema, batches = data.schema, data
    else:
        iterator = iter(data)
        first = next(iterator, None)
        if first is None:
            raise ConfigurationError(
                f"{where} has no record batches to write: pass a non-empty table or iterable"
            )
        schema, batches = first.schema, _chain(first, iterator)
    kwargs = prepare_mds_kwargs({**writer_kwargs, "out": out, "columns": columns}, schema)
    from tqdm.auto import tqdm

    with tqdm(total=total, unit="row", desc="to MDS", disable=not progress) as bar:
        summary = write_batches(batches, schema, kwargs, on_null=on_null, where=where, progress=bar)
    if not summary.samples:
        raise ConfigurationError(
            f"{where} has no rows to write (after skipping nulls): check the input, or fill "
            "its nulls instead of on_null='skip'"
        )
    return summary.samples


def pandas_to_mds(
    dataframe: Any,
    out: Any,
    *,
    columns: Mapping[str, str] | None = None,
    on_null: OnNull = "error",
    progress: bool = True,
    preserve_index: bool = False,
    **writer_kwargs: Any,
) -> int:
    """Write a pandas DataFrame as MDS, through Arrow (``pyarrow.Table.from_pandas``).

    pandas' missing values (``None``, ``NaN`` in float columns, ``NaT``) are nulls, handled
    by ``on_null``.

    Args:
        dataframe: A ``pandas.DataFrame``.
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        columns: Column name to encoding; inferred from the Arrow schema when None.
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        preserve_index: Also write the DataFrame's index as a column.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments.

    Returns:
        The number of samples written.

    Example:
        import pandas as pd
        df = pd.DataFrame({"text": ["a", "b", "c"], "label": [0, 1, 0]})
        pandas_to_mds(df, "/tmp/my-ds", columns={"text": "str", "label": "int"})
    """
    pa = arrow_module()
    table = pa.Table.from_pandas(dataframe, preserve_index=preserve_index)
    return arrow_to_mds(
        table.replace_schema_metadata(None),
        out,
        columns=columns,
        on_null=on_null,
        progress=progress,
        where="the DataFrame",
        **writer_kwargs,
    )


def hf_to_mds(
    dataset: Any,
    out: Any,
    *,
    columns: Mapping[str, str] | None = None,
    on_null: OnNull = "error",
    progress: bool = True,
    batch_rows: int = 1000,
    **writer_kwargs: Any,
) -> int:
    """Write a Hugging Face ``datasets.Dataset`` as MDS, a batch of Arrow rows at a time.

    The dataset's own order is kept (``select``, ``shuffle`` and ``filter`` included). An
    ``Image`` feature becomes the image file's bytes (encoding ``bytes`` by default; name
    ``jpeg``, ``png`` or ``pil`` in ``columns`` to decode it on read, or at write for
    ``pil``); a ``ClassLabel`` stays its integer.

    Args:
        dataset: A ``datasets.Dataset`` (not an ``IterableDataset`` or ``DatasetDict``: pick
            a split first).
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        columns: Column name to encoding; inferred from the Arrow schema when None.
        on_null: ``"error"`` (default) or ``"skip"`` rows holding a null.
        progress: Show a progress bar of rows.
        batch_rows: Rows read at a time.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments.

    Returns:
        The number of samples written.

    Example:
        import datasets
        dataset = datasets.load_dataset("imdb", split="train")
        hf_to_mds(dataset, "s3://bucket/imdb-train", columns={"text": "str", "label": "int"})
    """
    datasets = require("datasets", extra="hf", purpose="Converting Hugging Face datasets")
    if not isinstance(dataset, datasets.Dataset):
        raise ConfigurationError(
            f"hf_to_mds takes a datasets.Dataset, got {type(dataset).__name__}; for a "
            f"DatasetDict pick a split (dataset['train'])"
        )
    images = [
        name for name, feature in dataset.features.items() if isinstance(feature, datasets.Image)
    ]
    batches = (
        batch
        for table in dataset.with_format("arrow").iter(batch_size=batch_rows)
        for batch in _image_bytes(table, images).to_batches()
    )
    return arrow_to_mds(
        batches,
        out,
        columns=columns,
        on_null=on_null,
        progress=progress,
        where="the Hugging Face dataset",
        total_rows=len(dataset),
        **writer_kwargs,
    )


def _image_bytes(table: Any, images: list[str]) -> Any:
    """Replace each image struct column (``bytes``, ``path``) by the file's bytes."""
    pa = arrow_module()
    for name in images:
        column = table.column(name).combine_chunks()
        data = column.field("bytes").to_pylist()
        paths = column.field("path").to_pylist()
        valid = column.is_valid().to_pylist()
        values = []
        for value, path, ok in zip(data, paths, valid, strict=True):
            if ok and value is None and path:
                with open(path, "rb") as handle:
                    value = handle.read()
            values.append(value if ok else None)
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.array(values, pa.binary()))
    return table


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
