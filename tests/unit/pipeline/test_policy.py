"""The read policy's choice of how a shard file is opened, for files of its own and shared ones."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream.pipeline.policy import ReadPolicy

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


@pytest.mark.parametrize(
    ("size", "samples", "dataset", "how"),
    [
        (64 * MIB, 65536, 256 * MIB, "whole"),  # small samples, a dataset within the bound
        (64 * MIB, 65536, 256 * MIB + 1, "pread"),  # a larger dataset: read from the files
        (64 * MIB, 100, 64 * MIB, "pread"),  # large samples: read one by one, into place
        (64 * MIB, 65536, None, "pread"),  # the dataset's size not known: as a large one
        (64 * MIB, 0, 10 * MIB**2, "whole"),  # not an MDS data file: read whole
    ],
)
def test_a_small_dataset_read_in_place_is_read_whole_never_mapped(
    size: int, samples: int, dataset: int | None, how: str
):
    opening = POLICY.opening(size, samples, can_pread=True, shared=True, shared_bytes=dataset)
    assert opening == how
    # A dataset's own copy in a cache is mapped as before, whatever the dataset's size.
    assert POLICY.opening(size, 65536, can_pread=True, shared_bytes=dataset) == "map"
    assert ReadPolicy(in_place_whole_bytes=0).opening(
        size, samples, can_pread=True, shared=True, shared_bytes=dataset
    ) == ("whole" if not samples else "pread")


@pytest.mark.parametrize(
    ("size", "samples", "dataset", "held"),
    [
        (64 * MIB, 65536, 256 * MIB, True),  # read whole by every process: held for them
        (1 * MIB, 1024, 256 * MIB, True),  # a small file, read whole anyway
        (1 * MIB, 1024, 256 * MIB + 1, False),  # its dataset over the bound: not held
        (64 * MIB, 65536, 256 * MIB + 1, False),  # read from the files (pread): not held
        (64 * MIB, 100, 64 * MIB, False),  # large samples: read with pread
    ],
)
def test_the_loader_holds_for_forked_workers_what_each_would_read_whole(
    size: int, samples: int, dataset: int, held: bool
):
    assert POLICY.holds_for_workers(size, samples, shared_bytes=dataset) is held
    off = POLICY.replace(inherit_whole=False)
    assert not off.holds_for_workers(size, samples, shared_bytes=dataset)


def test_only_workers_forked_anew_each_epoch_inherit_held_shards():
    assert POLICY.inherits(forks=True, persistent=False)
    assert not POLICY.inherits(forks=True, persistent=True)  # each reads its shards once
    assert not POLICY.inherits(forks=False, persistent=False)  # spawned: nothing inherited
    assert not POLICY.replace(inherit_whole=False).inherits(forks=True, persistent=False)


def test_a_shared_file_of_small_samples_is_read_as_runs_of_them():
    assert POLICY.reads_runs(64 * MIB, 65536)  # 1 KiB samples: a call each would cost
    assert not POLICY.reads_runs(64 * MIB, 100)  # large samples: one read each, into place
    assert not POLICY.replace(zero_copy=True).reads_runs(64 * MIB, 65536)


def test_the_reader_lets_go_of_shards_before_the_last_eighth_of_an_epoch():
    # keep_open_tail=8: rows * 7 // 8, as the reader always did.
    assert [POLICY.release_before(rows) for rows in (0, 1, 7, 8, 9, 16, 100)] == [
        rows * 7 // 8 for rows in (0, 1, 7, 8, 9, 16, 100)
    ]
    assert ReadPolicy(keep_open_tail=0).release_before(10) == 0  # no tail kept: not a crash


def test_fetch_threads_are_the_policys_choice():
    def threads(policy: ReadPolicy, remote: bool, disk: bool, slots: int, share: int = 1) -> int:
        return policy.fetch_threads_for(
            remote=remote, local_disk=disk, download_concurrency=slots, share=share
        )

    assert threads(POLICY, True, True, 8) == 1  # a disk of this machine
    assert threads(POLICY, False, True, 8) == POLICY.idle_fetch_threads == 4
    assert threads(POLICY, True, False, 4, share=8) == 32
    assert threads(POLICY, True, False, 16, share=8) == POLICY.max_fetch_threads
    assert threads(ReadPolicy(max_fetch_threads=8), True, False, 4, share=8) == 8
    assert threads(POLICY, True, False, 40, share=8) == 40  # never fewer than the slots


def test_a_routes_stages_are_picked_once_from_the_settings():
    plain = POLICY.route("columns", hand_over=True, mean_sample_bytes=100 << 10, width=64)
    assert (plain.by_id, plain.hand_over, plain.file_reads, plain.first_rows) == (1, 1, 1, 1)
    assert not POLICY.route("columns", mean_sample_bytes=100 << 10, width=64).by_id  # in process
    assert not POLICY.route("columns", hand_over=True, mean_sample_bytes=100, width=64).by_id
    assert not ReadPolicy(zero_copy=True).route("columns").file_reads  # views of the mappings
    assert not ReadPolicy(read_ahead=False).route("columns").read_ahead
    samples = POLICY.route("samples", hand_over=True, mean_sample_bytes=1 << 20, width=64)
    assert (samples.by_id, samples.hand_over, samples.file_reads) == (False, False, False)


def test_a_worker_handing_batches_over_by_id_reads_no_shard_whole():
    # Its loader's process reads them (whole, once, where the dataset read in place is small).
    by_id = POLICY.route("columns", hand_over=True, mean_sample_bytes=100 << 10, width=64)
    assert by_id.by_id
    assert not by_id.read_whole
    packed = POLICY.route("columns", hand_over=True, mean_sample_bytes=1 << 10, width=64)
    assert not packed.by_id
    assert packed.read_whole  # the worker decodes: from memory
    assert POLICY.route("columns", mean_sample_bytes=100 << 10, width=64).read_whole
    assert POLICY.route("samples", hand_over=True, mean_sample_bytes=100 << 10).read_whole


def test_a_tables_route_gathers_batches_and_reads_no_files():
    assert not POLICY.route("columns").gather  # MDS: decoded shard by shard
    table = POLICY.route("columns", hand_over=True, gathers=True)
    assert table.gather
    assert not table.file_reads  # a row group has no file of samples to read runs of
    assert not POLICY.route("samples", gathers=True).gather  # one sample at a time


def test_in_order_is_a_span_under_twice_the_samples():
    spans = np.array([0, 5, 6, 100])
    counts = np.array([1, 3, 3, 3])
    assert POLICY.in_order(spans, counts).tolist() == [True, True, False, False]


def test_small_shards_are_read_by_range_below_the_share_of_the_dataset_s_shards():
    policy = ReadPolicy(range_shard_share=0.25)
    assert policy.ranges_small_shards(24, 100)
    assert not policy.ranges_small_shards(25, 100)  # the epoch needs them whole at once
    assert not ReadPolicy(first_batch_ranges=False).ranges_small_shards(1, 100)
