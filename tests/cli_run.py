"""Running the ``shardstream`` command in a subprocess, and a small dataset for it to read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from shardstream import MDSWriter

COLUMNS = {"id": "int", "text": "str", "blob": "bytes", "vec": "ndarray:float32:4"}


def run(*args: str, env: dict[str, str] | None = None, check: int | None = 0) -> Any:
    """Run ``python -m shardstream.cli ARGS``; assert its exit code when ``check`` is given."""
    done = subprocess.run(
        [sys.executable, "-m", "shardstream.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout, done.stderr)
    return done


def write(out: Path | str, n: int, start: int = 0, **kwargs: Any) -> None:
    with MDSWriter(out=str(out), columns=COLUMNS, size_limit=2000, **kwargs) as writer:
        for i in range(start, start + n):
            writer.write({
                "id": i, "text": f"sample {i}", "blob": bytes([i % 256]) * (i % 50),
                "vec": np.arange(4, dtype=np.float32) + i,
            })  # fmt: skip
