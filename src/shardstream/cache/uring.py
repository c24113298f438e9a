"""Many reads of cached shard files in one system call, with Linux io_uring.

A shuffled batch of small samples is hundreds of reads at scattered offsets. Mapped, they
cost no system call, but every page a process touches stays in its resident memory until it
is unmapped, and a shuffled epoch touches every page of its shards. Read with ``pread``,
nothing is mapped, but each read is a system call, and a thread doing them cannot overlap
with the interpreter: each one takes the interpreter's lock back.

A :class:`Ring` submits a whole batch of reads in one ``io_uring_enter`` call, which runs
without the interpreter's lock, so a reader thread can read the next batch while the loader's
thread decodes this one. The ring is set up with the raw ``io_uring_setup`` and
``io_uring_enter`` system calls through :mod:`ctypes` (no dependency); its queues are mapped
and filled with numpy, one ``IORING_OP_READ`` per read.

:func:`open_ring` raises :class:`OSError` where io_uring cannot be used: not Linux, a kernel
before 5.6, a container whose seccomp profile forbids it, or ``kernel.io_uring_disabled``.
Callers then read with ``pread``. Whether to try at all is the read policy's choice
(``ReadPolicy.read_ahead``, off with ``SHARDSTREAM_IO_URING=0``).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["Ring", "open_ring"]

_SETUP, _ENTER = 425, 426  # io_uring_setup, io_uring_enter (the same on every architecture)
_OP_READ = 22  # IORING_OP_READ, Linux 5.6
_ENTER_GETEVENTS = 1
_OFF_SQ_RING, _OFF_SQES = 0, 0x10000000
_RETRY = frozenset({errno.EINTR, errno.EAGAIN, errno.EBUSY})

_SQE = np.dtype(
    {
        "names": ["opcode", "fd", "off", "addr", "len", "user_data"],
        "formats": ["u1", "<i4", "<u8", "<u8", "<u4", "<u8"],
        "offsets": [0, 4, 8, 16, 24, 32],
        "itemsize": 64,
    }
)
_CQE = np.dtype(
    {"names": ["user_data", "res"], "formats": ["<u8", "<i4"], "offsets": [0, 8], "itemsize": 16}
)


_long = ctypes.c_long  # syscall() takes longs: no argument is passed as a 32-bit int


class _Params(ctypes.Structure):
    """``struct io_uring_params`` (120 bytes): where the queues lie in the ring's mappings."""

    _fields_ = [
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("sq_thread_cpu", ctypes.c_uint32),
        ("sq_thread_idle", ctypes.c_uint32),
        ("features", ctypes.c_uint32),
        ("wq_fd", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 3),
        ("sq_off", ctypes.c_uint32 * 10),  # head, tail, mask, entries, flags, dropped, array
        ("cq_off", ctypes.c_uint32 * 10),  # head, tail, mask, entries, overflow, cqes
    ]


