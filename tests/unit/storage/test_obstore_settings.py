"""Importing obstore beside a fork: the child gets the whole extension or none of it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("obstore")

# A thread imports obstore while the main thread forks; the child then reads its exceptions.
_FORK_BESIDE_AN_IMPORT = textwrap.dedent(
    """
    import os, sys, threading, time
    from shardstream.storage._obstore_settings import import_obstore

    thread = threading.Thread(target=import_obstore, args=("obstore.store", "s3"))
    thread.start()
    time.sleep(float(sys.argv[1]))
    pid = os.fork()
    if pid == 0:
        exceptions = import_obstore("obstore.exceptions", "s3")
        os._exit(0 if hasattr(exceptions, "NotFoundError") else 3)
    thread.join()
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.parametrize("delay", ["0", "0.0005", "0.001", "0.002"])
def test_a_child_forked_during_an_import_has_obstores_exceptions(delay: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", _FORK_BESIDE_AN_IMPORT, delay],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert completed.returncode == 0, completed.stderr
