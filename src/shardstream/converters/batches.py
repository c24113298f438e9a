"""Writing a stream of Arrow record batches into one MDS dataset: the converters' common path.

Every converter in this package ends here: Spark tasks (one call per partition), pandas,
Arrow, Hugging Face datasets, JSONL and CSV files. The writer's keyword arguments follow the
reference's ``mds_kwargs``: ``out`` is required, ``columns`` is inferred from the Arrow schema
when absent, and ``compression`` defaults to ``"zstd"``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardstream.converters.arrow_samples import BatchConverter, OnNull
from shardstream.converters.arrow_types import infer_columns
from shardstream.errors import ConfigurationError
from shardstream.writer.mds_writer import MDSWriter

__all__ = ["DEFAULT_COMPRESSION", "WriteSummary", "prepare_mds_kwargs", "write_batches"]

logger = logging.getLogger(__name__)

DEFAULT_COMPRESSION = "zstd"

# A per-batch function of the caller's: a pandas DataFrame in, sample dicts out.
BatchUDF = Callable[..., Iterable[Mapping[str, Any]]]


@dataclass(frozen=True)
class WriteSummary:
    """What one call of :func:`write_batches` wrote.

    Attributes:
        samples: Samples written.
        skipped: Rows dropped for holding a null (``on_null="skip"``).
    """

    samples: int
    skipped: int


def prepare_mds_kwargs(
    mds_kwargs: Mapping[str, Any] | None,
    schema: Any,
    *,
    has_udf: bool = False,
) -> dict[str, Any]:
    """Check ``mds_kwargs`` and fill in ``columns`` and ``compression``.

    Args:
        mds_kwargs: Keyword arguments of :class:`~shardstream.MDSWriter`; ``out`` is required.
        schema: The ``pyarrow.Schema`` of the data, to infer ``columns`` from.
        has_udf: A UDF makes the samples, so ``columns`` must be given (the schema says
            nothing about its output).

    Returns:
        A new dict with ``columns`` and ``compression`` set.

    Raises:
        ConfigurationError: ``out`` is missing, or ``columns`` is missing with a UDF.
    """
    kwargs = dict(mds_kwargs or {})
    if not kwargs.get("out"):
        raise ConfigurationError("mds_kwargs must name the destination: mds_kwargs={'out': ...}")
    if "compression" not in kwargs:
        logger.debug("compression not given: using %r", DEFAULT_COMPRESSION)
        kwargs["compression"] = DEFAULT_COMPRESSION
    if not kwargs.get("columns"):
        if has_udf:
            raise ConfigurationError(
                "with udf_iterable, mds_kwargs must give the columns the UDF yields, "
                "e.g. {'out': ..., 'columns': {'text': 'str', 'label': 'int32'}}"
            )
        kwargs["columns"] = infer_columns(schema)
    return kwargs


def write_batches(
    batches: Iterable[Any],
    schema: Any,
    writer_kwargs: Mapping[str, Any],
    *,
    on_null: OnNull = "error",
    where: str = "the input",
    udf_iterable: BatchUDF | None = None,
    udf_kwargs: Mapping[str, Any] | None = None,
    progress: Any = None,
) -> WriteSummary:
    """Write record batches into one MDS dataset with :class:`~shardstream.MDSWriter`.

    The writer starts with the first sample, so nothing is written (not even an index) when
    there are no samples. The index is published only when every batch was written: an error
    leaves the shards written so far without an ``index.json``.

    Args:
        batches: ``pyarrow.RecordBatch`` objects (or tables) of ``schema``.
        schema: Their ``pyarrow.Schema``.
        writer_kwargs: Keyword arguments of ``MDSWriter`` (``out`` and ``columns`` included,
            as :func:`prepare_mds_kwargs` returns them).
        on_null: ``"error"`` or ``"skip"`` (see :mod:`shardstream.converters.arrow_samples`).
        where: Where the rows come from, for messages.
        udf_iterable: If given, called as ``udf_iterable(batch.to_pandas(), **udf_kwargs)``
            per batch; the dicts it yields are written as they are (``on_null`` does not apply).
        udf_kwargs: Keyword arguments of ``udf_iterable``.
        progress: A tqdm bar to advance by the rows of each batch, or None.

    Returns:
        What was written.
    """
    converter = None
    if udf_iterable is None:
        converter = BatchConverter(schema, writer_kwargs["columns"], on_null=on_null, where=where)
    writer: MDSWriter | None = None
    samples = first_row = 0
    # The writer finishes (publishing its index) on success and aborts on an error.
    with contextlib.ExitStack() as stack:
        for batch in batches:
            rows: Iterable[Mapping[str, Any]]
            if converter is None:
                assert udf_iterable is not None
                rows = udf_iterable(batch.to_pandas(), **(udf_kwargs or {}))
            else:
                encoded = converter.encode(batch, first_row)
                if isinstance(encoded, dict):  # whole columns, already encoded
                    if writer is None:
                        writer = stack.enter_context(MDSWriter(**writer_kwargs))
                    writer.write_columns(encoded)
                    samples += len(next(iter(encoded.values())))
                    encoded = []
                rows = encoded
            for sample in rows:
                if writer is None:
                    writer = stack.enter_context(MDSWriter(**writer_kwargs))
                writer.write(sample)
                samples += 1
            first_row += batch.num_rows
            if progress is not None:
                progress.update(batch.num_rows)
    skipped = converter.skipped if converter is not None else 0
    if skipped:
        logger.info("%s: skipped %d rows holding a null (on_null='skip')", where, skipped)
    return WriteSummary(samples=samples, skipped=skipped)
