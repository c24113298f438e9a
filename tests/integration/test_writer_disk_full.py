"""A writer's output disk fills up: a DiskFullError naming shard, samples and folder; whole files.

The output folder is on a real tmpfs of a few hundred KiB, mounted in a private mount namespace
(``unshare --user --map-root-user --mount``), as in test_disk_full.py.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from tests.integration.tiny_disk import run_on_tiny_disk

CHILD = Path(__file__).with_name("writer_disk_full_child.py")


def write_into_tiny_disk(mount: Path, size: str) -> dict[str, Any]:
    return run_on_tiny_disk(CHILD, mount, size, "{mount}/ds")


def test_a_full_disk_while_writing_leaves_only_whole_shards(tmp_path: Path):
    mount = tmp_path / "mnt"
    result = write_into_tiny_disk(mount, "700k")  # three shards of two 100 kB samples fit
    assert result["error"] == "DiskFullError", result
    assert result["is_oserror"] is True
    assert result["errno"] == errno.ENOSPC
    files = result["files"]
    assert "index.json" not in files  # nothing published
    assert not [name for name in files if ".tmp" in name], files  # no temporary left
    shards = sorted(files)
    assert shards == [f"shard.{n:05}.mds" for n in range(len(shards))], files
    assert len(shards) == 3, files
    for name, (size, claimed) in files.items():
        assert size == claimed, (name, size, claimed)  # each shard file is whole
    message = result["message"]
    assert f"no space left in {mount}/ds for shard.00003.mds (samples 6 to 7," in message
    assert "bytes free now" in message
    assert "free disk space or write to a roomier folder" in message
