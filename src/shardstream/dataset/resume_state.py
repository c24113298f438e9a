"""A ``StreamingDataset``'s state dict: its keys, the data it belongs to, the checks on loading.

A state holds the reference's keys (``epoch``, ``sample_in_epoch``, ``num_canonical_nodes``,
``shuffle_seed``, ``initial_physical_nodes``), the read pipeline's state (``stages``:
:mod:`~shardstream.dataset.resume_point`) and, since version 2, ``version``,
``num_samples`` and ``fingerprint``: a digest of the data it was saved on (each stream's shard
names, sizes, sample counts and digests, in order; not where the data lives, so a copied
dataset or a moved cache resumes). Loading a state saved on other data is an error unless
forced with ``load_state_dict(state, strict=False)``. States without a fingerprint (the
reference's, or older shardstream's) load with a warning that they cannot be checked.

The rule for the order: a state carries every setting of the dataset that decides which
samples make up an epoch and in what order (:data:`ORDER_SETTINGS`, with ``shuffle_seed``
and ``num_canonical_nodes``), and a state resumes the order it was saved in, never another
one. A dataset built with other values takes the state's before any epoch is planned, and
one WARNING names every value replaced; what the dataset cannot take (the streams' own
weights, recorded as ``choose_per_stream``; the global batch size, for the batching methods
it orders) is a ``ConfigurationError`` naming the key. A state without these keys (the
reference's, older shardstream's) resumes with the dataset's values, as the reference does.

Every value is checked against the dataset before anything is sized by it.

A state is made of three things, none of them the dataset: where reading stands
(:class:`Position`), the settings read with
(:class:`~shardstream.dataset.settings.DatasetSettings`) and the data they loaded
(:class:`~shardstream.dataset.prepared.PreparedDataset`). :func:`write_state` writes them;
:func:`restore` checks a state and gives back the settings and the position to resume at.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardstream.dataset.fingerprint import (
    data_fingerprint,
    dataset_fingerprint,
    table_snapshot,
    table_versions,
)
from shardstream.dataset.prepared import PreparedDataset
from shardstream.dataset.resume_point import Position, saved_stages
from shardstream.dataset.settings import SEED_LIMIT, DatasetSettings
from shardstream.dataset.stream import Stream
from shardstream.errors import ConfigurationError
from shardstream.sampling import BATCHING_METHODS, SHUFFLE_ALGORITHMS, Topology, stream_choices

__all__ = [
    "MAX_CANONICAL_NODES",
    "ORDER_SETTINGS",
    "SEED_LIMIT",
    "STATE_VERSION",
    "Position",
    "Restored",
    "Resume",
    "adopt_settings",
    "check_layout",
    "check_state",
    "data_fingerprint",
    "dataset_fingerprint",
    "dataset_order",
    "order_settings",
    "restore",
    "saved_order",
    "table_pins",
    "table_versions",
    "warn_moved_on",
    "warn_overrides",
    "write_state",
]

logger = logging.getLogger(__name__)

#: The version of the state dict this module writes (the reference's keys alone: version 1).
STATE_VERSION = 2
#: Canonical nodes a state may name beyond the epoch's sample count (each costs memory).
MAX_CANONICAL_NODES = 1 << 16

_REQUIRED = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")
_FORCE = "load_state_dict(state, strict=False)"

#: The dataset's settings, beyond ``shuffle_seed`` and ``num_canonical_nodes``, that decide
#: which samples make up an epoch and their order: state key -> the settings' field.
ORDER_SETTINGS = {
    "shuffle": "shuffle",
    "shuffle_algo": "shuffle_algo",
    "shuffle_block_size": "shuffle_block_size",
    "batching_method": "batching_method",
    "sampling_method": "sampling_method",
    "sampling_granularity": "sampling_granularity",
    "epoch_size": "requested_epoch_size",
}


def _is_count(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _is_name(value: Any, names: Iterable[str]) -> bool:
    # The type first: a list or a dict is no name, and looking it up in a set would raise.
    return isinstance(value, str) and value in names


#: What each order setting may hold, said as the error says it.
_ORDER_VALUES: dict[str, tuple[Any, str]] = {
    "shuffle": (lambda v: isinstance(v, bool), "True or False"),
    "shuffle_algo": (
        lambda v: _is_name(v, SHUFFLE_ALGORITHMS),
        f"one of {sorted(SHUFFLE_ALGORITHMS)}",
    ),
    "shuffle_block_size": (lambda v: v is None or _is_count(v, 1), "an integer >= 1 or None"),
    "batching_method": (
        lambda v: _is_name(v, BATCHING_METHODS),
        f"one of {list(BATCHING_METHODS)}",
    ),
    "sampling_method": (lambda v: _is_name(v, ("balanced", "fixed")), "'balanced' or 'fixed'"),
    "sampling_granularity": (lambda v: _is_count(v, 1), "an integer >= 1"),
    "epoch_size": (lambda v: v is None or _is_count(v, 1), "an integer >= 1 or None"),
}


def dataset_order(settings: DatasetSettings) -> dict[str, Any]:
    """The settings' own value of each of the :data:`ORDER_SETTINGS`, by state key."""
    return {key: getattr(settings, field) for key, field in ORDER_SETTINGS.items()}


