"""Many file reads per system call with Linux io_uring, through ctypes: a floor, not a loader.

``floors_bench.py`` uses it to measure what reading a shuffled batch of small values would
cost if a batch's reads took one system call instead of one each: whether a batched read
could keep a loader's memory flat (nothing mapped) at the speed of reads from a mapping.
Only for that measurement: shardstream does not use it. The ring is set up with the raw
``io_uring_setup`` and ``io_uring_enter`` system calls (425 and 426), its submission and
completion queues mapped and filled with numpy, one ``IORING_OP_READ`` per value.

Nothing here runs without Linux 5.6 or later on x86-64 with io_uring allowed (containers'
seccomp profiles often forbid it): :func:`open_ring` then raises :class:`OSError`, and the
caller records why.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["Ring", "open_ring"]

_SETUP, _ENTER = 425, 426  # io_uring_setup, io_uring_enter (every architecture but alpha)
_OP_READ = 22  # IORING_OP_READ, Linux 5.6
_ENTER_GETEVENTS = 1
_OFF_SQ_RING, _OFF_SQES = 0, 0x10000000

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


class _Params(ctypes.Structure):
    """``struct io_uring_params`` (120 bytes): the offsets into the mapped rings."""

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
    """One io_uring instance of ``entries`` slots; use :func:`open_ring` to make one.

    Args:
        fd: The ring's descriptor (owned from now on).
        params: What ``io_uring_setup`` filled in.
        syscall: libc's ``syscall``.
    """

    def __init__(self, fd: int, params: _Params, syscall: Any) -> None:
        self.fd = fd
        self.entries = int(params.sq_entries)
        self._syscall = syscall
        sq, cq = params.sq_off, params.cq_off
        size = max(sq[6] + params.sq_entries * 4, cq[5] + params.cq_entries * 16)
        access = mmap.PROT_READ | mmap.PROT_WRITE
        self._rings = mmap.mmap(fd, size, mmap.MAP_SHARED, access, offset=_OFF_SQ_RING)
        self._sqe_map = mmap.mmap(
            fd, params.sq_entries * 64, mmap.MAP_SHARED, access, offset=_OFF_SQES
        )
        self._words = np.frombuffer(self._rings, np.uint32)
        self._sq_tail, self._sq_mask = sq[1] // 4, int(self._words[sq[2] // 4])
        self._sq_array = np.frombuffer(self._rings, np.uint32, params.sq_entries, sq[6])
        self._cq_head, self._cq_tail = cq[0] // 4, cq[1] // 4
        self._cq_mask = int(self._words[cq[2] // 4])
        self._cqes = np.frombuffer(self._rings, _CQE, params.cq_entries, cq[5])
        self._sqes = np.frombuffer(self._sqe_map, _SQE)
        self._slots = np.arange(self.entries, dtype=np.uint32)

    def read(
        self,
        fd: int,
        offsets: NDArray[np.int64],
        sizes: NDArray[np.int64],
        into: NDArray[np.uint8],
    ) -> NDArray[np.int64]:
        """Read ``sizes[k]`` bytes at ``offsets[k]`` of ``fd``, one after another into ``into``.

        One ``io_uring_enter`` per :attr:`entries` reads. Returns each read's result: the bytes
        read, or a negative errno.
        """
        count = len(offsets)
        dest = np.zeros(count, np.int64)
        np.cumsum(sizes[:-1], out=dest[1:])
        base = into.ctypes.data
        results = np.empty(count, np.int64)
        for first in range(0, count, self.entries):
            todo = min(self.entries, count - first)
            sqes = self._sqes[:todo]
            sqes[...] = np.zeros((), _SQE)
            sqes["opcode"] = _OP_READ
            sqes["fd"] = fd
            sqes["off"] = offsets[first : first + todo]
            sqes["addr"] = base + dest[first : first + todo]
            sqes["len"] = sizes[first : first + todo]
            sqes["user_data"] = np.arange(first, first + todo)
            tail = int(self._words[self._sq_tail])
            self._sq_array[(tail + self._slots[:todo]) & self._sq_mask] = self._slots[:todo]
            # The kernel reads the queue in the system call below, which orders these stores.
            self._words[self._sq_tail] = (tail + todo) & 0xFFFFFFFF
            done = self._syscall(_ENTER, self.fd, todo, todo, _ENTER_GETEVENTS, None, 0)
            if done < 0:
                raise OSError(ctypes.get_errno(), "io_uring_enter failed")
            head, ctail = int(self._words[self._cq_head]), int(self._words[self._cq_tail])
            cqes = self._cqes[(head + np.arange(ctail - head)) & self._cq_mask]
            results[cqes["user_data"].astype(np.int64)] = cqes["res"]
            self._words[self._cq_head] = ctail & 0xFFFFFFFF
        return results

    def close(self) -> None:
        """Unmap the queues and close the ring."""
        del self._sqes, self._cqes, self._sq_array, self._words
        self._sqe_map.close()
        self._rings.close()
        os.close(self.fd)


def open_ring(entries: int = 256) -> Ring:
    """A new ring of ``entries`` slots.

    Raises:
        OSError: io_uring is not there, or not allowed, on this machine.
    """
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        here = f"{platform.system()} {platform.machine()}"
        raise OSError(f"io_uring through raw system calls: Linux x86-64 only, not {here}")
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    params = _Params()
    fd = syscall(_SETUP, entries, ctypes.byref(params))
    if fd < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"io_uring_setup failed: {os.strerror(errno)}")
    try:
        return Ring(fd, params, syscall)
    except BaseException:  # its queues could not be mapped: the descriptor is still ours
        os.close(fd)
        raise
