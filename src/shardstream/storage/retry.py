"""When and how long to wait before trying a storage request again."""

from __future__ import annotations

import numpy as np

from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectChangedError,
    ObjectNotFoundError,
)

__all__ = ["backoff_delays", "is_transient"]


def backoff_delays(
    retries: int, rng: np.random.Generator, *, base: float = 0.5, cap: float = 30.0
) -> list[float]:
    """Seconds to wait before each retry: exponential with full jitter, capped.

    Args:
        retries: How many retries to plan for (one delay each).
        rng: The source of jitter; fresh OS entropy is right, so that clients that fail
            together do not retry together.
        base: The upper bound of the first delay; each later bound doubles.
        cap: The largest upper bound.

    Returns:
        ``retries`` delays, the ``i``-th drawn uniformly from ``[0, min(cap, base * 2**i)]``.
    """
    return [float(rng.uniform(0, min(cap, base * 2**attempt))) for attempt in range(retries)]


def is_transient(exc: BaseException) -> bool:
    """Whether a failed storage request may succeed if tried again.

    Any ``OSError`` is, except a missing object, an object no longer the version asked for,
    refused credentials and a bad argument: those answers do not change by asking again.
    Other exceptions are bugs and are never retried.
    """
    if isinstance(
        exc, (ObjectNotFoundError, ObjectChangedError, CredentialsError, ConfigurationError)
    ):
        return False
    return isinstance(exc, OSError)
