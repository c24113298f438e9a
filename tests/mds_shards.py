"""Small MDS shards built in memory, and views of them, for the readers' tests."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

from shardstream.format.mds import MDSSchema, MDSShardView, shard_header
from shardstream.format.shard_file import SampleFile, ShardFile

COLUMNS = {
    "blob": "bytes",
    "f": "float32",
    "label": "int",
    "meta": "json",
    "name": "str",
    "vec": "ndarray:int16:3",
}
SCHEMA = MDSSchema(COLUMNS)


def sample(k: int, blob: bytes = b"") -> dict[str, Any]:
    return {
        "blob": blob or bytes([k % 251]) * (k * 37 % 500),
        "f": np.float32(k / 4),
        "label": k - 3,
        "meta": {"k": [k, str(k)]},
        "name": f"n{k}" * (k % 4),
        "vec": np.arange(3, dtype=np.int16) * k,
    }


def shard_bytes(samples: list[dict[str, Any]], schema: MDSSchema = SCHEMA) -> bytes:
    encoded = [b"".join(schema.encode_sample(s)) for s in samples]
    return shard_header(b"{}", [len(e) for e in encoded]) + b"".join(encoded)


def mapped_view(path: Path, samples: int, schema: MDSSchema = SCHEMA) -> MDSShardView:
    with path.open("rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    return MDSShardView(mapping, schema, samples, source=str(path), path=str(path))


def file_of(view: MDSShardView, file: ShardFile) -> SampleFile:
    """``view``'s samples, read from ``file`` (its own, or another to test a replaced file)."""
    return SampleFile(file, view.offset_table, view.schema, view.source)


def corrupt_shard(path: Path) -> Path:
    """Write six samples to ``path``; sample 4's size header claims 1 GiB. Returns ``path``."""
    data = bytearray(shard_bytes([sample(k) for k in range(6)]))
    (start,) = struct.unpack_from("<I", data, 4 + 4 * 4)  # sample 4 begins with a size
    struct.pack_into("<I", data, start, 1 << 30)
    path.write_bytes(bytes(data))
    return path
