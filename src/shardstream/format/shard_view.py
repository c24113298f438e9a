"""The shard-view protocol: what a reader needs of one open shard, whatever its format.

Every format's view implements it: an MDS shard mapped or read into memory
(:class:`~shardstream.format.mds.MDSShardView`), an MDS shard read with ``pread``
(:class:`~shardstream.format.mds_file.MDSFileView`), a JSON/CSV/TSV/XSV shard
(:class:`~shardstream.format.split.SplitShardView`) and a Parquet row group
(:class:`~shardstream.tables.row_group_view.RowGroupView`). Readers above the format layer use
these members only, never the concrete class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from shardstream.format.batch_decode import ColumnValues

if TYPE_CHECKING:
    from shardstream.format.mds_file import SampleFile

__all__ = ["ShardView", "columns_from_samples"]


class ShardView(Protocol):
    """Random access to the samples of one open shard, one at a time or as columns."""

    #: The shard's file (and row group), named in errors.
    source: str

    @property
    def names(self) -> list[str]:
        """The columns, in the order :meth:`read_columns` returns them."""

    @property
    def held_bytes(self) -> int:
        """Bytes the open view holds: its mapped or open file, or its decoded data."""

    @property
    def in_memory(self) -> bool:
        """Whether the view holds the shard's bytes in this process's own memory.

        ``False`` for a shard mapped from, or read with ``pread`` from, a file of the node's
        cache, which another process can read as cheaply.
        """

    @property
    def grouped_decode(self) -> bool:
        """Whether decoding many samples in one :meth:`read_columns` call saves time."""

    @property
    def reads_runs(self) -> bool:
        """Whether shuffled samples are read from :meth:`sample_file` whatever is open.

        ``True`` for a shard of small samples read with ``pread`` (data read in place is never
        mapped): there is no mapping to read them from, and a read a run (ahead, in a thread)
        costs them less than a read a sample.
        """

    def __len__(self) -> int:
        """Samples in the shard."""

    def get(self, index: int) -> dict[str, Any]:
        """Sample ``index`` (``0 <= index < len``) as ``{column: value}``."""

    def read_columns(self, indices: Sequence[int], *, views: bool = False) -> list[ColumnValues]:
        """Samples ``indices`` as one entry per column of :attr:`names`.

        An entry is a list of values, or one array whose rows are the values (a column of
        fixed-shape numeric arrays, or of numbers: a 1-D array). With ``views``, ``bytes``
        values may come as read-only memoryviews of the mapped shard, valid until
        :meth:`release`.
        """

    def sample_file(self) -> SampleFile | None:
        """The shard's file open for reading runs of samples into one buffer, if it can be.

        Only an MDS shard has one: a mapped one, whose shuffled samples can then be read
        without touching (and so without counting in resident memory) the mapping's pages,
        and one read with ``pread`` that :attr:`reads_runs`.
        """

    def let_go(self, first: int, stop: int) -> None:
        """Samples ``first`` to ``stop - 1`` are read for good: unmap their pages, if mapped."""

    def release(self) -> None:
        """Drop the view's hold on the shard's bytes (values handed out stay valid)."""


def columns_from_samples(view: ShardView, indices: Sequence[int]) -> list[ColumnValues]:
    """``read_columns`` from a view's per-sample ``get``, for formats without a batch decoder."""
    samples = [view.get(index) for index in indices]
    names = list(samples[0]) if samples else view.names
    return [[sample[name] for sample in samples] for name in names]
