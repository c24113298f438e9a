"""Petastorm's Spark converter API over shardstream: ``make_spark_converter`` and its loaders.

``make_spark_converter(df)`` writes the DataFrame once as MDS under a cache folder keyed to its
plan and source files (:mod:`shardstream.converters.spark_cache`) and returns a
:class:`SparkDatasetConverter`. Its ``make_torch_dataloader`` and ``make_tf_dataset`` are
context managers, as in Petastorm, that read the copy through
:class:`~shardstream.StreamingDataset`. The knobs map as follows (docs/petastorm.md has the
table):

* ``batch_size`` is the per-rank batch; ``num_epochs=None`` loops for ever, an int stops after
  that many epochs, each one reshuffled when shuffling.
* ``shuffling_queue_capacity > 0`` (or ``shuffle=True``) shuffles the whole dataset each epoch
  (a seeded global shuffle, not a queue); ``seed`` is the shuffle seed.
* ``workers_count`` is the DataLoader's ``num_workers`` (default 4, as Petastorm's).
* ``cur_shard``/``shard_count`` are the rank and world size, and then alone, as in Petastorm:
  torch.distributed and the launcher's variables are not read. Without them the topology is
  detected from those.
* Every row comes once per epoch over all ranks, the last batch short; ``even_batches=True``
  keeps shardstream's behaviour instead (every rank the same number of whole batches, the
  last one topped up with repeats), which a DDP job needs to avoid a hang.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from shardstream.converters.spark_cache import (
    PARENT_CACHE_DIR_URL_CONF,
    cache_dataframe,
    delete_cached,
)
from shardstream.dataset.streaming import StreamingDataset
from shardstream.dataset.world import shard_topology
from shardstream.errors import ConfigurationError
from shardstream.loader.dataloader import StreamingDataLoader
from shardstream.loader.epoch_loader import ConverterDataLoader
from shardstream.loader.epoch_tail import EpochTail
from shardstream.loader.fields import SparkHint, dataset_columns, fields_of, spark_hints
from shardstream.loader.transform_spec import TransformCollate, as_transform_spec
from shardstream.storage import is_remote

__all__ = [
    "ConverterDataLoader",
    "SparkDatasetConverter",
    "make_spark_converter",
    "register_delete_dir_handler",
]

logger = logging.getLogger(__name__)

#: The most DataLoader workers a converter's loader starts by default (fewer on fewer cores).
DEFAULT_WORKERS = 4
# Petastorm reader arguments that mean nothing here: accepted, logged, ignored.
_IGNORED_READER_KWARGS = frozenset(
    {"reader_pool_type", "results_queue_size", "shuffle_row_groups", "shuffle_row_drop_partitions"}
)


def make_spark_converter(
    df: Any,
    parquet_row_group_size_bytes: int | None = None,
    compression_codec: str | None = None,
    dtype: str | None = "float32",
    *,
    parent_cache_dir_url: str | None = None,
    on_null: str = "fill",
    progress: bool = True,
) -> SparkDatasetConverter:
    """Materialize a Spark DataFrame as MDS in the cache folder (or reuse it) for training.

    The positional arguments are Petastorm's, in its order. The copy is reused by any process
    or job while the DataFrame's analyzed plan and its source files are unchanged, and rebuilt
    when they change; it stays until :meth:`SparkDatasetConverter.delete`. Spark Connect
    DataFrames (Databricks serverless and shared clusters) are keyed by what their server
    tells: the analyzed plan and the source files' sizes and times.

    Args:
        df: A ``pyspark.sql.DataFrame``, classic or Spark Connect.
        parquet_row_group_size_bytes: Petastorm's Parquet row-group size; here the size limit
            of each MDS shard (the unit a reader fetches). Default: the writer's.
        compression_codec: Petastorm's Parquet codec names (``None`` gives zstd,
            ``'uncompressed'`` none, ``gzip``/``deflate`` gz, ``bzip2`` bz2, ``snappy``,
            ``lz4`` zstd) or an MDS compression.
        dtype: ``'float32'`` (default) or ``'float64'`` casts every float and double column,
            arrays and ML vectors included; ``None`` keeps them.
        parent_cache_dir_url: The parent cache folder: a local path, ``file://`` URL or any URL
            the writer publishes to. Default: the Spark conf
            ``petastorm.spark.converter.parentCacheDirUrl``, then
            ``shardstream.spark.converter.parentCacheDirUrl``.
        on_null: ``'fill'`` (default: each type's null as
            :mod:`shardstream.converters.spark_nulls` says, NaN for numbers), ``'error'`` or
            ``'skip'`` (drop such rows).
        progress: Show a bar of the conversion's finished Spark tasks while it materializes
            (the steps are logged at INFO either way).

    Returns:
        The converter.

    Raises:
        ConfigurationError: No cache folder is set, or an option is invalid.

    Example:
        spark.conf.set("petastorm.spark.converter.parentCacheDirUrl", "file:///tmp/cache")
        converter = make_spark_converter(df)
        with converter.make_torch_dataloader(batch_size=64, num_epochs=1) as loader:
            for batch in loader:
                ...
    """
    size = parquet_row_group_size_bytes
    if isinstance(size, str):  # shardstream's earlier order put the cache folder second
        if parent_cache_dir_url is not None:
            raise ConfigurationError(
                f"make_spark_converter's second argument is Petastorm's "
                f"parquet_row_group_size_bytes (an int), got {size!r}"
            )
        warnings.warn(
            "make_spark_converter(df, url) is deprecated: its second argument is Petastorm's "
            "parquet_row_group_size_bytes; pass parent_cache_dir_url=url",
            FutureWarning,
            stacklevel=2,
        )
        parent_cache_dir_url, size = size, None
    cached = cache_dataframe(df, parent_cache_dir_url, compression_codec, dtype,
                             on_null=on_null, size_limit=size, progress=progress)  # fmt: skip
    return SparkDatasetConverter(
        cached.url, cached.rows, key_url=cached.key_url, hints=spark_hints(df.schema)
    )


def _default_workers() -> int:
    """The converter loader's default worker count: 4, or this process's usable cores if fewer."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(DEFAULT_WORKERS, cores or 1))


