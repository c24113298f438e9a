"""Run a call in a forked child and bring back what it answered (fork-safety tests)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

__all__ = ["in_forked_child"]


def in_forked_child(call: Callable[[], str]) -> str:
    """``call()`` in a child forked from this process, or the ``repr`` of what it raised.

    The child leaves with ``os._exit``, never running pytest's teardown; a child that fails to
    exit cleanly fails the assertion here.
    """
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (Python 3.12+)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            answer = call()
        except BaseException as exc:  # noqa: BLE001 (the parent reports it)
            answer = repr(exc)
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    assert os.waitpid(pid, 0)[1] == 0
    return answer
