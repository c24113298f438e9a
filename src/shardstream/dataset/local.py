"""``LocalDataset``: random access by sample id to an MDS dataset on local disk.

It reads as the pipeline reads a sample at a time: ``ds[i]`` and iteration are plans of one
id a step, located and decoded by the locate stage (:mod:`shardstream.pipeline.locate`) over
this dataset's own open shards.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from shardstream.cache.shard_files import ShardFiles
from shardstream.dataset.indexing import select
from shardstream.errors import IndexFormatError, ShardNotFoundError
from shardstream.format.index import INDEX_BASENAME, ShardEntry, parse_index, safe_basename
from shardstream.format.mds import MDSSchema
from shardstream.format.shard_view import ShardView
from shardstream.pipeline.locate import Getter, Locate
from shardstream.pipeline.plan import IdPlan
from shardstream.pipeline.policy import ReadPolicy

__all__ = ["LocalDataset", "check_empty_shards"]


class LocalDataset:
    """A map-style dataset over a local MDS dataset (``index.json`` plus shards).

    Shards are opened on first use: read whole up to 8 MiB, or when the dataset's shards of
    small samples total at most the policy's ``in_place_whole_bytes``; else read with
    ``pread`` (the folder is read in place, and another process may cut a file short while it
    is open: a mapped file would then kill the process with ``SIGBUS``); compressed shards are
    decompressed once into ``cache_dir``, and those copies are memory-mapped. The dataset
    folder is only read, never written to (it may be read-only). ``len(ds)`` is the total
    sample count, ``ds[i]`` a sample dict, and ``ds[a:b]`` or ``ds[[i, j]]`` a list of them.
    Works as a map-style dataset for ``torch.utils.data.DataLoader``. Nothing is read until
    first use.

    Args:
        local: The dataset folder.
        split: A sub-folder of ``local`` holding the split's ``index.json``.
        cache_dir: Where compressed shards are decompressed, in a sub-folder ``split`` if
            given (default: a folder of this dataset's own under ``SHARDSTREAM_CACHE_DIR``,
            default ``$TMPDIR/shardstream-<uid>``, named after the folder's real path and its
            ``index.json``; made when a compressed shard is first read).
        validate_hash: Check each shard file against this digest from the index when first opened.
        allow_unsafe_types: Allow reading ``pkl`` columns, which can execute code.
        zero_copy: Return ``bytes`` columns as read-only memoryviews instead of ``bytes``
            copies: into the memory-mapped shard for a decompressed copy (no copy per sample,
            which matters for large values; a view keeps its shard mapped while it lives),
            into the bytes read for a shard read in place.
        entries: The index, already parsed from this folder's ``index.json`` (it is not read
            again).
        policy: How shard files are opened (its ``zero_copy`` replaces ``zero_copy``).
        check_empty: Open the shards the index says hold no samples when the index is loaded
            (``check_empty_shards``). A reader whose shard files are fetched on demand
            passes ``False`` and checks them through its cache.

    Example:
        ds = LocalDataset("/tmp/my-ds")
        print(len(ds), ds[0]["label"])
        first_ten = ds[:10]
    """

    def __init__(
        self,
        local: str | os.PathLike[str],
        split: str | None = None,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        validate_hash: str | None = None,
        allow_unsafe_types: bool = False,
        zero_copy: bool = False,
        entries: Sequence[ShardEntry] | None = None,
        policy: ReadPolicy | None = None,
        check_empty: bool = True,
    ) -> None:
        root = os.fspath(local)
        if split:
            root = os.path.join(root, safe_basename(split, where="split"))
        cache_root = os.fspath(cache_dir) if cache_dir is not None else None
        if cache_root is not None and split:
            cache_root = os.path.join(cache_root, split)
        policy = policy or ReadPolicy(zero_copy=zero_copy)
        self._policy = policy
        self._files = ShardFiles(root, cache_root, validate_hash, policy=policy)
        self._allow_unsafe_types = allow_unsafe_types
        self._lock = threading.Lock()
        self._entries: list[ShardEntry] | None = None
        self._schemas: list[MDSSchema | None] = []
        self._starts = np.zeros(1, np.int64)
        self._start_list: list[int] = [0]
        self._total = 0  # known once the index is loaded
        # Each open shard's sample getter (view.get), which the locate stage looks up.
        self._getters: list[Getter | None] = []
        self._views: list[ShardView | None] = []
        # The locate stage's read of a one-id plan (made when the index is loaded).
        self._read: Callable[[int], dict[str, Any]] = self._read_after_load
        self._parsed = None if entries is None else list(entries)
        self._check_empty = check_empty
        # The MDS data files read in place, in all: the policy reads them whole up to a bound.
        self._shared_bytes: int | None = None
        self._whole = True  # that bound is weighed (read_whole_in_place)
        self._held: list[int] | None = None  # held_for_workers, once the index is loaded

    @property
    def zero_copy(self) -> bool:
        """Whether ``bytes`` columns of mapped shards come as memoryviews of the mappings."""
        return self._files.zero_copy

    @property
    def root(self) -> str:
        """The folder holding ``index.json``."""
        return self._files.root

    @property
    def shards(self) -> list[ShardEntry]:
        """The shard entries of ``index.json``."""
        return list(self._load())

    @property
    def size(self) -> int:
        """The number of samples (the same as ``len``)."""
        return len(self)

    def __len__(self) -> int:
        self._load()
        return int(self._starts[-1])

    @overload
    def __getitem__(self, key: int | np.integer[Any]) -> dict[str, Any]: ...
    @overload
    def __getitem__(
        self, key: slice | Sequence[int] | np.ndarray[Any, Any]
    ) -> list[dict[str, Any]]: ...

    def __getitem__(self, key: Any) -> Any:
        """Return one sample by id, or a list of samples for a slice or a sequence of ids.

        Sequences may nest (``ds[[[0, 1], [2]]]``, a 2-d array): the lists nest alike.

        Raises:
            SampleKeyError: ``key`` is not an id, a slice or a sequence of ids (a
                ``TypeError``, and a ``ValueError`` as in mosaicml-streaming).
            IndexError: An id is out of range.
        """
        if type(key) is int and 0 <= key < self._total:  # the usual key: a one-id plan
            return self._read(key)
        return select(key, len(self), self.get_item)

    def get_item(self, sample_id: int) -> dict[str, Any]:
        """Return the sample with id ``sample_id`` (negative ids count from the end).

        Raises:
            IndexError: The id is out of range.
        """
        if self._entries is None:
            self._load()
        starts = self._start_list
        total = starts[-1]
        index = sample_id + total if sample_id < 0 else sample_id
        if not 0 <= index < total:
            raise IndexError(f"sample id {sample_id} is out of range for {total} samples")
        return self._read(index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every sample in id order: a plan of each id in turn, read by the locate stage."""
        self._load()
        plan = IdPlan(range(self._total))
        yield from map(self._locate_stage(plan).read, plan)

    @property
    def shard_sizes(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Samples in each shard, in index order."""
        self._load()
        return np.diff(self._starts)

    def shard_view(self, shard: int) -> ShardView:
        """Random access to shard ``shard``'s samples by their index within it (opens it).

        Raises:
            ShardNotFoundError: The shard's file is missing.
        """
        if self._entries is None:
            self._load()
        view = self._views[shard]
        if view is None:
            view = self._open(shard)
        return view

    def first_view(self, shard: int) -> ShardView | None:
        """A view of ``shard`` for an epoch's first batch, not kept (``None``: :meth:`shard_view`).

        A shard that is read whole only because this dataset, read in place, is small
        (``ReadPolicy.in_place_whole_bytes``) and is not open yet: a first batch reads its
        samples with ``pread`` rather than wait for whole shards, which are opened behind it.

        Raises:
            ShardNotFoundError, ShardFormatError: As :meth:`shard_view`.
        """
        if self._entries is None:
            self._load()
        assert self._entries is not None
        entry = self._entries[shard]
        if self._views[shard] is not None or not self._files.whole_in_place(entry, self._shared()):
            return None
        return self._files.open(entry, self._schemas[shard])  # its size not given: pread

    def read_whole_in_place(self, whole: bool) -> None:
        """Whether shards opened from now on may be read whole as the dataset is small.

        ``False`` in a DataLoader worker that hands batches over by id: the loader's process
        reads them (``Route.read_whole``).
        """
        self._whole = whole

    def held_for_workers(self) -> list[int]:
        """The shards a loader's process holds for the DataLoader workers it forks.

        Those the policy holds (``ReadPolicy.holds_for_workers``): shards of this dataset,
        read in place and small, that every process reads whole. None of a dataset read from
        a cache's copies, or of compressed shards.
        """
        if self._held is None:
            entries, shared = self._load(), self._shared_bytes
            holds = self._policy.holds_for_workers
            self._held = [
                shard
                for shard, entry in enumerate(entries)
                if shared is not None
                and entry.format == "mds"
                and entry.zip_data is None
                and holds(entry.raw_data.bytes, entry.samples, shared_bytes=shared)
            ]
        return self._held

    def changed(self, shard: int) -> bool:
        """Whether shard ``shard`` is open from a whole read its file no longer matches.

        A shard read whole in place holds what its file held then; the file rewritten or cut
        short since (``ShardFiles.changed_since_read``), the bytes held are not the dataset's.
        """
        if self._entries is None or self._views[shard] is None:
            return False
        return self._files.changed_since_read(self._entries[shard])

    def _shared(self) -> int | None:
        return self._shared_bytes if self._whole else None

    def schema(self, shard: int) -> MDSSchema | None:
        """Shard ``shard``'s columns (``None`` for a shard of another format than MDS)."""
        if self._entries is None:
            self._load()
        return self._schemas[shard]

    def release(self, shard: int) -> None:
        """Unmap one shard (decoded values stay valid); it is mapped again on next use."""
        with self._lock:
            if self._views:
                self._views[shard] = None
                self._getters[shard] = None

    def close(self) -> None:
        """Release the shards' memory maps (arrays already decoded stay valid)."""
        with self._lock:
            # In place: the locate stage holds these lists.
            self._views[:] = [None] * len(self._views)
            self._getters[:] = [None] * len(self._views)

    def __enter__(self) -> LocalDataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps do not pickle; each process (DataLoader worker) maps the shards again.
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_views"] = [None] * len(self._views)
        state["_getters"] = [None] * len(self._views)
        state["_read"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        loaded = self._entries is not None
        self._read = self._locate_stage(IdPlan()).read if loaded else self._read_after_load

    def _read_after_load(self, sample_id: int) -> dict[str, Any]:
        self._load()
        return self._read(sample_id)

    def _locate_stage(self, plan: IdPlan) -> Locate:
        """The locate stage over this dataset's open shards, reading ``plan``."""
        return Locate(plan, self._start_list, self._getters, self._open)

    def _load(self) -> list[ShardEntry]:
        if self._entries is not None:
            return self._entries
        path = os.path.join(self.root, INDEX_BASENAME)
        entries = self._parsed if self._parsed is not None else _read_index(path, self.root)
        self._parsed = None
        _check_decompressed_names(entries, source=path)
        schemas: list[MDSSchema | None] = []
        shared: dict[tuple[tuple[str, str], ...], MDSSchema] = {}  # one per distinct column set
        last: tuple[object, object, MDSSchema] | None = None  # the parser shares equal columns
        for number, entry in enumerate(entries):
            if entry.format != "mds":
                schemas.append(None)
                continue
            if last is not None and entry.columns is last[0] and entry.column_sizes is last[1]:
                schemas.append(last[2])  # as the entry before: checked already
                continue
            key = tuple(entry.columns.items())
            schema = shared.get(key)
            if schema is None:
                schema = shared[key] = MDSSchema(entry.columns, sort=False)
                schema.check_safe(self._allow_unsafe_types, source=f"{path}, shard {number}")
            if list(schema.sizes) != list(entry.column_sizes):
                raise IndexFormatError(
                    f"{path}, shard {number}: column_sizes {list(entry.column_sizes)} disagree "
                    f"with the encodings {list(entry.columns.values())}"
                )
            schemas.append(schema)
            last = (entry.columns, entry.column_sizes, schema)
        if self._check_empty:
            check_empty_shards(
                entries, lambda shard: self._files.open(entries[shard], schemas[shard]).release()
            )
        starts = np.zeros(len(entries) + 1, np.int64)
        np.cumsum([entry.samples for entry in entries], out=starts[1:])
        self._schemas = schemas
        self._starts = starts
        self._start_list = starts.tolist()
        self._total = self._start_list[-1]
        self._views = [None] * len(entries)
        self._getters = [None] * len(entries)
        self._read = self._locate_stage(IdPlan()).read
        if self._files.in_place:
            self._shared_bytes = sum(
                entry.raw_data.bytes
                for entry in entries
                if entry.format == "mds" and entry.zip_data is None
            )
        self._entries = entries
        return entries

    def _open(self, shard: int) -> ShardView:
        # Opened outside the lock, so that threads open different shards at once; of two
        # threads that open the same shard, the first to finish wins and the other's view is
        # dropped (opening only reads and maps; a decompression is renamed into place whole).
        assert self._entries is not None
        view = self._files.open(
            self._entries[shard], self._schemas[shard], shared_bytes=self._shared()
        )
        with self._lock:
            known = self._views[shard]
            if known is not None:
                return known
            self._views[shard] = view
            self._getters[shard] = view.get
            return view


def check_empty_shards(entries: Sequence[ShardEntry], open_shard: Callable[[int], object]) -> None:
    """Open each shard whose index entry claims no samples: its own header must say so too.

    The rule for a shard's sample count: it is checked against the shard's header (an MDS
    shard's first 4 bytes, a split shard's ``.meta`` file) when the shard is opened, before any
    of its samples is handed over, and nothing is sized by the index's claim beyond what the
    file can hold. A shard the index says is empty is never opened by a read (no sample id maps
    to it), so a count of 0 would skip its samples unseen: such shards are opened when the
    index is loaded, before the first sample of the dataset. Datasets the reference writes
    hold empty shards (a config larger than ``size_limit``), so a true 0 is read.

    Args:
        entries: The index.
        open_shard: Opens shard ``k`` (fetching it first, if need be), which checks its header.

    Raises:
        ShardFormatError: A shard's header counts samples where the index says none; the
            message names the shard's file.
    """
    for shard, entry in enumerate(entries):
        if entry.samples == 0:
            open_shard(shard)


def _read_index(path: str, root: str) -> list[ShardEntry]:
    try:
        with open(path, "rb") as handle:
            text = handle.read()
    except FileNotFoundError as exc:
        raise ShardNotFoundError(
            f"{path} does not exist: is {root} an MDS dataset folder, and the split right?"
        ) from exc
    return parse_index(text, source=path)


def _check_decompressed_names(entries: Sequence[ShardEntry], *, source: str) -> None:
    """Refuse an index whose compressed files would be decompressed over another file.

    A compressed file is decompressed (and later found again) under its uncompressed basename;
    a name the index also gives another file would let one shard stand in for another, or
    overwrite it (or ``index.json``).

    Raises:
        IndexFormatError: An uncompressed basename of a compressed file is not its own.
    """
    if not any(entry.zip_data or entry.zip_meta for entry in entries):
        return  # nothing is decompressed (the common case, and cheap to tell)
    names = Counter(
        info.basename
        for entry in entries
        for info in (entry.raw_data, entry.zip_data, entry.raw_meta, entry.zip_meta)
        if info is not None
    )
    for number, entry in enumerate(entries):
        for raw, zipped in ((entry.raw_data, entry.zip_data), (entry.raw_meta, entry.zip_meta)):
            if raw and zipped and (raw.basename == INDEX_BASENAME or names[raw.basename] > 1):
                raise IndexFormatError(
                    f"{source}, shard {number}: a compressed file is decompressed to "
                    f"{raw.basename!r}, which names another file of the dataset"
                )
