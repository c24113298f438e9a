"""The pipe through which DataLoader workers hand their batches to the loader, made wider.

Torch's DataLoader gives its workers one result queue, a ``multiprocessing.Queue`` over one
pipe, which holds 64 KiB on Linux. A batch of 256 samples of 1 KiB pickles to ~260 KiB, so
each one crosses in four or five pieces: the worker's writing thread fills the pipe and
sleeps, the loader empties it and sleeps, and on a machine with as many busy processes as
cores every piece costs each side a trip through the scheduler. With room for a whole batch,
a worker writes it in one call and goes on to the next, and the loader reads it in one
(figures in ``docs/benchmarks.md``).
"""

from __future__ import annotations

import logging
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

from shardstream.pipeline.policy import ReadPolicy

__all__ = ["RESULT_PIPE_BYTES", "widen_result_pipe"]

_log = logging.getLogger(__name__)

#: What the result pipe is widened to by default: the read policy's ``result_pipe_bytes``.
RESULT_PIPE_BYTES = ReadPolicy.result_pipe_bytes

#: ``fcntl``'s command that sets a pipe's size (Linux only; named by Python from 3.10).
_SET_SIZE: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)


def widen_result_pipe(iterator: Any, size: int = RESULT_PIPE_BYTES) -> int | None:
    """Give the result pipe of a DataLoader iterator room for ``size`` bytes, if it can.

    Best effort: an iterator without workers, a torch whose iterator has no
    ``_worker_result_queue``, a system without ``F_SETPIPE_SZ``, or a refusal (a per-user
    limit on pipe memory) leaves everything as it was.

    Returns:
        The pipe's new size in bytes, or ``None`` where it was left alone.
    """
    queue = getattr(iterator, "_worker_result_queue", None)
    reader = getattr(queue, "_reader", None)
    if _SET_SIZE is None or reader is None or not hasattr(reader, "fileno"):
        return None
    try:
        widened: int = fcntl.fcntl(reader.fileno(), _SET_SIZE, size)
    except (OSError, ValueError) as error:  # EPERM past the user's pipe quota; a closed pipe
        _log.debug("the DataLoader's result pipe keeps its size: %s", error)
        return None
    return widened
