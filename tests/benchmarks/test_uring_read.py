"""The io_uring floor's reader (benchmarks/uring_read.py) reads what ``pread`` reads."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
from benchmarks.uring_read import Ring, open_ring


@pytest.fixture
def ring() -> Ring:
    try:
        made = open_ring(8)
    except OSError as exc:  # not counted as passing: the floor is then recorded as unavailable
        pytest.skip(f"io_uring is not available here: {exc}")
    return made


def test_reads_many_ranges_into_one_buffer_as_pread_does(ring: Ring, tmp_path: Path) -> None:
    path = tmp_path / "values"
    data = os.urandom(1 << 16)
    path.write_bytes(data)
    rng = np.random.default_rng(1)
    offsets = rng.integers(0, len(data) - 100, 29).astype(np.int64)  # more reads than slots
    sizes = rng.integers(1, 100, 29).astype(np.int64)
    into = np.zeros(int(sizes.sum()), np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        results = ring.read(fd, offsets, sizes, into)
        pairs = zip(offsets.tolist(), sizes.tolist(), strict=True)
        expected = b"".join(os.pread(fd, size, offset) for offset, size in pairs)
    finally:
        os.close(fd)
        ring.close()
    assert results.tolist() == sizes.tolist()
    assert into.tobytes() == expected


def test_reports_short_reads_and_errors_per_read(ring: Ring, tmp_path: Path) -> None:
    path = tmp_path / "short"
    path.write_bytes(b"x" * 10)
    into = np.zeros(30, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    closed = os.open(path, os.O_RDONLY)
    os.close(closed)
    try:
        short = ring.read(fd, np.array([5, 20]), np.array([10, 10]), into)
        bad = ring.read(closed, np.array([0]), np.array([10]), into)
    finally:
        os.close(fd)
        ring.close()
    assert short.tolist() == [5, 0]
    assert bad.tolist() == [-errno.EBADF]
