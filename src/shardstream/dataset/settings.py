"""``DatasetSettings``: a ``StreamingDataset``'s arguments, checked once and frozen.

The dataset's constructor turns the reference's arguments into one of these and keeps
nothing else of them. Everything that loads, plans or saves a dataset's state takes the
settings (and the loaded data), never the dataset: a module needs no other module's
attributes to rebuild what the user asked for. Building one checks every value and does no
I/O; the job's topology is looked up (torch.distributed, the launcher's variables) only when
asked for.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from shardstream.dataset.stream import Stream
from shardstream.dataset.stream_registry import dataset_streams
from shardstream.dataset.world import detect_topology, explicit_topology
from shardstream.errors import ConfigurationError
from shardstream.format.hashing import HASH_ALGORITHMS
from shardstream.format.index import safe_basename
from shardstream.pipeline.policy import ReadPolicy
from shardstream.sampling import BATCHING_METHODS, ShuffleConfig, Topology, parse_epoch_size
from shardstream.units import parse_bytes

__all__ = ["SEED_LIMIT", "DatasetSettings", "Setting"]

#: Seeds and epochs are unsigned 64-bit words of the shuffle's ``SeedSequence``.
SEED_LIMIT = 1 << 64

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class DatasetSettings:
    """What a ``StreamingDataset`` was asked for, each value checked (see its arguments).

    Build one with :meth:`of` (the reference's arguments) and change one with :meth:`replace`
    (checked again). The names are the dataset's attributes; ``requested_epoch_size`` is the
    ``epoch_size`` argument as a count, ``topology`` the explicit one (``None``: found when
    :meth:`ranks` is asked), and ``table_pins`` the Delta version each stream number reads
    again (from a loaded state).
    """

    streams: tuple[Stream, ...]
    split: str | None = None
    download_retry: int = 2
    download_timeout: float = 60
    validate_hash: str | None = None
    keep_zip: bool = False
    requested_epoch_size: int | None = None
    predownload: int | None = None
    cache_limit: int | None = None
    sampling_method: str = "balanced"
    sampling_granularity: int = 1
    partition_algo: str = "relaxed"
    num_canonical_nodes: int | None = None
    batch_size: int | None = None
    shuffle: bool = False
    shuffle_algo: str = "py1e"
    shuffle_seed: int = 9176
    shuffle_block_size: int | None = None
    batching_method: str = "random"
    allow_unsafe_types: bool = False
    replication: int | None = None
    rank: int | None = None
    world_size: int | None = None
    ranks_per_node: int | None = None
    topology: Topology | None = None
    download_concurrency: int = 8
    zero_copy: bool = False
    columns: tuple[str, ...] | None = None
    read_policy: ReadPolicy | None = None
    table_pins: Mapping[int, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        streams: Sequence[Stream] | None = None,
        remote: str | os.PathLike[str] | None = None,
        local: str | os.PathLike[str] | None = None,
        split: str | None = None,
        download_retry: int = 2,
        download_timeout: float = 60,
        validate_hash: str | None = None,
        keep_zip: bool = False,
        epoch_size: int | str | None = None,
        predownload: int | None = None,
        cache_limit: int | str | None = None,
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        partition_algo: str = "relaxed",
        num_canonical_nodes: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        shuffle_algo: str = "py1e",
        shuffle_seed: int = 9176,
        shuffle_block_size: int | None = None,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        ranks_per_node: int | None = None,
        topology: Topology | None = None,
        download_concurrency: int = 8,
        zero_copy: bool = False,
        columns: Sequence[str] | None = None,
        read_policy: ReadPolicy | None = None,
        stream_name: str = "stream",
        stream_config: Mapping[str, Any] | None = None,
        format: str | None = None,
        version: int | datetime | str | None = None,
    ) -> DatasetSettings:
        """The settings of ``StreamingDataset(**arguments)``: its arguments, in its order.

        Raises:
            ConfigurationError: An argument is invalid; the message says which and why.
        """
        built = streams is None  # the one stream built here holds the Parquet columns
        streams = dataset_streams(
            streams, stream_name=stream_name, stream_config=stream_config, columns=columns,
            format=format, version=version,
            remote=remote, local=local, split=split, download_retry=download_retry,
            download_timeout=download_timeout, validate_hash=validate_hash, keep_zip=keep_zip,
        )  # fmt: skip
        settings = cls(
            streams=tuple(streams),  # the caller's own: loading settles their weights
            split=split, download_retry=download_retry, download_timeout=download_timeout,
            validate_hash=validate_hash, keep_zip=keep_zip, requested_epoch_size=None,
            predownload=predownload, cache_limit=None, sampling_method=sampling_method,
            sampling_granularity=sampling_granularity, partition_algo=partition_algo,
            num_canonical_nodes=num_canonical_nodes, batch_size=batch_size, shuffle=bool(shuffle),
            shuffle_algo=shuffle_algo, shuffle_seed=shuffle_seed,
            shuffle_block_size=shuffle_block_size, batching_method=batching_method,
            allow_unsafe_types=allow_unsafe_types, replication=replication, rank=rank,
            world_size=world_size, ranks_per_node=ranks_per_node,
            download_concurrency=download_concurrency, zero_copy=zero_copy,
            columns=None if built else _normal("columns", columns), read_policy=read_policy,
        )  # fmt: skip
        settings.check()
        return dataclasses.replace(
            settings,
            split=_normal("split", split),
            requested_epoch_size=_normal("requested_epoch_size", epoch_size),
            cache_limit=_normal("cache_limit", cache_limit),
            topology=explicit_topology(topology, rank, world_size, ranks_per_node),
        )

    def replace(self, **changes: Any) -> DatasetSettings:
        """These settings with ``changes`` (field -> value), checked again.

        Raises:
            ConfigurationError: A value is invalid; the message names it.
        """
        unknown = sorted(set(changes) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise ConfigurationError(f"{unknown} are not settings of a StreamingDataset")
        settings = dataclasses.replace(
            self, **{name: _normal(name, value) for name, value in changes.items()}
        )
        settings.check()
        explicit_topology(settings.topology, settings.rank, settings.world_size,
                          settings.ranks_per_node)  # fmt: skip
        return settings

    def check(self) -> None:
        """Refuse an invalid value, naming it and what to do.

        Raises:
            ConfigurationError: A value is invalid.
        """
        if not isinstance(self.streams, tuple) or not self.streams:
            raise ConfigurationError("streams is empty: give at least one Stream")
        if not all(isinstance(stream, Stream) for stream in self.streams):
            raise ConfigurationError(
                f"streams must be shardstream Streams, got {list(self.streams)!r}"
            )
        if self.validate_hash is not None and self.validate_hash not in HASH_ALGORITHMS:
            raise ConfigurationError(
                f"validate_hash={self.validate_hash!r} is not a known algorithm; use one of "
                f"{', '.join(HASH_ALGORITHMS)}"
            )
        if self.sampling_method not in ("balanced", "fixed"):
            raise ConfigurationError(
                f"sampling_method={self.sampling_method!r}; use 'balanced' or 'fixed'"
            )
        if self.partition_algo not in ("orig", "relaxed"):
            raise ConfigurationError(
                f"partition_algo={self.partition_algo!r}; use 'relaxed' (or 'orig': both name "
                f"the same partition here, which resumes on any node count)"
            )
        if self.batching_method not in BATCHING_METHODS:
            raise ConfigurationError(
                f"batching_method={self.batching_method!r}; use one of "
                f"{', '.join(BATCHING_METHODS)}"
            )
        for name, low in (
            ("batch_size", 1),
            ("num_canonical_nodes", 1),
            ("predownload", 0),
            ("replication", 1),
            ("shuffle_block_size", 1),
            ("sampling_granularity", 1),
            ("shuffle_seed", 0),
            ("download_concurrency", 1),
        ):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < low
            ):
                raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.shuffle_seed >= SEED_LIMIT:  # the shuffle seeds its generators with 64-bit words
            raise ConfigurationError(f"shuffle_seed must be below 2**64, got {self.shuffle_seed}")
        columns = self.columns
        if columns is not None and (
            not isinstance(columns, tuple) or not all(isinstance(c, str) for c in columns)
        ):
            raise ConfigurationError(f"columns must be a list of column names, got {columns!r}")
        self.shuffle_config  # noqa: B018  (checks shuffle_algo)

    @property
    def shuffle_config(self) -> ShuffleConfig:
        """The shuffle these settings ask for."""
        return ShuffleConfig(
            shuffle=self.shuffle, algo=self.shuffle_algo, seed=self.shuffle_seed,
            block_size=self.shuffle_block_size,
        )  # fmt: skip

    def ranks(self) -> Topology:
        """The data-parallel topology of this rank (replica groups count as one rank).

        The explicit topology, else torch.distributed's, else the launcher's variables.

        Raises:
            TopologyError: The sources disagree, or the values do not add up.
        """
        topology = self.topology or detect_topology(
            rank=self.rank, world_size=self.world_size, ranks_per_node=self.ranks_per_node
        )
        return topology.replicated(self.replication) if self.replication else topology

    def canonical_nodes(self, topology: Topology, initial_nodes: int | None = None) -> int:
        """The canonical nodes of the epoch order, on ``topology``'s physical nodes.

        ``initial_nodes``: the physical nodes of the run a loaded state was saved in.
        """
        if self.num_canonical_nodes is not None:
            return self.num_canonical_nodes
        nodes = initial_nodes or topology.nodes
        return nodes * 64 if self.shuffle_algo in ("py1s", "py2s") else nodes

    def look_ahead(self) -> int:
        """Samples a worker fetches ahead of its reader (``predownload``, else 8 batches)."""
        if self.predownload is not None:
            return self.predownload
        assert self.batch_size is not None
        return 8 * self.batch_size

    def loading(self) -> tuple[Any, ...]:
        """The values a dataset's loaded data depends on: loaded again when they change."""
        return (
            self.streams, self.split, self.download_retry, self.download_timeout,
            self.validate_hash, self.keep_zip, self.download_concurrency, self.columns,
            dict(self.table_pins), self.read_policy, self.zero_copy, self.cache_limit,
            self.allow_unsafe_types, self.requested_epoch_size, self.shuffle_seed,
        )  # fmt: skip


def _normal(name: str, value: Any) -> Any:
    """A setting's value as the settings hold it (text sizes parsed, sequences made tuples)."""
    if name == "shuffle":
        return bool(value)
    if value is None:
        return None
    if name == "split":
        return safe_basename(value, where="split")
    if name == "requested_epoch_size":
        return parse_epoch_size(value)
    if name == "cache_limit":
        return parse_bytes(value, what="cache_limit")
    if name in ("streams", "columns") and isinstance(value, (list, tuple)):
        return tuple(value)  # anything else is refused by DatasetSettings.check
    if name == "table_pins":
        return dict(value)
    return value


class Setting(Generic[T]):
    """A dataset attribute that is one of its settings: read from them, written through them.

    Writing replaces the owner's settings with the value (checked: an invalid value is a
    :class:`~shardstream.errors.ConfigurationError` and changes nothing).
    """

    def __init__(self, convert: Callable[[Any], T] | None = None) -> None:
        self.convert = convert
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value = getattr(_settings_of(instance), self.name)
        return value if self.convert is None else self.convert(value)

    def __set__(self, instance: object, value: T) -> None:
        changed = _settings_of(instance).replace(**{self.name: value})
        instance.settings = changed  # type: ignore[attr-defined]


def _settings_of(instance: object) -> DatasetSettings:
    settings = instance.settings  # type: ignore[attr-defined]
    assert isinstance(settings, DatasetSettings)
    return settings
