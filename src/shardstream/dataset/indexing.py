"""NumPy-style keys of a map-style dataset: a sample id, a slice, or sequences of ids.

``ds[3]`` is one sample; ``ds[2:5]``, ``ds[[1, 2]]`` and ``ds[np.arange(3)]`` are lists of
samples; a nested list or a 2-d array gives lists nested the same way, as mosaicml-streaming's
datasets do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardstream.errors import SampleKeyError

__all__ = ["checked_id", "select"]


def select(key: Any, size: int, get: Callable[[int], Any]) -> Any:
    """The sample(s) ``key`` names, each read by ``get(sample_id)``.

    An id gives ``get(id)`` (``get`` takes negative ids and checks the range); a slice, a
    list as a Python list's slice would (``ds[::-1]`` is every sample, last first); a list,
    tuple or array, a list with one entry per item, nested as the key is.

    Args:
        key: An int (or numpy integer), a slice, or a sequence or array of them.
        size: The number of samples (what slices are taken of).
        get: Reads one sample by id.

    Raises:
        SampleKeyError: ``key`` is none of these (a float, a str, an array of floats).
        IndexError: An id is out of range (raised by ``get``).

    Example:
        >>> select([[0, 1], [2]], 5, lambda i: i * 10)
        [[0, 10], [20]]
    """
    if isinstance(key, (int, np.integer)):
        return get(int(key))
    if isinstance(key, slice):
        return [get(i) for i in range(*key.indices(size))]
    if isinstance(key, np.ndarray):
        if key.size and not np.issubdtype(key.dtype, np.integer):
            raise _bad_key(key)
        if key.ndim == 0:
            return get(int(key))
        if key.ndim == 1:
            return [get(i) for i in key.tolist()]
        return [select(row, size, get) for row in key]
    if isinstance(key, (list, tuple)):
        return [select(item, size, get) for item in key]
    raise _bad_key(key)


def checked_id(sample_id: int, size: int) -> int:
    """``sample_id`` as an id in ``range(size)`` (a negative one counts from the end).

    Raises:
        IndexError: The id is out of range.
    """
    index = int(sample_id)
    if index < 0:
        index += size
    if not 0 <= index < size:
        raise IndexError(f"sample id {sample_id} is out of range for {size} samples")
    return index


def _bad_key(key: Any) -> SampleKeyError:
    shown = repr(key)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return SampleKeyError(
        f"a dataset is indexed by a sample id (int), a slice, or a list or array of ids; "
        f"got {type(key).__name__}: {shown}"
    )