class Ring:
    """One io_uring instance of :attr:`entries` slots, for one thread of one process.

    Made by :func:`open_ring`. Not thread-safe, and never used in a forked child (its queues
    are shared with the parent's): :meth:`read` refuses to.
    """

    def __init__(self, fd: int, params: _Params, syscall: Any) -> None:
        self.fd = fd
        self.entries = int(params.sq_entries)
        self._pid = os.getpid()
        self._syscall = syscall
        sq, cq = params.sq_off, params.cq_off
        size = max(sq[6] + params.sq_entries * 4, cq[5] + params.cq_entries * 16)
        access = mmap.PROT_READ | mmap.PROT_WRITE
        self._rings = mmap.mmap(fd, size, mmap.MAP_SHARED, access, offset=_OFF_SQ_RING)
        try:
            self._sqe_map = mmap.mmap(
                fd, params.sq_entries * 64, mmap.MAP_SHARED, access, offset=_OFF_SQES
            )
        except BaseException:
            self._rings.close()
            raise
        words = self._words = np.frombuffer(self._rings, np.uint32)
        self._sq_head, self._sq_tail, self._sq_mask = sq[0] // 4, sq[1] // 4, int(words[sq[2] // 4])
        self._sq_array = np.frombuffer(self._rings, np.uint32, params.sq_entries, sq[6])
        self._cq_head, self._cq_tail = cq[0] // 4, cq[1] // 4
        self._cq_mask = int(words[cq[2] // 4])
        self._cqes = np.frombuffer(self._rings, _CQE, params.cq_entries, cq[5])
        self._sqes = np.frombuffer(self._sqe_map, _SQE)
        self._slots = np.arange(self.entries, dtype=np.uint32)
        self.closed = False

    def read(
        self,
        fds: NDArray[np.int32],
        offsets: NDArray[np.int64],
        sizes: NDArray[np.int64],
        addresses: NDArray[np.uint64],
    ) -> NDArray[np.int64]:
        """Read ``sizes[k]`` bytes at ``offsets[k]`` of file ``fds[k]`` to ``addresses[k]``.

        Every destination must stay valid (mapped, writable, ``sizes[k]`` bytes) until this
        returns; it returns only once every read has completed, even if a wait is
        interrupted. Returns each read's result: the bytes read (fewer at the end of a file),
        or a negative errno.

        Raises:
            OSError: The ring cannot take the reads (closed, or another process's); nothing
                was submitted.
        """
        if self.closed or os.getpid() != self._pid:
            raise OSError(errno.EBADF, "the io_uring ring is closed or belongs to another process")
        count = len(offsets)
        results = np.empty(count, np.int64)
        for first in range(0, count, self.entries):
            todo = min(self.entries, count - first)
            sqes = self._sqes[:todo]
            sqes[...] = np.zeros((), _SQE)
            sqes["opcode"] = _OP_READ
            sqes["fd"] = fds[first : first + todo]
            sqes["off"] = offsets[first : first + todo]
            sqes["addr"] = addresses[first : first + todo]
            sqes["len"] = sizes[first : first + todo]
            sqes["user_data"] = np.arange(first, first + todo, dtype=np.uint64)
            tail = int(self._words[self._sq_tail])
            self._sq_array[(tail + self._slots[:todo]) & self._sq_mask] = self._slots[:todo]
            # The kernel reads the queue in the system call below, which orders these stores.
            self._words[self._sq_tail] = (tail + todo) & 0xFFFFFFFF
            self._complete(todo, results)
        return results

    def _complete(self, todo: int, results: NDArray[np.int64]) -> None:
        """Submit what the queue holds and reap ``todo`` completions into ``results``."""
        reaped = 0
        while reaped < todo:
            pending = (int(self._words[self._sq_tail]) - int(self._words[self._sq_head])) & (
                0xFFFFFFFF
            )
            done = self._syscall(
                _long(_ENTER), _long(self.fd), _long(pending), _long(todo - reaped),
                _long(_ENTER_GETEVENTS), None, _long(0),
            )  # fmt: skip
            if done < 0:
                code = ctypes.get_errno()
                if code not in _RETRY:
                    # Reads may still be in flight into the caller's buffers: the ring is
                    # never used again, and closing it waits for them.
                    self.close()
                    raise OSError(code, f"io_uring_enter failed: {os.strerror(code)}")
            head, tail = int(self._words[self._cq_head]), int(self._words[self._cq_tail])
            if tail != head:
                cqes = self._cqes[(head + np.arange((tail - head) & 0xFFFFFFFF)) & self._cq_mask]
                results[cqes["user_data"].astype(np.int64)] = cqes["res"]
                reaped += len(cqes)
                self._words[self._cq_head] = tail & 0xFFFFFFFF

    def close(self) -> None:
        """Unmap the queues and close the ring (the kernel ends any reads still in flight)."""
        if self.closed:
            return
        self.closed = True
        del self._sqes, self._cqes, self._sq_array, self._words
        self._sqe_map.close()
        self._rings.close()
        os.close(self.fd)


def open_ring(entries: int = 256) -> Ring:
    """A new ring of ``entries`` slots, for the calling thread.

    Raises:
        OSError: io_uring cannot be used here (see the module's documentation).
    """
    if not sys.platform.startswith("linux") or sys.byteorder != "little":
        raise OSError(errno.ENOSYS, f"io_uring needs little-endian Linux, not {sys.platform}")
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    params = _Params()
    fd = syscall(_long(_SETUP), _long(entries), ctypes.byref(params))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"io_uring_setup failed: {os.strerror(code)}")
    try:
        return Ring(fd, params, syscall)
    except BaseException:  # its queues could not be mapped: the descriptor is still ours
        os.close(fd)
        raise
