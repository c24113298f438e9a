"""The ceiling run of the WAN rows (``benchmarks/wan_ceiling.py``), without a server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks.wan_ceiling import best_of, ceiling_run, object_sizes


def test_object_sizes_are_the_uploaded_keys(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "index.json").write_bytes(b"{}")
    (tmp_path / "train" / "shard.00000.mds").write_bytes(b"x" * 10)
    assert object_sizes(str(tmp_path), "s3://bucket/wan-small-1KiB-ab12") == {
        "wan-small-1KiB-ab12/index.json": 2,
        "wan-small-1KiB-ab12/train/shard.00000.mds": 10,
    }


def test_best_of_keeps_the_fastest_and_stops_at_a_failure(capsys: pytest.CaptureFixture[str]):
    runs = iter([{"seconds": 2.0, "mb_per_s": 50.0}, {"seconds": 1.0, "mb_per_s": 100.0}])
    best = best_of(2, 0.8, 0, lambda: next(runs))
    assert best == {"seconds": 1.0, "mb_per_s": 100.0, "fraction_of_link": 0.8}
    assert "workers=0 s3torch: 1.00 s, 100 MB/s raw" in capsys.readouterr().out
    calls: list[int] = []

    def failing() -> dict[str, Any]:
        calls.append(1)
        return {"failed": "OSError: refused"}

    assert best_of(3, 0.8, 2, failing) == {"failed": "OSError: refused"}
    assert calls == [1]  # no repeat after a failure


def test_a_worker_that_cannot_run_is_a_failure_naming_why(tmp_path: Path) -> None:
    # This interpreter has no s3torchconnector (the reference venv has it): the worker fails.
    measured_calls: list[list[str]] = []

    def measured(call: Any, command: list[str], **options: Any) -> tuple[Any, dict[str, float]]:
        measured_calls.append(command)
        return call(command, **options), {"bytes_down": 0}

    if importlib.util.find_spec("s3torchconnector") is not None:
        pytest.skip("s3torchconnector is importable here")
    entry = ceiling_run(sys.executable, "s3://bucket/prefix", "http://127.0.0.1:1",
                        {"prefix/a": 1}, 0, str(tmp_path / "run"), 120, measured)  # fmt: skip
    assert entry == {"failed": "ModuleNotFoundError: No module named 's3torchconnector'"}
    (command,) = measured_calls
    assert command[command.index("--uri") + 1] == "s3://bucket/prefix/"  # not prefix-litdata/
    assert (tmp_path / "run" / "manifest.json").read_text() == '{"prefix/a": 1}'