def register_delete_dir_handler(handler: Callable[[str], None] | None) -> None:
    """Delete converters' copies with ``handler(url)`` instead of the built-in deletion.

    As Petastorm's: for stores where the built-in one refuses (object stores), or to keep a
    record. ``None`` restores the built-in deletion.

    Example:
        register_delete_dir_handler(lambda url: dbutils.fs.rm(url, recurse=True))
    """
    global _delete_dir_handler
    if handler is not None and not callable(handler):
        raise ConfigurationError(f"the delete handler must be callable, got {handler!r}")
    _delete_dir_handler = handler


_delete_dir_handler: Callable[[str], None] | None = None


class SparkDatasetConverter:
    """A DataFrame's MDS copy, with Petastorm's loader factories.

    Made by :func:`make_spark_converter`; the constructor only records where the copy is.

    Args:
        cache_dir_url: The MDS dataset (local path or URL).
        dataset_size: Rows in it.
        key_url: Its cache key's folder (what :meth:`delete` removes; default the dataset).
        hints: What the DataFrame's schema says that MDS does not keep (booleans, array
            ranks), for TensorFlow's element signature.

    Example:
        converter = make_spark_converter(df, parent_cache_dir_url="file:///tmp/cache")
        print(len(converter), converter.cache_dir_url)
        with converter.make_torch_dataloader(batch_size=64, num_epochs=1) as loader:
            ...
        converter.delete()
    """

    PARENT_CACHE_DIR_URL_CONF = PARENT_CACHE_DIR_URL_CONF

    def __init__(
        self,
        cache_dir_url: str,
        dataset_size: int,
        *,
        key_url: str | None = None,
        hints: Mapping[str, SparkHint] | None = None,
    ):
        self.cache_dir_url = cache_dir_url
        self.dataset_size = dataset_size
        self._key_url = key_url or cache_dir_url
        self._hints = dict(hints or {})

    def __len__(self) -> int:
        return self.dataset_size

    def __repr__(self) -> str:
        return f"SparkDatasetConverter({self.cache_dir_url!r}, rows={self.dataset_size})"

    @contextlib.contextmanager
    def make_torch_dataloader(
        self,
        batch_size: int = 32,
        num_epochs: int | None = None,
        workers_count: int | None = None,
        shuffling_queue_capacity: int = 0,
        data_loader_fn: Any = None,
        **petastorm_reader_kwargs: Any,
    ) -> Iterator[ConverterDataLoader]:
        """A loader of dicts of tensors, one key per column, as a context manager.

        Args:
            batch_size: Rows per batch (per rank).
            num_epochs: Epochs to yield; ``None`` loops for ever.
            workers_count: The DataLoader's worker processes (default: 4, or the cores this
                process may use when fewer, so torch's DataLoader does not warn).
            shuffling_queue_capacity: Above 0, shuffle every epoch (globally).
            data_loader_fn: Not supported (must be ``None``).
            **petastorm_reader_kwargs: ``transform_spec`` (a :class:`TransformSpec`, run in the
                workers on each batch as a pandas DataFrame), ``cur_shard``, ``shard_count``,
                ``seed``, ``shuffle``, ``even_batches``, ``ranks_per_node``, and any
                :class:`~shardstream.StreamingDataset`
                argument (``cache_limit``, ``shuffle_algo``, ``local``...); Petastorm's
                ``reader_pool_type``, ``results_queue_size``, ``shuffle_row_groups`` and
                ``shuffle_row_drop_partitions`` are ignored.

        Yields:
            A :class:`ConverterDataLoader`; its worker processes stop when the block ends.

        Raises:
            ConfigurationError: An invalid or unsupported argument.
        """
        if data_loader_fn is not None:
            raise ConfigurationError(
                "data_loader_fn is not supported: the loader is a StreamingDataLoader "
                "(torch's DataLoader); build your own over StreamingDataset if you need to"
            )
        workers = _default_workers() if workers_count is None else workers_count
        options = dict(petastorm_reader_kwargs)
        spec = as_transform_spec(options.pop("transform_spec", None))
        dataset, tail = self._dataset(batch_size, num_epochs, shuffling_queue_capacity, options)
        collate: dict[str, Any] = {}
        if spec is not None:
            columns = dataset_columns(dataset)
            collate["collate_fn"] = TransformCollate(spec, fields_of(columns, self._hints), columns)
        loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers, **collate)
        result = ConverterDataLoader(loader, num_epochs, tail)
        try:
            yield result
        finally:
            result.close()

    @contextlib.contextmanager
    def make_tf_dataset(
        self,
        batch_size: int | None = None,
        prefetch: int | None = None,
        num_epochs: int | None = None,
        workers_count: int | None = None,
        shuffling_queue_capacity: int | None = None,
        **petastorm_reader_kwargs: Any,
    ) -> Iterator[Any]:
        """A ``tf.data.Dataset`` of namedtuples of batched tensors, as a context manager.

        Each element has one attribute per column (``x.features``, ``x.label``), as Petastorm's.
        Built with ``tf.data.Dataset.from_generator`` over the same samples the torch loader
        reads; arguments as :meth:`make_torch_dataloader` (``batch_size`` defaults to 32,
        ``prefetch`` to ``tf.data.AUTOTUNE``; ``transform_spec`` runs on each batch in the
        generator). Samples are decoded in the generator's thread (the dataset's download
        threads fetch ahead), so ``workers_count`` is unused.

        Yields:
            The ``tf.data.Dataset``.

        Raises:
            MissingDependencyError: TensorFlow is not installed (``shardstream[tf]``).
            ConfigurationError: A column TensorFlow cannot hold, or a bad argument.
        """
        from shardstream.loader.tf_dataset import tf_dataset

        del workers_count  # one generator thread: see the docstring
        batch = 32 if batch_size is None else batch_size
        options = dict(petastorm_reader_kwargs)
        spec = as_transform_spec(options.pop("transform_spec", None))
        dataset, tail = self._dataset(batch, num_epochs, shuffling_queue_capacity or 0, options)
        yield tf_dataset(dataset, batch, num_epochs, tail, prefetch, hints=self._hints,
                         transform_spec=spec)  # fmt: skip

    def delete(self) -> None:
        """Delete the materialized copy (local cache folders, or any with a handler).

        With a handler set by :func:`register_delete_dir_handler`, it deletes the copy's folder.

        Raises:
            ConfigurationError: The copy is on an object store; remove it with the store's
                tools.
        """
        if _delete_dir_handler is not None:
            _delete_dir_handler(self._key_url)
        else:
            delete_cached(self._key_url)
        logger.info("deleted the DataFrame's MDS copy at %s", self._key_url)

    def _dataset(
        self,
        batch_size: int,
        num_epochs: int | None,
        shuffling_queue_capacity: int,
        kwargs: Mapping[str, Any],
    ) -> tuple[StreamingDataset, EpochTail | None]:
        """The dataset to read, and the tail to cut from each epoch (None: keep padding)."""
        if num_epochs is not None and (
            not isinstance(num_epochs, int) or isinstance(num_epochs, bool) or num_epochs < 1
        ):
            raise ConfigurationError(
                f"num_epochs must be None or an integer >= 1, got {num_epochs!r}"
            )
        options = dict(kwargs)
        for name in sorted(_IGNORED_READER_KWARGS & options.keys()):
            logger.info("ignoring Petastorm's %s=%r: it has no meaning here", name, options[name])
            del options[name]
        cur_shard, shard_count = options.pop("cur_shard", None), options.pop("shard_count", None)
        ranks_per_node = options.pop("ranks_per_node", None)
        shard = shard_topology(cur_shard, shard_count, ranks_per_node)
        # As Petastorm: a shard given is placed by it alone, never by the launcher's variables.
        placement: dict[str, Any] = (
            {"ranks_per_node": ranks_per_node} if shard is None else {"topology": shard}
        )
        seed = options.pop("seed", None)
        shuffle = bool(options.pop("shuffle", False) or shuffling_queue_capacity > 0)
        even_batches = bool(options.pop("even_batches", False))
        if seed is not None:
            options["shuffle_seed"] = seed
        source = "remote" if is_remote(self.cache_dir_url) else "local"
        options[source] = self.cache_dir_url  # a local copy is read in place
        dataset = StreamingDataset(
            **options, **placement, batch_size=batch_size, shuffle=shuffle
        )  # fmt: skip
        if even_batches:
            return dataset, None
        topology = dataset.topology  # replica groups count as one rank, as the dataset sees it
        return dataset, EpochTail.of(
            epoch_size=dataset.epoch_size, batch_size=batch_size, topology=topology
        )
