"""The read policy's choice of how a shard file is opened, for files of its own and shared ones."""

from __future__ import annotations

import pytest

from shardstream.format.read_policy import ReadPolicy

MIB = 1 << 20
POLICY = ReadPolicy()


@pytest.mark.parametrize(
    ("size", "samples", "can_pread", "shared", "how"),
    [
        (8 * MIB, 1000, True, True, "whole"),  # small files are read whole either way
        (64 * MIB, 65536, True, False, "map"),  # a cache's copy of small samples: mapped
        (64 * MIB, 65536, True, True, "pread"),  # read in place: never mapped
        (64 * MIB, 0, True, True, "whole"),  # not an MDS data file: read whole
        (64 * MIB, 65536, False, True, "map"),  # no pread (Windows): a mapped file stays whole
        (64 * MIB, 100, True, False, "pread"),  # large samples, as before
    ],
)
def test_a_shared_file_is_never_mapped(
    size: int, samples: int, can_pread: bool, shared: bool, how: str
):
    assert POLICY.opening(size, samples, can_pread=can_pread, shared=shared) == how


def test_a_shared_file_of_small_samples_is_read_as_runs_of_them():
    assert POLICY.reads_runs(64 * MIB, 65536)  # 1 KiB samples: a call each would cost
    assert not POLICY.reads_runs(64 * MIB, 100)  # large samples: one read each, into place
    assert not POLICY.replace(zero_copy=True).reads_runs(64 * MIB, 65536)
