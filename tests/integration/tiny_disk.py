"""A child process whose folder is a real tmpfs of a few hundred KiB, for disk-full tests.

The tmpfs is mounted in a private mount namespace (``unshare --user --map-root-user --mount``):
no privileges needed, nothing visible outside the child. The child prints one JSON line, which
is read back here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_on_tiny_disk(child: Path, mount: Path, size: str, *args: str) -> dict[str, Any]:
    """Run ``child`` with ``args`` (``{mount}`` in them becomes the tmpfs); its JSON line."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "the disk-full tests need util-linux's unshare"
    mount.mkdir()
    argv = " ".join(f"'{arg.format(mount=mount)}'" for arg in args)
    script = (
        f"mount -t tmpfs -o size={size} tmpfs '{mount}' && exec '{sys.executable}' '{child}' {argv}"
    )
    done = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
