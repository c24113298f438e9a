"""Tables: Parquet files and Delta tables, read in place or fetched row group by row group.

A Delta table is a folder of Parquet files and a log that names which of them make a version,
so both are one concept here: a file's footer and row groups (:mod:`~.layout`), read by the
footer stage every reader of a table goes through (:mod:`~.footers`), its partition
folders and filters (:mod:`~.partitions`, :mod:`~.filters`), the log and the version it names
(:mod:`~.delta_log`, :mod:`~.delta_snapshot`), the footers cached beside the shards
(:mod:`~.layout_index`), row groups fetched by range and opened (:mod:`~.row_group_files`,
:mod:`~.row_group_view`), and the row groups presented as shards
(:class:`~.dataset.ParquetDataset`, opened for a stream by :mod:`~.streams`).

Above the cache and the format layer, below the datasets and converters that read tables.
"""

from shardstream.tables.dataset import ParquetDataset

__all__ = ["ParquetDataset"]
