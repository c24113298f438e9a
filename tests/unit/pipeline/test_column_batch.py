"""Device batches crossing from a DataLoader worker: large bytes columns packed, the rest as is."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pytest

from shardstream.errors import ShardstreamError
from shardstream.pipeline.column_batch import (
    CAN_PACK,
    ColumnBatch,
    PackedArray,
    PackedBytes,
    for_transfer,
)
from shardstream.pipeline.policy import ReadPolicy

pytestmark = pytest.mark.skipif(not CAN_PACK, reason="memfd_create is Linux's")  # CI is Linux

POLICY = ReadPolicy()


def values(count: int, size: int) -> list[bytes]:
    return [bytes([k % 251]) * (size + k % 7) for k in range(count)]


def open_fds() -> dict[int, int]:
    """This process's open batch files (``memfd``): descriptor to inode, and no other descriptor.

    Other threads' descriptors come and go meanwhile (a test before may leave a pool behind), so
    tests follow their own descriptors by number and inode rather than counting.
    """
    found: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith("/memfd:shardstream-batch"):
                found[int(name)] = os.fstat(int(name)).st_ino
        except OSError:  # noqa: PERF203 - closed since it was listed
            continue
    return found


def closed(fd: int, inode: int) -> bool:
    """Whether the batch file ``inode`` once open as ``fd`` is closed (the number may be reused)."""
    return open_fds().get(fd) != inode


def test_a_packed_column_unpacks_to_the_same_bytes_and_closes_its_file():
    data: list[Any] = [*values(40, 5000), b"", memoryview(b"view value")]
    before = open_fds()
    packed = PackedBytes.pack(data)
    inode = open_fds()[packed.fd]
    assert before.get(packed.fd) != inode  # a file of its own
    out = packed.unpack()
    assert out == [bytes(v) for v in data]
    assert all(type(v) is bytes for v in out)
    assert closed(packed.fd, inode)


def test_more_values_than_one_writev_takes():
    data = values(2500, 3)
    assert PackedBytes.pack(data).unpack() == data


def test_an_unread_packed_column_closes_its_file_when_dropped():
    packed = PackedBytes.pack(values(3, 10))
    fd, inode = packed.fd, open_fds()[packed.fd]
    del packed
    assert closed(fd, inode)


def _receive(queue: Any, result: Any) -> None:
    batch = queue.get()
    result.put([batch.names, batch.collate(lambda column: column)])


def test_a_packed_batch_crosses_to_another_process_as_a_descriptor():
    context = multiprocessing.get_context("fork")
    queue, result = context.Queue(), context.Queue()
    data = values(64, POLICY.pack_bytes // 32)
    batch = for_transfer(ColumnBatch(["x", "label"], [data, list(range(64))]), POLICY)
    assert isinstance(batch.columns[0], PackedBytes)
    assert len(ForkingPickler.dumps(batch)) < 4096  # the values do not go through the pickle
    child = context.Process(target=_receive, args=(queue, result))
    child.start()
    queue.put(batch)
    names, columns = result.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert names == ["x", "label"]
    assert columns["x"] == data
    # A column of ints reaches collate as an int64 array (the dtype default_collate gives them).
    assert columns["label"].dtype == np.int64
    assert columns["label"].tolist() == list(range(64))


def test_small_or_short_values_stay_lists_and_views_become_bytes():
    small = values(8, 100)  # far below the threshold
    many_short = values(POLICY.pack_bytes // 100, 100)  # enough bytes, but short values
    assert sum(map(len, many_short)) >= POLICY.pack_bytes > POLICY.pack_mean_bytes * 100
    views = [memoryview(v) for v in small]
    mixed = ["text", 1]
    batch = for_transfer(
        ColumnBatch(["a", "b", "c", "d"], [small, many_short, views, mixed]), POLICY
    )
    assert batch.columns[0] is small
    assert batch.columns[1] is many_short
    assert batch.columns[2] == small
    assert all(type(v) is bytes for v in batch.columns[2])
    assert batch.columns[3] is mixed


def test_a_large_bytes_column_is_packed():
    large = values(32, POLICY.pack_bytes // 16)
    batch = for_transfer(ColumnBatch(["a"], [large]), POLICY)
    assert isinstance(batch.columns[0], PackedBytes)
    assert batch.collate(list) == {"a": large}


def test_read_only_arrays_collate_without_a_warning_into_the_same_tensor():
    from torch.utils.data import default_collate

    data = bytes(range(24))
    column = [np.frombuffer(data, np.uint8, 12, 12 * i).reshape(3, 4) for i in range(2)]
    assert not column[0].flags.writeable  # as decoded from a shard
    collated = ColumnBatch(["x", "n"], [column, [1, 2]]).collate(default_collate)  # no warning
    assert collated["x"].tolist() == [a.tolist() for a in column]
    assert collated["n"].tolist() == [1, 2]


@pytest.mark.parametrize(
    "column",
    [
        [1, 2, 3],
        [-(2**63), 2**63 - 1],
        [1.5, float("nan"), -0.0, 1e308],
        [1, 2.0],  # mixed: collated as a list (float32, as default_collate makes it)
        [1.0, 2],
        [True, False],
        [np.int64(3), np.int64(4)],
        ["a", "b"],
    ],
)
def test_scalar_columns_collate_into_what_default_collate_makes_of_the_list(column):
    import torch
    from torch.utils.data import default_collate

    theirs = default_collate(list(column))
    for as_tensor in (None, torch.as_tensor):  # the loader passes torch.as_tensor
        ours = ColumnBatch(["n"], [list(column)]).collate(default_collate, as_tensor)["n"]
        if isinstance(theirs, torch.Tensor):
            assert ours.dtype == theirs.dtype
            assert torch.equal(ours.nan_to_num(), theirs.nan_to_num())
            assert torch.equal(ours.signbit(), theirs.signbit())
        else:
            assert ours == theirs


def test_an_int_column_beyond_int64_fails_as_default_collate_fails():
    from torch.utils.data import default_collate

    column = [1, 2**63]
    with pytest.raises((OverflowError, ValueError, RuntimeError)) as theirs:
        default_collate(list(column))
    with pytest.raises(type(theirs.value)):
        ColumnBatch(["n"], [column]).collate(default_collate)


def _arrays(count: int, dtype: Any = np.uint16, shape: tuple[int, ...] = (2, 5)) -> list[Any]:
    size = int(np.prod(shape))
    return [(np.arange(size) * (k + 1)).astype(dtype).reshape(shape) for k in range(count)]


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")  # theirs, read-only
@pytest.mark.parametrize(
    "column",
    [
        _arrays(6),
        _arrays(3, np.float32, (4,)),
        [a.copy() for a in _arrays(4, np.int64, ())],  # 0-d arrays
        [np.frombuffer(a.tobytes(), np.uint16).reshape(2, 5) for a in _arrays(3)],  # read-only
    ],
)
def test_stacked_arrays_become_the_tensor_default_collate_makes(column):
    import torch
    from torch.utils.data import default_collate

    theirs = default_collate(list(column))
    for batch in (ColumnBatch(["x"], [column]), for_transfer(ColumnBatch(["x"], [column]), POLICY)):
        ours = batch.collate(default_collate, torch.as_tensor)["x"]
        assert ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs)
        assert batch.collate(default_collate)["x"].dtype == theirs.dtype  # without as_tensor


def test_arrays_leave_a_worker_as_one_array():
    column = _arrays(64)
    batch = for_transfer(ColumnBatch(["x", "n"], [column, list(range(64))]), POLICY)
    stacked = batch.columns[0]
    assert isinstance(stacked, np.ndarray)
    assert stacked.shape == (64, 2, 5)
    assert np.array_equal(stacked, np.stack(column))
    assert batch.columns[1] == list(range(64))
    received = ForkingPickler.loads(ForkingPickler.dumps(batch))
    assert np.array_equal(received.columns[0], stacked)


@pytest.mark.parametrize(
    "column",
    [
        [np.zeros(3, np.uint8), np.zeros(3, np.int16)],  # dtypes differ
        [np.zeros(3), np.zeros(4)],  # shapes differ
        [np.array(["a", "b"]), np.array(["c", "d"])],  # strings
        [np.zeros(2), [0.0, 0.0]],  # not all arrays
    ],
)
def test_arrays_that_differ_are_left_as_values(column):
    assert not isinstance(for_transfer(ColumnBatch(["x"], [column]), POLICY).columns[0], np.ndarray)
    from torch.utils.data import default_collate

    try:
        theirs = default_collate(list(column))
    except (TypeError, RuntimeError) as exc:
        with pytest.raises(type(exc)):
            ColumnBatch(["x"], [column]).collate(default_collate)
        return
    ours = ColumnBatch(["x"], [column]).collate(default_collate)["x"]
    assert type(ours) is type(theirs)


def test_a_large_array_column_leaves_a_worker_packed():
    column = _arrays(64, np.uint16, (2048,))  # 256 KiB
    batch = for_transfer(ColumnBatch(["tokens"], [column]), POLICY.replace(pack_bytes=100_000))
    packed = batch.columns[0]
    assert isinstance(packed, PackedArray)
    received = ForkingPickler.loads(ForkingPickler.dumps(batch))  # the descriptor is duplicated
    fd = received.columns[0].fd
    assert fd != packed.fd
    inode = open_fds()[fd]
    assert inode == open_fds()[packed.fd]  # the same file, through a descriptor of its own
    array = received.columns[0].unpack()
    assert closed(fd, inode)
    assert packed.fd in open_fds()  # the sender's copy is the sender's to close
    assert array.flags.writeable
    assert array.dtype == np.uint16
    assert np.array_equal(array, np.stack(column))


def test_a_packed_array_cut_short_is_an_error():
    packed = PackedArray.pack(np.arange(1000, dtype=np.int64))
    os.ftruncate(packed.fd, 100)
    with pytest.raises(ShardstreamError, match="packed batch array is 100 bytes, expected 8000"):
        packed.unpack()


def test_a_column_of_views_collates_to_the_views_not_to_tensors_of_their_bytes():
    from torch.utils.data import default_collate

    data = bytes(range(10))
    views = [memoryview(data)[:3], memoryview(data)[3:4], memoryview(data)[4:4]]
    out = ColumnBatch(["blob", "n"], [views, [1, 2, 3]]).collate(default_collate)
    assert out["blob"] == views
    assert [bytes(view) for view in out["blob"]] == [data[:3], data[3:4], b""]
    assert out["n"].tolist() == [1, 2, 3]
