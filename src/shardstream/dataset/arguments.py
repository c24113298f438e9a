"""Checking ``StreamingDataset``'s arguments, each error naming the argument and what to do."""

from __future__ import annotations

from shardstream.dataset.resume_state import SEED_LIMIT
from shardstream.errors import ConfigurationError
from shardstream.format.hashing import HASH_ALGORITHMS
from shardstream.sampling import BATCHING_METHODS

__all__ = ["check_arguments"]


def check_arguments(
    *,
    validate_hash: str | None,
    sampling_method: str,
    partition_algo: str,
    batching_method: str,
    batch_size: int | None,
    num_canonical_nodes: int | None,
    predownload: int | None,
    replication: int | None,
    shuffle_block_size: int | None,
    sampling_granularity: int,
    shuffle_seed: int,
    download_concurrency: int,
) -> None:
    """Refuse an invalid argument of ``StreamingDataset``.

    Raises:
        ConfigurationError: An argument is invalid; the message names it and says why.
    """
    if validate_hash is not None and validate_hash not in HASH_ALGORITHMS:
        raise ConfigurationError(
            f"validate_hash={validate_hash!r} is not a known algorithm; use one of "
            f"{', '.join(HASH_ALGORITHMS)}"
        )
    if sampling_method not in ("balanced", "fixed"):
        raise ConfigurationError(f"sampling_method={sampling_method!r}; use 'balanced' or 'fixed'")
    if partition_algo not in ("orig", "relaxed"):
        raise ConfigurationError(
            f"partition_algo={partition_algo!r}; use 'relaxed' (or 'orig': both name the "
            f"same partition here, which resumes on any node count)"
        )
    if batching_method not in BATCHING_METHODS:
        raise ConfigurationError(
            f"batching_method={batching_method!r}; use one of {', '.join(BATCHING_METHODS)}"
        )
    for name, value, low in (
        ("batch_size", batch_size, 1),
        ("num_canonical_nodes", num_canonical_nodes, 1),
        ("predownload", predownload, 0),
        ("replication", replication, 1),
        ("shuffle_block_size", shuffle_block_size, 1),
        ("sampling_granularity", sampling_granularity, 1),
        ("shuffle_seed", shuffle_seed, 0),
        ("download_concurrency", download_concurrency, 1),
    ):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < low
        ):
            raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
    if shuffle_seed >= SEED_LIMIT:  # the shuffle seeds its generators with 64-bit words
        raise ConfigurationError(f"shuffle_seed must be below 2**64, got {shuffle_seed}")
