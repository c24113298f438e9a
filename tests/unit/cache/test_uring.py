"""Batches of file reads through io_uring read what ``pread`` reads."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream import config
from shardstream.cache.uring import Ring, open_ring
from shardstream.pipeline.policy import ReadPolicy


def _ring_or_why() -> tuple[Ring | None, str]:
    try:
        return open_ring(8), ""
    except OSError as exc:
        return None, str(exc)


_PROBE, _WHY = _ring_or_why()
if _PROBE is not None:
    _PROBE.close()
needs_uring = pytest.mark.skipif(_PROBE is None, reason=f"io_uring unusable here: {_WHY}")


@pytest.fixture
def ring() -> Iterator[Ring]:
    made = open_ring(8)  # fewer slots than most batches: several system calls a batch
    yield made
    made.close()


def _files(tmp_path: Path, sizes: list[int]) -> list[tuple[int, bytes]]:
    rng = np.random.default_rng(len(sizes))
    made = []
    for number, size in enumerate(sizes):
        data = rng.integers(0, 256, size, np.uint8).tobytes()
        path = tmp_path / f"f{number}"
        path.write_bytes(data)
        made.append((os.open(path, os.O_RDONLY), data))
    return made


def _read(
    ring: Ring, reads: list[tuple[int, int, int]]
) -> tuple[np.ndarray, mmap.mmap, np.ndarray]:
    """``(fd, offset, size)`` reads into one buffer, one after another: results, buffer."""
    sizes = np.asarray([size for _, _, size in reads], np.int64)
    dest = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if reads else sizes
    buffer = mmap.mmap(-1, max(1, int(sizes.sum())))
    base = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    results = ring.read(
        np.asarray([fd for fd, _, _ in reads], np.int32),
        np.asarray([offset for _, offset, _ in reads], np.int64),
        sizes,
        (base + dest).astype(np.uint64),
    )
    return results, buffer, dest


@needs_uring
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=3),
    picks=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 25_000), st.integers(0, 3000)), max_size=30
    ),
)
def test_reads_what_pread_reads(tmp_path: Path, ring: Ring, sizes, picks):
    files = _files(tmp_path, sizes)
    try:
        reads = [(files[f % len(files)][0], offset, size) for f, offset, size in picks]
        results, buffer, dest = _read(ring, reads)
        outcomes = zip(reads, results.tolist(), dest.tolist(), strict=True)
        for (fd, offset, size), got, at in outcomes:
            expected = os.pread(fd, size, offset)  # fewer bytes past the end of the file
            assert got == len(expected)
            assert buffer[at : at + got] == expected
    finally:
        for fd, _ in files:
            os.close(fd)


@needs_uring
def test_a_bad_descriptor_fails_its_read_only(tmp_path: Path, ring: Ring):
    [(fd, data)] = _files(tmp_path, [100])
    closed = os.open(tmp_path / "f0", os.O_RDONLY)
    os.close(closed)
    results, buffer, _ = _read(ring, [(fd, 10, 20), (closed, 0, 5), (fd, 0, 4)])
    assert results.tolist() == [20, -errno.EBADF, 4]
    assert buffer[:20] == data[10:30]
    assert buffer[25:29] == data[:4]
    os.close(fd)


@needs_uring
def test_a_closed_ring_or_a_forked_child_reads_nothing(tmp_path: Path):
    [(fd, _)] = _files(tmp_path, [100])
    ring = open_ring(8)
    pid = os.fork()
    if pid == 0:  # the child shares the parent's queues: it must not touch them
        try:
            _read(ring, [(fd, 0, 10)])
            os._exit(1)
        except OSError:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _read(ring, [(fd, 0, 10)])[0].tolist() == [10]  # the parent's ring still works
    ring.close()
    with pytest.raises(OSError, match="closed"):
        _read(ring, [(fd, 0, 10)])
    ring.close()  # twice: nothing happens
    os.close(fd)


def test_the_environment_turns_it_off():
    assert not config.io_uring_enabled({"SHARDSTREAM_IO_URING": "0"})
    assert not config.io_uring_enabled({"SHARDSTREAM_IO_URING": " Off "})
    assert config.io_uring_enabled({})
    assert not ReadPolicy.for_settings(io_uring=False).read_ahead
