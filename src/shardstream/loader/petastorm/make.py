"""Petastorm's ``make_reader`` and ``make_batch_reader``, over shardstream's Parquet streaming.

Both open the Parquet folder as a :class:`~shardstream.StreamingDataset` (its row groups are
the shards: see docs/parquet.md) and read it through a :class:`~shardstream.StreamingDataLoader`
whose ``collate_fn`` decodes each field by its Petastorm codec
(:class:`~shardstream.loader.petastorm.blocks.DecodeRows`), so the dataset's cache, shuffle,
sharding and resumption are those of any stream. The knobs map as follows:

* ``shuffle_row_groups`` / ``shuffle_rows`` shuffle the rows (across row groups, with the
  dataset's ``py1e``); ``seed`` is the shuffle seed (``None``: shardstream's fixed default,
  so two runs give the same order).
* ``cur_shard`` / ``shard_count`` are the rank and world size, alone: launcher variables and
  torch.distributed are ignored, as Petastorm ignores them. Every row comes once per epoch over
  all shards.
* ``reader_pool_type='process'`` decodes in ``workers_count`` DataLoader worker processes;
  ``'thread'`` and ``'dummy'`` decode in the reading thread, while the dataset's threads fetch
  and read row groups ahead.
* ``num_epochs=None`` loops for ever.

Filters, predicates and the transform run in the reading thread, on the decoded rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from shardstream.dataset.stream import Stream
from shardstream.dataset.stream_data import open_remote, open_stream_data
from shardstream.dataset.streaming import StreamingDataset
from shardstream.dataset.world import shard_topology
from shardstream.errors import ConfigurationError
from shardstream.loader.dataloader import StreamingDataLoader
from shardstream.loader.epoch_loader import ConverterDataLoader
from shardstream.loader.epoch_tail import EpochTail
from shardstream.loader.petastorm.blocks import DecodeRows, Outputs
from shardstream.loader.petastorm.metadata import read_unischema
from shardstream.loader.petastorm.reader import Reader
from shardstream.loader.petastorm.unischema import (
    Unischema,
    UnischemaField,
    as_field,
    from_field,
    infer_unischema,
    select_fields,
)
from shardstream.loader.petastorm.urls import dataset_files
from shardstream.loader.transform_spec import as_transform_spec, transformed_fields
from shardstream.pipeline.policy import ReadPolicy
from shardstream.sampling import Topology
from shardstream.storage import open_store
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.filters import Filters
from shardstream.tables.layout import parse_metadata

__all__ = ["make_batch_reader", "make_reader"]

logger = logging.getLogger(__name__)

_POOLS = ("thread", "process", "dummy")


def make_reader(
    dataset_url: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    schema_fields: Any = None,
    reader_pool_type: str = "thread",
    workers_count: int = 10,
    pyarrow_serialize: bool = False,
    results_queue_size: int = 50,
    seed: int | None = None,
    shuffle_rows: bool = False,
    shuffle_row_groups: bool = True,
    shuffle_row_drop_partitions: int = 1,
    predicate: Any = None,
    rowgroup_selector: Any = None,
    num_epochs: int | None = 1,
    cur_shard: int | None = None,
    shard_count: int | None = None,
    shard_seed: int | None = None,
    cache_type: str | None = "null",
    cache_location: str | None = None,
    cache_size_limit: int | None = None,
    cache_row_size_estimate: int | None = None,
    cache_extra_settings: Mapping[str, Any] | None = None,
    hdfs_driver: str = "libhdfs3",
    transform_spec: Any = None,
    filters: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    zmq_copy_buffers: bool = True,
    filesystem: Any = None,
    convert_early_to_numpy: bool = False,
) -> Reader:
    """A reader of one namedtuple per row, each field decoded by its Petastorm codec.

    Petastorm's arguments, in its order (Petastorm 0.13's signature, so positional calls bind
    as there). The dataset is a Petastorm dataset (its Unischema is
    read from ``_common_metadata``, safely: see docs/petastorm.md) or any Parquet folder (its
    schema is inferred, as Petastorm infers it). Partition folders (``year=2024/``) give
    columns.

    Args:
        dataset_url: The dataset's folder: a local path, ``file://``, ``s3://``, ``gs://``...;
            or one Parquet file, or a list of Parquet file URLs (or paths) on one file system,
            read as a dataset rooted at the folder they share, above its partition folders.
        schema_fields: The fields to read: UnischemaFields, names or regular expressions
            (matching whole names); ``None`` for all.
        reader_pool_type: ``'thread'`` (default) or ``'dummy'`` decode in the reading thread;
            ``'process'`` in ``workers_count`` worker processes.
        workers_count: The worker processes of ``'process'``.
        pyarrow_serialize: Ignored (deprecated in Petastorm).
        results_queue_size: Ignored.
        seed: The shuffle seed (``None``: a fixed default, so runs repeat).
        shuffle_rows: Shuffle the rows.
        shuffle_row_groups: Shuffle the rows (the default: on), across row groups.
        shuffle_row_drop_partitions: Ignored: each row group is read once per epoch.
        predicate: Keeps the rows whose decoded fields it accepts (``in_set``, ``in_lambda``...).
        rowgroup_selector: Not supported (it needs Petastorm's row-group indexes).
        num_epochs: Passes over the data; ``None`` loops for ever.
        cur_shard: This reader's shard, in ``0 .. shard_count - 1``.
        shard_count: How many readers share the rows.
        shard_seed: Ignored (deprecated in Petastorm): the shuffle seed places rows.
        cache_type: ``'null'``, ``None`` or ``'local-disk'``: a remote dataset's row groups are
            always cached on local disk (docs/petastorm.md).
        cache_location: The cache folder of a remote dataset (default: one under
            ``SHARDSTREAM_CACHE_DIR``): new or empty, or one shardstream made (any other is
            refused, as ``local=``); a local dataset is read in place unless one is named.
        cache_size_limit: The most bytes the cache holds (``cache_limit``).
        cache_row_size_estimate: Ignored.
        cache_extra_settings: Ignored.
        hdfs_driver: Ignored (no HDFS here).
        transform_spec: A ``TransformSpec`` whose ``func`` takes and returns a row dict.
        filters: pyarrow DNF filters: files whose partition values cannot pass are skipped,
            and rows that do not pass are dropped.
        storage_options: Not used: credentials come from the environment, as for every
            shardstream store (a warning says so).
        zmq_copy_buffers: Ignored.
        filesystem: Not supported: give a URL.
        convert_early_to_numpy: Ignored: rows are NumPy values as soon as they are decoded.

    Returns:
        A :class:`Reader`: iterate it, in a ``with`` block.

    Raises:
        ConfigurationError: A bad or unsupported argument.
        UnsafePickleError: The stored Unischema names a class that is not Petastorm's.

    Example:
        with make_reader("file:///data/hello_world", num_epochs=1) as reader:
            for row in reader:
                print(row.id, row.image.shape)
    """
    del pyarrow_serialize, results_queue_size, zmq_copy_buffers, hdfs_driver
    del cache_row_size_estimate, cache_extra_settings, convert_early_to_numpy
    return _open(
        dataset_url, schema_fields, reader_pool_type, workers_count, seed,
        shuffle_rows or shuffle_row_groups, shuffle_row_drop_partitions, predicate,
        rowgroup_selector, num_epochs, cur_shard, shard_count, shard_seed, cache_type,
        cache_location, cache_size_limit, transform_spec, filters, storage_options, filesystem,
        batched=False,
    )  # fmt: skip


def make_batch_reader(
    dataset_url_or_urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    schema_fields: Any = None,
    reader_pool_type: str = "thread",
    workers_count: int = 10,
    results_queue_size: int = 50,
    seed: int | None = None,
    shuffle_rows: bool = False,
    shuffle_row_groups: bool = True,
    shuffle_row_drop_partitions: int = 1,
    predicate: Any = None,
    rowgroup_selector: Any = None,
    num_epochs: int | None = 1,
    cur_shard: int | None = None,
    shard_count: int | None = None,
    shard_seed: int | None = None,
    cache_type: str | None = "null",
    cache_location: str | None = None,
    cache_size_limit: int | None = None,
    cache_row_size_estimate: int | None = None,
    cache_extra_settings: Mapping[str, Any] | None = None,
    hdfs_driver: str = "libhdfs3",
    transform_spec: Any = None,
    filters: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    zmq_copy_buffers: bool = True,
    filesystem: Any = None,
    convert_early_to_numpy: bool = False,
) -> Reader:
    """A reader of batches: namedtuples with one NumPy array per field, a row group's worth each.

    Petastorm's arguments, in its order, with :func:`make_reader`'s meanings, except that a
    ``predicate`` gets a pandas DataFrame of its fields and returns one boolean per row, and a
    ``transform_spec``'s ``func`` takes and returns a DataFrame, as in Petastorm. A batch holds
    as many rows as the dataset's largest row group, fewer at an epoch's end and where a
    predicate or filter drops rows. Fields with a Petastorm codec are decoded (Petastorm hands
    them over encoded); arrays of one shape are stacked.

    Args:
        dataset_url_or_urls: See :func:`make_reader`'s ``dataset_url``.
        schema_fields: Names or regular expressions of the fields to read (``None``: all).
        reader_pool_type: See :func:`make_reader`.
        workers_count: See :func:`make_reader`.
        results_queue_size: Ignored.
        seed: See :func:`make_reader`.
        shuffle_rows: See :func:`make_reader`.
        shuffle_row_groups: See :func:`make_reader`.
        shuffle_row_drop_partitions: See :func:`make_reader`.
        predicate: Takes a DataFrame of its fields; returns a boolean Series.
        rowgroup_selector: See :func:`make_reader`.
        num_epochs: See :func:`make_reader`.
        cur_shard: See :func:`make_reader`.
        shard_count: See :func:`make_reader`.
        shard_seed: See :func:`make_reader`.
        cache_type: See :func:`make_reader`.
        cache_location: See :func:`make_reader`.
        cache_size_limit: See :func:`make_reader`.
        cache_row_size_estimate: Ignored.
        cache_extra_settings: Ignored.
        hdfs_driver: Ignored.
        transform_spec: A ``TransformSpec`` whose ``func`` takes and returns a DataFrame.
        filters: See :func:`make_reader`.
        storage_options: See :func:`make_reader`.
        zmq_copy_buffers: Ignored.
        filesystem: See :func:`make_reader`.
        convert_early_to_numpy: Ignored, as in :func:`make_reader`.

    Returns:
        A :class:`Reader` of batches.

    Raises:
        ConfigurationError: A bad or unsupported argument.
        UnsafePickleError: The stored Unischema names a class that is not Petastorm's.

    Example:
        with make_batch_reader("s3://bucket/events", schema_fields=["user_id", "score"]) as reader:
            for batch in reader:
                train_on(batch.user_id, batch.score)
    """
    del results_queue_size, zmq_copy_buffers, hdfs_driver, cache_row_size_estimate
    del cache_extra_settings, convert_early_to_numpy
    return _open(
        dataset_url_or_urls, schema_fields, reader_pool_type, workers_count, seed,
        shuffle_rows or shuffle_row_groups, shuffle_row_drop_partitions, predicate,
        rowgroup_selector, num_epochs, cur_shard, shard_count, shard_seed, cache_type,
        cache_location, cache_size_limit, transform_spec, filters, storage_options, filesystem,
        batched=True,
    )  # fmt: skip


def _open(
    url: Any,
    schema_fields: Any,
    pool: str,
    workers_count: int,
    seed: int | None,
    shuffle: bool,
    drop_partitions: int,
    predicate: Any,
    rowgroup_selector: Any,
    num_epochs: int | None,
    cur_shard: int | None,
    shard_count: int | None,
    shard_seed: int | None,
    cache_type: str | None,
    cache_location: str | None,
    cache_size_limit: int | None,
    transform_spec: Any,
    filters: Any,
    storage_options: Mapping[str, Any] | None,
    filesystem: Any,
    *,
    batched: bool,
) -> Reader:
    """The reader: arguments checked, schema read, dataset and loader made."""
    source, files = dataset_files(url)
    url = source
    workers = _workers(pool, workers_count)
    _check_unsupported(rowgroup_selector, filesystem, storage_options, drop_partitions, shard_seed)
    if cache_type not in (None, "null", "local-disk"):
        raise ConfigurationError(f"cache_type={cache_type!r}; use 'null' or 'local-disk'")
    if num_epochs is not None and (
        not isinstance(num_epochs, int) or isinstance(num_epochs, bool) or num_epochs < 1
    ):
        raise ConfigurationError(f"num_epochs must be None or an integer >= 1, got {num_epochs!r}")
    topology = shard_topology(cur_shard, shard_count) or Topology()  # never the launcher's
    spec = as_transform_spec(transform_spec)
    parsed = None if filters is None else Filters.parse(filters)
    if predicate is not None and not (
        hasattr(predicate, "get_fields") and hasattr(predicate, "do_include")
    ):
        raise ConfigurationError(
            f"predicate must be a Petastorm predicate (get_fields(), do_include()), got "
            f"{predicate!r}"
        )
    # A local folder is read in place unless a cache folder is named: then, as a remote's,
    # its row groups are copied there (and evicted under cache_size_limit).

    def stream(columns: list[str] | None) -> Stream:
        return Stream(remote=source, local=cache_location, format="parquet", columns=columns,
                      filters=filters, files=files)  # fmt: skip

    # The schema comes from the footers, which the stream's open reads (the footer stage,
    # :mod:`shardstream.tables.footers`); the dataset below opens the stream again while these
    # layouts are held, so it takes them parsed: each footer is read once.
    probe = stream(None).resolve(
        download_retry=2, download_timeout=60, validate_hash=None, keep_zip=False,
        download_concurrency=8,
    )  # fmt: skip
    data = open_stream_data(probe, open_remote(probe), allow_unsafe_types=False,
                            policy=ReadPolicy())  # fmt: skip
    assert isinstance(data, ParquetDataset)  # format="parquet"
    layouts = data.layouts
    partitions = dict(zip(data.partitioning.names, data.partitioning.types, strict=True))
    stored = read_unischema(open_store(url), layouts[0].key if layouts else None)
    if stored is None:
        if not layouts:
            raise ConfigurationError(f"{url}: no Parquet file passes filters={filters!r}")
        arrow_schema = parse_metadata(layouts[0].footer, source=layouts[0].key)
        stored = infer_unischema(arrow_schema.schema.to_arrow_schema(), partitions)
        if not batched:
            logger.warning(
                "%s has no Petastorm Unischema (_common_metadata): make_reader reads it with "
                "the schema its Parquet files give", url,
            )  # fmt: skip
    selected = select_fields(stored, schema_fields)
    outputs = _outputs(stored, selected, batched, parsed, predicate, spec)
    if batched and predicate is not None and set(predicate.get_fields()) <= set(partitions):
        outputs = replace(outputs, row_predicate=True)
    sizes = data.shard_sizes
    if not len(sizes):
        logger.warning("%s: no row passes filters=%r; the reader yields nothing", url, filters)
        return Reader(None, outputs, None)
    available = {*layouts[0].columns, *partitions}
    read = _read_fields(stored, selected, parsed, predicate, available)
    batch = int(sizes.max())
    seeded: dict[str, Any] = {} if seed is None else {"shuffle_seed": seed}
    dataset = StreamingDataset(
        streams=[stream([field.name for field in read])], batch_size=batch, shuffle=shuffle,
        cache_limit=cache_size_limit, topology=topology, **seeded,
    )  # fmt: skip
    loader = StreamingDataLoader(
        dataset, batch_size=batch, num_workers=workers, collate_fn=DecodeRows(read)
    )
    tail = EpochTail.of(epoch_size=dataset.epoch_size, batch_size=batch, topology=topology)
    return Reader(ConverterDataLoader(loader, num_epochs, tail), outputs, dataset)


def _outputs(
    stored: Unischema,
    selected: list[str],
    batched: bool,
    filters: Filters | None,
    predicate: Any,
    spec: Any,
) -> Outputs:
    """What the reader makes of each batch of rows, and the schema of what it yields."""
    schema = stored if selected == list(stored.fields) else stored.view(selected)
    if spec is not None:
        fields = transformed_fields([as_field(f) for f in schema.fields.values()], spec)
        edited = {field.name for field in spec.edit_fields}
        schema = Unischema(
            f"{stored.name}_view",
            [
                schema.fields[f.name] if f.name in schema.fields and f.name not in edited
                else from_field(f)
                for f in fields
            ],
        )  # fmt: skip
    return Outputs(selected, schema, batched, filters, predicate, spec)


def _read_fields(
    stored: Unischema,
    selected: list[str],
    filters: Filters | None,
    predicate: Any,
    available: set[str],
) -> list[UnischemaField]:
    """The fields to read: the selected ones, then those the predicate and filters need.

    Raises:
        ConfigurationError: The predicate names a field the schema lacks, or a field is not
            in the files.
    """
    needed = list(selected)
    if predicate is not None:
        unknown = sorted(set(predicate.get_fields()) - set(stored.fields))
        if unknown:
            raise ConfigurationError(
                f"the predicate reads {', '.join(map(repr, unknown))}, which the dataset does "
                f"not have; its fields are {', '.join(stored.fields)}"
            )
        needed += sorted(set(predicate.get_fields()) - set(needed))
    if filters is not None:
        needed += sorted(filters.columns - set(needed))
    missing = [name for name in needed if name not in available]
    if missing:
        raise ConfigurationError(
            f"the dataset's files hold no column {', '.join(map(repr, missing))} (read for the "
            f"schema, predicate or filters); they hold {', '.join(sorted(available))}"
        )
    raw = UnischemaField  # a filter's column outside the schema is read as it is stored
    return [stored.fields.get(name) or raw(name, object, (), None, True) for name in needed]


def _workers(pool: str, workers_count: int) -> int:
    if pool not in _POOLS:
        raise ConfigurationError(f"reader_pool_type={pool!r}; use one of {', '.join(_POOLS)}")
    if not isinstance(workers_count, int) or isinstance(workers_count, bool) or workers_count < 1:
        raise ConfigurationError(f"workers_count must be an integer >= 1, got {workers_count!r}")
    if pool != "process":
        return 0
    # More worker processes than usable cores only contend (torch warns of them): Petastorm's
    # default of 10 becomes the cores this process may use.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores and workers_count > cores:
        logger.info("workers_count=%d: %d worker processes, one per usable core", workers_count,
                    cores)  # fmt: skip
        return cores
    return workers_count


def _check_unsupported(
    rowgroup_selector: Any,
    filesystem: Any,
    storage_options: Mapping[str, Any] | None,
    drop_partitions: int,
    shard_seed: int | None,
) -> None:
    if rowgroup_selector is not None:
        raise ConfigurationError(
            "rowgroup_selector is not supported (it reads Petastorm's row-group indexes): "
            "select rows with a predicate or filters"
        )
    if filesystem is not None:
        raise ConfigurationError(
            "filesystem= is not supported: give the dataset's URL (s3://, gs://, azure://, "
            "file://...); credentials come from the environment"
        )
    if storage_options:
        logger.warning(
            "storage_options are not used: shardstream's stores take credentials and endpoints "
            "from the environment, as everywhere in shardstream"
        )
    if not isinstance(drop_partitions, int) or drop_partitions < 1:
        raise ConfigurationError(
            f"shuffle_row_drop_partitions must be an integer >= 1, got {drop_partitions!r}"
        )
    if drop_partitions > 1 or shard_seed is not None:
        logger.info(
            "shuffle_row_drop_partitions and shard_seed are ignored: rows are shuffled across "
            "row groups, and the shuffle seed places them"
        )
