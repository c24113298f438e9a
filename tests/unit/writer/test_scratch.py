"""The temporary folder of a writer with a URL ``out``: swept once its writer is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shardstream.writer.scratch import ScratchFolder

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")

HOLDER = """
import sys, tempfile, time
tempfile.tempdir = sys.argv[1]
from shardstream.writer.scratch import ScratchFolder
folder = ScratchFolder()
with open(folder.path + "/shard.abc.00000.mds", "wb") as shard:
    shard.write(b"half a dataset")
print(folder.path, flush=True)
time.sleep(60)
"""


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_folder_of_a_killed_writer_is_swept_and_a_live_ones_is_not(temporary: Path):
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(temporary)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as child:
        try:
            assert child.stdout is not None
            theirs = child.stdout.readline().strip()
            assert os.path.isdir(theirs)
            mine = ScratchFolder()  # its writer is alive: left alone
            assert os.path.isdir(theirs)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            again = ScratchFolder()
            assert not os.path.exists(theirs)
            assert os.path.isdir(mine.path)  # held by this process
            for folder in (mine, again):
                folder.release(keep=False)
            assert os.listdir(temporary) == []
        finally:
            child.kill()


def test_a_kept_folder_is_never_swept(temporary: Path):
    kept = ScratchFolder()
    Path(kept.path, "shard.00000.mds").write_bytes(b"kept on purpose")
    kept.release(keep=True)
    ScratchFolder().release(keep=False)
    assert os.listdir(kept.path) == ["shard.00000.mds"]
