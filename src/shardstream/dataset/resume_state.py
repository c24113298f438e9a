"""A ``StreamingDataset``'s state dict: its keys, the data it belongs to, the checks on loading.

A state holds the reference's keys (``epoch``, ``sample_in_epoch``, ``num_canonical_nodes``,
``shuffle_seed``, ``initial_physical_nodes``) and, since version 2, ``version``,
``num_samples`` and ``fingerprint``: a digest of the data it was saved on (each stream's shard
names, sizes, sample counts and digests, in order; not where the data lives, so a copied
dataset or a moved cache resumes). Loading a state saved on other data is an error unless
forced with ``load_state_dict(state, strict=False)``. States without a fingerprint (the
reference's, or older shardstream's) load with a warning that they cannot be checked.

Every value is checked against the dataset before anything is sized by it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardstream.dataset.parquet import ParquetDataset
from shardstream.dataset.stream import Stream
from shardstream.errors import ConfigurationError
from shardstream.format.index import ShardEntry

__all__ = [
    "MAX_CANONICAL_NODES",
    "SEED_LIMIT",
    "STATE_VERSION",
    "Resume",
    "check_state",
    "data_fingerprint",
    "dataset_fingerprint",
    "table_pins",
    "table_versions",
    "warn_moved_on",
    "warn_overrides",
]

logger = logging.getLogger(__name__)

#: The version of the state dict this module writes (the reference's keys alone: version 1).
STATE_VERSION = 2
#: Seeds and epochs are unsigned 64-bit words of the shuffle's ``SeedSequence``.
SEED_LIMIT = 1 << 64
#: Canonical nodes a state may name beyond the epoch's sample count (each costs memory).
MAX_CANONICAL_NODES = 1 << 16

_REQUIRED = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")
_FORCE = "load_state_dict(state, strict=False)"


@dataclass(frozen=True)
class Resume:
    """The checked values of a state dict."""

    epoch: int
    sample_in_epoch: int
    num_canonical_nodes: int
    shuffle_seed: int
    initial_physical_nodes: int | None


def data_fingerprint(
    streams: Sequence[Sequence[ShardEntry]], versions: Sequence[int | None] = ()
) -> str:
    """A short hex digest of each stream's shards: names, sizes, sample counts and digests.

    A stream read from a Delta table adds its version (``versions``: one per stream, ``None``
    for the others).
    """
    digest = hashlib.sha256()
    for number, shards in enumerate(streams):
        digest.update(b"\x00stream")
        if number < len(versions) and versions[number] is not None:
            digest.update(f"\x00delta version {versions[number]}".encode())
        for entry in shards:
            raw = entry.raw_data
            hashes = ",".join(f"{k}={v}" for k, v in sorted(raw.hashes.items()))
            digest.update(f"\n{raw.basename}\t{raw.bytes}\t{entry.samples}\t{hashes}".encode())
    return digest.hexdigest()[:16]


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
    if not isinstance(version, int) or isinstance(version, bool) or version > STATE_VERSION:
        raise ConfigurationError(
            f"the state dict's version is {version!r}; this shardstream reads versions up to "
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
            "shardstream): it cannot be checked against this dataset (%s, %d samples)",
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


def dataset_fingerprint(datasets: Sequence[Any]) -> str:
    """:func:`data_fingerprint` of a dataset's streams, with the Delta versions they read."""
    return data_fingerprint([data.shards for data in datasets], table_versions(datasets))


def table_versions(datasets: Sequence[Any]) -> list[int | None]:
    """The Delta version each stream read (``None``: not a Delta table)."""
    return [
        None if (snapshot := _snapshot(data)) is None else snapshot.version for data in datasets
    ]


def _snapshot(data: object) -> Any:
    """The Delta version a stream's dataset reads, or ``None`` (MDS, Parquet, empty)."""
    return data.snapshot if isinstance(data, ParquetDataset) else None


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
        snapshot = _snapshot(datasets[number])
        if snapshot is not None and snapshot.latest > snapshot.version:
            logger.warning(
                "resuming on version %d of the Delta table %s, which the state dict was saved "
                "on; the table is at version %d now (the run reads its own version to the end)",
                snapshot.version, snapshot.table, snapshot.latest,
            )  # fmt: skip


def warn_overrides(resume: Resume, *, shuffle_seed: int, num_canonical_nodes: int | None) -> None:
    """Warn of each argument of the dataset the state's value replaces."""
    if resume.shuffle_seed != shuffle_seed:
        logger.warning(
            "the state dict's shuffle_seed=%d overrides shuffle_seed=%d of the dataset, to "
            "resume the saved order", resume.shuffle_seed, shuffle_seed,
        )  # fmt: skip
    if num_canonical_nodes is not None and resume.num_canonical_nodes != num_canonical_nodes:
        logger.warning(
            "the state dict's num_canonical_nodes=%d overrides num_canonical_nodes=%d of the "
            "dataset, to resume the saved order", resume.num_canonical_nodes, num_canonical_nodes,
        )  # fmt: skip
