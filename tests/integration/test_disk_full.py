"""A cache folder whose disk fills up: a clear error, and a cache left consistent.

The cache folder is a real tmpfs of a few hundred KiB, mounted in a private mount namespace
(``unshare --user --map-root-user --mount``: no privileges needed, nothing visible outside the
test's process).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import numpy as np
from tests.integration.tiny_disk import run_on_tiny_disk

from shardstream import LocalDataset, MDSWriter

CHILD = Path(__file__).with_name("disk_full_child.py")


def write(root: Path, payload: Any, **kwargs: Any) -> None:
    with MDSWriter(out=str(root), columns={"id": "int", "data": "bytes"}, size_limit=300_000,
                   **kwargs) as writer:  # fmt: skip
        for i in range(30):
            writer.write({"id": i, "data": payload(i)})


def stream_into_tiny_disk(remote: Path, mount: Path, size: str) -> dict[str, Any]:
    return run_on_tiny_disk(CHILD, mount, size, str(remote), "{mount}/cache")


def check_consistent(remote: Path, files: dict[str, int]) -> None:
    """Every shard file in the cache is whole; no temporaries; no fetch recorded as running."""
    sizes = {}
    for entry in LocalDataset(remote).shards:
        sizes[entry.raw_data.basename] = entry.raw_data.bytes
        if entry.zip_data is not None:
            sizes[entry.zip_data.basename] = entry.zip_data.bytes
    assert not [name for name in files if ".tmp-" in name], files
    for name, size in files.items():
        if name in sizes:
            assert size == sizes[name], (name, size)
        elif name.startswith(".shardstream/locks/"):
            assert size == 0, (name, size)  # no fetch left recorded in its lock file


def test_a_full_disk_during_download(tmp_path: Path):
    rng = np.random.default_rng(0)
    remote = tmp_path / "remote"
    write(remote, lambda i: rng.bytes(100_000))
    result = stream_into_tiny_disk(remote, tmp_path / "mnt", "700k")
    assert result["error"] == "DiskFullError", result
    assert result["is_oserror"] is True
    assert result["errno"] == errno.ENOSPC
    assert "no space left in" in result["message"]
    assert "cache_limit" in result["message"]
    assert "shard.000" in result["message"]
    check_consistent(remote, result["files"])
    assert any(name.endswith(".mds") for name in result["files"])  # some shards did fit


def test_a_full_disk_during_decompression(tmp_path: Path):
    remote = tmp_path / "remote"
    write(remote, lambda i: bytes([i]) * 100_000, compression="zstd")  # tiny zips, large shards
    zipped = sum(e.zip_data.bytes for e in LocalDataset(remote).shards if e.zip_data)
    assert zipped < 100_000
    result = stream_into_tiny_disk(remote, tmp_path / "mnt", "500k")
    assert result["error"] == "DiskFullError", result
    assert "no space left in" in result["message"]
    check_consistent(remote, result["files"])


def test_enough_room_streams_everything(tmp_path: Path):
    remote = tmp_path / "remote"
    write(remote, lambda i: bytes([i]) * 10_000)
    result = stream_into_tiny_disk(remote, tmp_path / "mnt", "2m")
    assert result.get("samples") == 30, result  # each sample once, the last batch short
    check_consistent(remote, result["files"])