def order_settings(
    settings: DatasetSettings, choices: Sequence[int], topology: Topology
) -> dict[str, Any]:
    """The settings of the order, as a state dict records them.

    ``choices``: the samples each stream contributes to an epoch (``choose_per_stream``).
    ``global_batch_size`` (``None``: no ``batch_size`` yet; ``topology``'s ranks times it)
    orders every batching method but ``random``.
    """
    batch = settings.batch_size
    return {
        **dataset_order(settings),
        "choose_per_stream": [int(count) for count in choices],
        "global_batch_size": None if batch is None else batch * topology.world_size,
    }


def saved_order(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The order settings a state holds (none in the reference's), each checked.

    Raises:
        ConfigurationError: A setting holds a value no dataset takes; the message names it.
    """
    saved = {key: obj[key] for key in ORDER_SETTINGS if key in obj}
    if not saved and "fingerprint" in obj:  # the reference's states are warned of by check_state
        logger.warning(
            "the state dict does not record the settings of the order (saved by an older "
            "shardstream): it resumes with this dataset's %s, which must be the saved run's",
            ", ".join(ORDER_SETTINGS),
        )
    for key, value in saved.items():
        valid, expected = _ORDER_VALUES[key]
        if not valid(value):
            raise ConfigurationError(
                f"the state dict's {key} is {value!r}; it must be {expected}: pass what "
                "state_dict() returned, unchanged"
            )
    return saved


def adopt_settings(
    settings: DatasetSettings, saved: Mapping[str, Any]
) -> tuple[DatasetSettings, dict[str, str]]:
    """``settings`` with the state's value of each setting in ``saved`` (state key -> value).

    Returns:
        The new settings, and the key of each value replaced with a phrase saying so for
        :func:`warn_overrides` (a ``None`` for ``num_canonical_nodes`` is no choice:
        replacing it is not told).
    """
    told = {}
    changes = {}
    for key, value in saved.items():
        field = ORDER_SETTINGS.get(key, key)
        given = getattr(settings, field)
        if given != value and not (key == "num_canonical_nodes" and given is None):
            told[key] = f"{key}={value!r} overrides {key}={given!r}"
        changes[field] = value
    return settings.replace(**changes), told


def check_layout(
    obj: Mapping[str, Any],
    prepared: PreparedDataset,
    order: Mapping[str, Any],
    *,
    global_batch: int,
    strict: bool,
) -> None:
    """Refuse a state whose epoch this dataset would lay out otherwise, whatever it takes.

    ``order`` holds the settings the dataset will resume with. With them, two things the
    dataset cannot take from a state can still change the epoch: the streams' own weights
    (``proportion``, ``repeat``, ``choose``: ``choose_per_stream``, the draw made again with
    the state's ``epoch_size`` and seed), and, for every batching method but ``random``, the
    global batch size (``batch_size`` times the ranks), which decides which samples share a
    batch. ``random`` batching lays the epoch out alike for any global batch size.

    Raises:
        ConfigurationError: One differs (unless ``strict`` is ``False``: a warning), or a key
            holds a bad value; the message names the key.
    """
    saved = obj.get("choose_per_stream")
    if saved is not None:
        if not isinstance(saved, Sequence) or not all(_is_count(count, 0) for count in saved):
            raise ConfigurationError(
                f"the state dict's choose_per_stream is {saved!r}; it must hold one count of "
                "samples per stream: pass what state_dict() returned, unchanged"
            )
        sizes = [int(data.shard_sizes.sum()) for data in prepared.datasets]
        weights = [stream.weight for stream in prepared.resolved]
        size, seed = order["epoch_size"], order["shuffle_seed"]
        now = stream_choices(sizes, weights, epoch_size=size, seed=seed).tolist()
        if list(saved) != now:
            _refuse(
                f"the state dict's choose_per_stream is {list(saved)}, but this dataset's "
                f"streams give {now} samples to an epoch: their weights (proportion, repeat, "
                "choose) differ from the run that saved it, so its place names other samples",
                "give the streams the weights the state was saved with",
                strict,
            )
    batch, method = obj.get("global_batch_size"), order["batching_method"]
    if batch is not None and not _is_count(batch, 1):
        raise ConfigurationError(
            f"the state dict's global_batch_size is {batch!r}; it must be an integer >= 1 or "
            "None: pass what state_dict() returned, unchanged"
        )
    if batch is not None and global_batch and method != "random" and batch != global_batch:
        _refuse(
            f"the state dict's global_batch_size is {batch}, this dataset's is {global_batch} "
            f"(batch_size times the ranks): with batching_method={method!r} it decides which "
            "samples share a batch, so the state's place names other samples",
            "resume with the global batch size the state was saved with",
            strict,
        )


def _refuse(message: str, fix: str, strict: bool) -> None:
    """Raise ``message`` with what to do, or (``strict=False``) warn and go on."""
    if strict:
        raise ConfigurationError(f"{message}; {fix}, or resume anyway with {_FORCE}")
    logger.warning("%s; loading it anyway (strict=False)", message)


@dataclass(frozen=True)
class Resume:
    """The checked values of a state dict."""

    epoch: int
    sample_in_epoch: int
    num_canonical_nodes: int
    shuffle_seed: int
    initial_physical_nodes: int | None


def check_state(
    obj: Mapping[str, Any],
    *,
    fingerprint: str,
    num_samples: int,
    epoch_size: int,
    global_batch: int,
    strict: bool,
) -> Resume:
    """The values of ``obj`` once each is checked against the dataset it is loaded into.

    Args:
        obj: The state dict.
        fingerprint: :func:`data_fingerprint` of the dataset.
        num_samples: The dataset's unique samples.
        epoch_size: Samples in one of its epochs.
        global_batch: Samples in one global batch now (0: unknown): the most repeats an epoch's
            last step may have held when the state was saved (older versions topped it up).
        strict: Refuse a state saved on other data (``False``: warn and load it).

    Raises:
        ConfigurationError: A key is missing or holds a bad value; the message names it.
    """
    missing = [key for key in _REQUIRED if key not in obj]
    if missing:
        raise ConfigurationError(
            f"the state dict lacks {missing}; it holds {sorted(obj)}: pass what "
            "state_dict() of a StreamingDataset (or StreamingDataLoader) returned"
        )
    values = {key: obj[key] for key in _REQUIRED}
    bad = {
        k: v for k, v in values.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0
    }
    if bad:
        raise ConfigurationError(
            f"the state dict holds bad values: {bad}; each must be an integer >= 0: pass "
            "what state_dict() returned, unchanged"
        )
    version = obj.get("version", 1)
    if not _is_count(version, 1) or version > STATE_VERSION:
        raise ConfigurationError(
            f"the state dict's version is {version!r}; this shardstream reads versions 1 to "
            f"{STATE_VERSION}: load it with the shardstream that saved it, or a newer one"
        )
    for key, limit in (("epoch", SEED_LIMIT - 1), ("shuffle_seed", SEED_LIMIT)):
        if values[key] >= limit:
            raise ConfigurationError(
                f"the state dict's {key} is {values[key]}; the shuffle takes it as a 64-bit word "
                f"(below {limit}): pass what state_dict() returned, unchanged"
            )
    most_nodes = max(MAX_CANONICAL_NODES, epoch_size)
    nodes = values["num_canonical_nodes"]
    if not 1 <= nodes <= most_nodes:
        raise ConfigurationError(
            f"the state dict's num_canonical_nodes is {nodes}; it must be from 1 to {most_nodes} "
            f"(the larger of {MAX_CANONICAL_NODES} and the epoch's {epoch_size} samples): pass "
            "what state_dict() returned, unchanged"
        )
    initial = obj.get("initial_physical_nodes")
    if initial is not None and (
        not isinstance(initial, int) or isinstance(initial, bool) or not 1 <= initial <= most_nodes
    ):
        raise ConfigurationError(
            f"the state dict's initial_physical_nodes is {initial!r}; it must be an integer "
            f"from 1 to {most_nodes}, or absent: pass what state_dict() returned, unchanged"
        )
    saved = obj.get("fingerprint")
    if saved is None:
        logger.warning(
            "the state dict has no fingerprint (saved by mosaicml-streaming or an older "
            "shardstream): it cannot be checked against this dataset (%s, %d samples), nor "
            "the dataset's settings of the order against the saved run's",
            fingerprint, num_samples,
        )  # fmt: skip
        _check_position(values["sample_in_epoch"], epoch_size, global_batch, strict)
    elif saved != fingerprint:
        message = (
            f"the state dict was saved on other data: its fingerprint is {saved!r} "
            f"({obj.get('num_samples', 'an unknown number of')} samples), this dataset's is "
            f"{fingerprint!r} ({num_samples} samples); resuming would skip the wrong samples"
        )
        if strict:
            raise ConfigurationError(
                f"{message}: point the dataset at the data the state was saved on, or resume "
                f"anyway with {_FORCE}"
            )
        logger.warning("%s; loading it anyway (strict=False)", message)
    return Resume(
        epoch=values["epoch"],
        sample_in_epoch=values["sample_in_epoch"],
        num_canonical_nodes=nodes,
        shuffle_seed=values["shuffle_seed"],
        initial_physical_nodes=initial,
    )


def _check_position(sample_in_epoch: int, epoch_size: int, global_batch: int, strict: bool) -> None:
    """Refuse an unverified state whose place lies past the end of this dataset's epoch."""
    most = epoch_size + global_batch  # repeats in the last step: fewer than that, ever
    if strict and sample_in_epoch > most:
        raise ConfigurationError(
            f"the state dict's sample_in_epoch is {sample_in_epoch}, but an epoch of this "
            f"dataset has {epoch_size} samples: the state was saved on other data; point the "
            f"dataset at that data, or resume anyway with {_FORCE}"
        )


def table_pins(obj: Mapping[str, Any], streams: Sequence[Stream]) -> dict[int, int]:
    """The saved Delta versions to read again: of the streams asking for the latest version.

    A stream that names its version (a number or a time) reads that one; a state saved on
    another version is then refused by its fingerprint.

    Raises:
        ConfigurationError: ``table_versions`` is not one entry per stream.
    """
    saved = obj.get("table_versions")
    if saved is None:
        return {}
    if (
        not isinstance(saved, Sequence)
        or len(saved) != len(streams)
        or not all(
            v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in saved
        )
    ):
        raise ConfigurationError(
            f"the state dict's table_versions is {saved!r}; it must hold one version number "
            f"(or None) for each of the dataset's {len(streams)} streams: pass what "
            "state_dict() returned, unchanged"
        )
    return {
        number: version
        for number, (version, stream) in enumerate(zip(saved, streams, strict=True))
        if version is not None and stream.version is None and stream.format in (None, "delta")
    }


def warn_moved_on(datasets: Sequence[Any], pins: Mapping[int, int]) -> None:
    """Say in the log which Delta tables a resumed run reads at an older version."""
    for number in pins:
        snapshot = table_snapshot(datasets[number])
        if snapshot is not None and snapshot.latest > snapshot.version:
            logger.warning(
                "resuming on version %d of the Delta table %s, which the state dict was saved "
                "on; the table is at version %d now (the run reads its own version to the end)",
                snapshot.version, snapshot.table, snapshot.latest,
            )  # fmt: skip


def warn_overrides(told: Iterable[str]) -> None:
    """Say in one WARNING which of the dataset's settings the state's values replaced."""
    phrases = list(told)
    if phrases:
        logger.warning(
            "the state dict's %s of the dataset, to resume the saved order", "; ".join(phrases)
        )


@dataclass(frozen=True)
class Restored:
    """What loading a state dict gives a dataset.

    Attributes:
        settings: The dataset's settings with the state's settings of the order and Delta
            versions.
        position: Where to resume.
        initial_physical_nodes: The physical nodes of the run that saved it (``None``: not
            recorded).
    """

    settings: DatasetSettings
    position: Position
    initial_physical_nodes: int | None


def write_state(
    position: Position,
    settings: DatasetSettings,
    data: PreparedDataset,
    *,
    topology: Topology,
    initial_nodes: int | None,
) -> dict[str, Any]:
    """The state dict of a job at ``position``, reading ``data`` with ``settings``.

    The reference's keys, the pipeline's state, then the data's fingerprint and the settings
    of the order.

    Args:
        position: Where the job stands.
        settings: The dataset's settings.
        data: What they loaded.
        topology: The data-parallel topology of this rank.
        initial_nodes: The physical nodes of the run a loaded state was saved in (``None``:
            this run's).
    """
    order = order_settings(settings, data.choices.tolist(), topology)
    stages = position.stages(order["global_batch_size"] or 0, data.epoch_size)
    return {
        "epoch": position.epoch,
        "sample_in_epoch": int(position.sample_in_epoch),
        "num_canonical_nodes": settings.canonical_nodes(topology, initial_nodes),
        "shuffle_seed": settings.shuffle_seed,
        "initial_physical_nodes": initial_nodes or topology.nodes,
        **({} if stages is None else {"stages": stages}),
        "version": STATE_VERSION,
        "num_samples": data.num_samples,
        "fingerprint": data.fingerprint,
        "table_versions": table_versions(data.datasets),
        **order,
    }


def restore(
    obj: Mapping[str, Any],
    settings: DatasetSettings,
    load: Callable[[DatasetSettings], PreparedDataset],
    *,
    strict: bool,
) -> Restored:
    """Check the state dict ``obj`` against the data ``settings`` read; what resuming it takes.

    Every value is checked before any is taken, and the data is loaded (``load``) at the
    Delta versions the state was saved on; one WARNING names each setting the state replaces.

    Raises:
        ConfigurationError: The state lacks a key, holds a bad value, or was saved on other
            data or other stream weights (unless ``strict`` is ``False``: a warning).
    """
    pins = table_pins(obj, settings.streams)
    pinned = settings.replace(table_pins=pins)
    saved = saved_order(obj)
    data = load(pinned)
    warn_moved_on(data.datasets, pins)
    global_batch = (settings.batch_size or 0) * settings.ranks().world_size
    resume = check_state(
        obj, fingerprint=data.fingerprint, num_samples=data.num_samples,
        epoch_size=data.epoch_size, global_batch=global_batch, strict=strict,
    )  # fmt: skip
    position = Position(resume.epoch, resume.sample_in_epoch)
    saved_stages(obj, position, data.epoch_size)
    order = {**dataset_order(pinned), "shuffle_seed": resume.shuffle_seed}
    order |= {"num_canonical_nodes": resume.num_canonical_nodes, **saved}
    check_layout(obj, data, order, global_batch=global_batch, strict=strict)
    adopted, told = adopt_settings(pinned, order)
    warn_overrides(told.values())
    return Restored(adopted, position, resume.initial_physical_nodes)
