"""Small Parquet datasets for the Parquet streaming tests: several files, uneven row groups."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Rows per file and rows per row group: 11 row groups of 7 to 60 rows, 300 rows in all.
FILES: tuple[tuple[int, int], ...] = ((130, 60), (7, 7), (113, 50), (50, 25))
ROWS = sum(rows for rows, _ in FILES)


def table(first: int, rows: int) -> pa.Table:
    """Rows ``first .. first + rows - 1``: numbers, strings, bytes and lists derived from the id."""
    ids = list(range(first, first + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "score": pa.array([i / 4 for i in ids], pa.float32()),
            "name": pa.array([f"row-{i}" for i in ids], pa.string()),
            "blob": pa.array([bytes([i % 251]) * (i % 9) for i in ids], pa.binary()),
            "tokens": pa.array([list(range(i % 5)) for i in ids], pa.list_(pa.int32())),
        }
    )


def write_parquet(
    root: Path,
    files: Sequence[tuple[int, int]] = FILES,
    *,
    first: int = 0,
    compression: str = "zstd",
) -> Path:
    """Write ``part-<k>.parquet`` files of ``(rows, rows per row group)``; ids run on."""
    root.mkdir(parents=True, exist_ok=True)
    for number, (rows, group) in enumerate(files):
        pq.write_table(
            table(first, rows),
            root / f"part-{number:03d}.parquet",
            row_group_size=group,
            compression=compression,
        )
        first += rows
    (root / "_SUCCESS").write_bytes(b"")  # as Spark leaves it: not a data file
    return root
