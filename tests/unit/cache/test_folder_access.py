"""A remote stream's cache folder that cannot be written: one clear error before any write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.delta_data import table_with_versions
from tests.integration.tiny_disk import run_on_tiny_disk
from tests.parquet_data import write_parquet
from tests.streaming_data import write_dataset

from shardstream import StreamingDataset

CHILD = Path(__file__).parents[2] / "integration" / "disk_full_child.py"
ADVICE = "Pass a writable local= folder"


def write_remote(root: Path, kind: str) -> Path:
    if kind == "mds":
        return write_dataset(root, 20)
    if kind == "parquet":
        return write_parquet(root, [(10, 5)])
    return table_with_versions(root)


@pytest.mark.parametrize("kind", ["mds", "parquet", "delta"])
@pytest.mark.parametrize("cache", ["{mount}", "{mount}/not/made/yet"])
def test_a_read_only_mount_as_cache_names_the_folder_and_what_to_do(
    tmp_path: Path, kind: str, cache: str
):
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    remote = write_remote(tmp_path / "remote", kind)
    mount = tmp_path / "mount"
    outcome = run_on_tiny_disk(CHILD, mount, "64k,ro", str(remote), cache)  # a read-only tmpfs
    assert outcome["error"] == "CacheFolderError", outcome
    assert outcome["is_oserror"]  # a PermissionError still, for code that catches those
    message = outcome["message"]
    assert f"the cache folder {cache.format(mount=mount)} is read-only" in message
    assert str(remote) in message
    assert ADVICE in message
    assert "without remote=" in message


@pytest.fixture
def shared_top() -> Iterator[Path]:
    """A folder that the user ``nobody`` can reach (the test's own tmp_path is root's alone)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the reader drops to the user nobody")
    top = Path(tempfile.mkdtemp(prefix="shardstream-folder-access-"))
    try:
        top.chmod(0o755)
        yield top
    finally:
        for folder, _, _ in os.walk(top):
            os.chmod(folder, 0o755)  # noqa: S103 - read-only folders cannot be emptied
        shutil.rmtree(top)


NOBODY = 65534
#: Drops to the user ``nobody`` (modules imported as root first) and streams into argv[2].
AS_NOBODY = """
import json, os, sys
from shardstream import StreamingDataset
from shardstream.errors import CacheFolderError
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    sum(1 for _ in StreamingDataset(remote=sys.argv[1], local=sys.argv[2], batch_size=4))
    print(json.dumps({"read": True}))
except CacheFolderError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def test_a_folder_without_write_permission_names_the_folder(shared_top: Path):
    remote = write_dataset(shared_top / "remote", 20)
    for folder, _, names in os.walk(shared_top):
        os.chmod(folder, 0o755)  # noqa: S103 - readable by nobody
        for name in names:
            os.chmod(os.path.join(folder, name), 0o644)
    cache = shared_top / "cache"
    cache.mkdir(mode=0o555)
    os.chown(cache, NOBODY, NOBODY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.run([sys.executable, "-c", AS_NOBODY, str(remote), str(cache)], env=env,
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    outcome = json.loads(child.stdout.strip().splitlines()[-1])
    assert "error" in outcome, outcome
    assert f"the cache folder {cache} is read-only" in outcome["error"]
    assert not list(cache.iterdir())


def test_a_writable_folder_and_one_still_to_make_pass(tmp_path: Path):
    from shardstream.cache.folder_access import require_writable

    require_writable(str(tmp_path), remote="s3://bucket/ds")
    require_writable(str(tmp_path / "a" / "b"), remote="s3://bucket/ds")
    remote = write_dataset(tmp_path / "remote", 20)
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "a" / "b"), batch_size=4)
    assert sum(1 for _ in ds) == 20
