"""Datasets for the read-route equivalence tests: MDS and Parquet, described, then written.

A dataset is described by a small frozen record (drawn by Hypothesis, or fixed), and every
value of sample ``i`` follows from the record's seed and ``i``, so a failing example is
reproduced from its description alone.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardstream import MDSWriter
from shardstream.pipeline.policy import Entrance, ReadPolicy, Route

KIB = 1 << 10
MIB = 1 << 20

#: The fixed-shape array column of MDS datasets: its elements, of uint16.
VEC_LENGTH = 64


@dataclass(frozen=True)
class MDSData:
    """An MDS dataset: one sample per ``blob_sizes`` entry, that many bytes in its ``blob``.

    Attributes:
        blob_sizes: The ``bytes`` column's size, sample by sample.
        compression: A shard compression name, or ``None``.
        hashes: Digests recorded in the index (the first is validated when reading).
        size_limit: The writer's shard size limit (small: several shards).
        var_dtype: The dtype of the ``var`` column (encoded as plain ``ndarray``).
        var_shape: Its shape, the same for every sample (torch's collation stacks it).
        seed: Seeds every value.
    """

    blob_sizes: tuple[int, ...]
    compression: str | None
    hashes: tuple[str, ...]
    size_limit: int
    var_dtype: str
    var_shape: tuple[int, ...]
    seed: int

    @property
    def columns(self) -> dict[str, str]:
        return {
            "blob": "bytes",
            "id": "int",
            "text": "str",
            "score": "float64",
            "small": "float32",
            "vec": f"ndarray:uint16:{VEC_LENGTH}",
            "var": "ndarray",
        }

    @property
    def validate_hash(self) -> str | None:
        return self.hashes[0] if self.hashes else None

    def sample(self, i: int) -> dict[str, Any]:
        rng = np.random.default_rng([self.seed, i])
        return {
            "blob": _blob(rng, self.blob_sizes[i]),
            "id": int(rng.integers(-(1 << 62), 1 << 62)),
            "text": "é" * (i % 3) + f"sample {i} " * int(rng.integers(0, 5)),
            "score": float(rng.normal()),
            "small": np.float32(rng.normal()),
            "vec": rng.integers(0, 1 << 16, VEC_LENGTH, dtype=np.uint16),
            "var": np.asarray(rng.normal(size=self.var_shape) * 100).astype(self.var_dtype),
        }

    def write(self, root: Path) -> Path:
        """Write the dataset into ``root`` (a new folder); returns ``root``."""
        with MDSWriter(
            out=str(root), columns=self.columns, compression=self.compression,
            hashes=list(self.hashes) or None, size_limit=self.size_limit,
        ) as writer:  # fmt: skip
            for i in range(len(self.blob_sizes)):
                writer.write(self.sample(i))
        return root


@dataclass(frozen=True)
class ParquetData:
    """A Parquet dataset: files of ``(rows, rows per row group)``, one blob size per row.

    Attributes:
        files: Rows and rows per row group of each file (a row group is a shard).
        blob_sizes: The ``blob`` column's size, row by row over all files.
        compression: Parquet's column compression.
        seed: Seeds every value.
    """

    files: tuple[tuple[int, int], ...]
    blob_sizes: tuple[int, ...]
    compression: str
    seed: int

    def table(self, first: int, rows: int) -> pa.Table:
        """Rows ``first .. first + rows - 1``."""
        rngs = [np.random.default_rng([self.seed, i]) for i in range(first, first + rows)]
        return pa.table(
            {
                "id": pa.array([int(r.integers(-(1 << 62), 1 << 62)) for r in rngs], pa.int64()),
                "score": pa.array([float(r.normal()) for r in rngs], pa.float32()),
                "name": pa.array([f"row {i} " * (i % 4) for i in range(first, first + rows)]),
                "blob": pa.array(
                    [_blob(r, self.blob_sizes[i]) for i, r in enumerate(rngs, first)], pa.binary()
                ),
                "tokens": pa.array(
                    [r.integers(0, 1000, 5).tolist() for r in rngs], pa.list_(pa.int32())
                ),
                "pair": pa.array(
                    [r.integers(-9, 9, 2).tolist() for r in rngs], pa.list_(pa.int16(), 2)
                ),
                "flag": pa.array([bool(r.integers(0, 2)) for r in rngs], pa.bool_()),
            }
        )

    def write(self, root: Path) -> Path:
        """Write ``part-<k>.parquet`` files into ``root`` (a new folder); returns ``root``."""
        root.mkdir(parents=True)
        first = 0
        for number, (rows, group) in enumerate(self.files):
            pq.write_table(
                self.table(first, rows), root / f"part-{number:03d}.parquet",
                row_group_size=group, compression=self.compression,
            )  # fmt: skip
            first += rows
        return root


def _blob(rng: np.random.Generator, size: int) -> bytes:
    """``size`` bytes unique to the sample, yet compressible (a short random run, repeated)."""
    run = rng.bytes(61)
    return (run * (size // len(run) + 1))[:size]


@dataclass(frozen=True)
class ForcedRoute(ReadPolicy):
    """A read policy whose batch-mode epochs take one pipeline: its stage choices forced.

    Defined here, not in a test module, so that spawned DataLoader workers unpickle it.
    """

    forced: Route | None = None

    def route(
        self,
        decode: Entrance,
        *,
        hand_over: bool = False,
        mean_sample_bytes: float = 0.0,
        width: int = 1,
        gathers: bool = False,
    ) -> Route:
        chosen = super().route(
            decode, hand_over=hand_over, mean_sample_bytes=mean_sample_bytes, width=width,
            gathers=gathers,
        )  # fmt: skip
        if self.forced is None or decode != "columns":
            return chosen
        return dataclasses.replace(self.forced, decode=decode, hand_over=chosen.hand_over)


def column_routes(hand_over: bool = False) -> list[Route]:
    """Every batch-mode pipeline the policy can pick: each stage variant, in every mix."""
    return [
        Route(
            decode="columns",
            hand_over=hand_over,
            by_id=by_id,
            file_reads=file_reads,
            read_ahead=read_ahead,
            first_rows=first_rows,
        )
        for by_id, file_reads, read_ahead, first_rows in itertools.product(
            (False, True), (False, True), (False, True), (1, 3)
        )
    ]


def route_name(route: Route) -> str:
    """A route's stage choices, for test ids and notes."""
    parts = [f"first {route.first_rows}"]
    names = ("by_id", "file_reads", "read_ahead", "gather")
    parts += [name for name in names if getattr(route, name)]
    return ",".join(parts)
