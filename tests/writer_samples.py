"""A small dataset shape that writer tests (local and S3) write and check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shardstream import LocalDataset

COLUMNS = {"id": "int", "text": "str", "vec": "ndarray:float32:4"}


def sample(i: int) -> dict[str, Any]:
    """Sample ``i``: its id, a text of varying length, a fixed-shape vector."""
    return {"id": i, "text": f"sample {i} " * (i % 7), "vec": np.full(4, i, np.float32)}


def check_dataset(folder: Path, n: int) -> None:
    """Assert that ``folder`` holds exactly samples ``0 .. n - 1``."""
    with LocalDataset(folder) as ds:
        assert len(ds) == n
        for i in range(n):
            got, expected = ds[i], sample(i)
            assert (got["id"], got["text"]) == (expected["id"], expected["text"])
            np.testing.assert_array_equal(got["vec"], expected["vec"])
