"""``naive``: one pseudo-random permutation of the whole epoch, evaluated at any positions.

``naive`` is a global shuffle, so no canonical node owns a range of samples. Instead of drawing
the permutation (``O(epoch)`` memory in every worker), the epoch position ``t`` is enciphered:
a balanced Feistel network of :data:`ROUNDS` rounds permutes ``[0, 2**b)``, ``b`` the smallest
even bit count with ``2**b >= E``, and values past the epoch are enciphered again until they
fall inside it ("cycle walking"), which keeps the map a permutation of ``[0, E)``. Each round
mixes one half with a 64-bit finaliser keyed by a word drawn from a seeded generator, so the
permutation depends on ``(seed, epoch)`` only. A worker evaluates it at its own positions:
memory and time follow the positions asked for (fewer than 4 walks per position on average).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shardstream.sampling.spans import TAG_NAIVE_KEYS, make_rng

__all__ = ["ROUNDS", "naive_ids"]

#: Feistel rounds; 4 already make a keyed pseudo-random permutation from good round functions.
ROUNDS = 6
_CHUNK = 1 << 16


def _mix(values: NDArray[np.uint64], key: np.uint64) -> NDArray[np.uint64]:
    """A keyed 64-bit finaliser (xor-shift-multiply), applied elementwise."""
    x = values ^ key
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _encipher(values: NDArray[np.uint64], keys: NDArray[np.uint64], half: int) -> None:
    """One pass of the Feistel network over ``[0, 2**(2 * half))``, in place."""
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    left = values >> shift
    right = values & mask
    for key in keys:
        left, right = right, left ^ (_mix(right, key) & mask)
    values[:] = (left << shift) | right


def naive_ids(seed: int, epoch: int, total: int, positions: NDArray[np.int64]) -> NDArray[np.int64]:
    """The sample id at each epoch position (any shape) under ``naive``.

    Args:
        seed: The run's shuffle seed (validated).
        epoch: The epoch (validated).
        total: Samples in the epoch, ``E``.
        positions: Epoch positions in ``0 .. E - 1``.

    Returns:
        int64 ids, shaped like ``positions``; over ``arange(E)`` they are a permutation of it.
    """
    flat = np.asarray(positions, dtype=np.int64).ravel()
    if total <= 1 or not len(flat):
        same: NDArray[np.int64] = flat.copy().reshape(np.shape(positions))
        return same
    bits = max(2, (total - 1).bit_length())
    half = (bits + 1) // 2
    keys = make_rng(seed, epoch, TAG_NAIVE_KEYS).integers(
        0, 2**64, size=ROUNDS, dtype=np.uint64, endpoint=False
    )
    out = np.empty(len(flat), dtype=np.int64)
    for start in range(0, len(flat), _CHUNK):  # bounded temporaries, cache-sized passes
        values = flat[start : start + _CHUNK].astype(np.uint64)
        _encipher(values, keys, half)
        todo = np.flatnonzero(values >= np.uint64(total))
        while len(todo):  # cycle walking: encipher again whatever lies past the epoch
            walked = values[todo]
            _encipher(walked, keys, half)
            values[todo] = walked
            todo = todo[walked >= np.uint64(total)]
        out[start : start + len(values)] = values
    return out.reshape(np.shape(positions))
