"""What every benchmark driver prints and records: aligned tables and the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any

__all__ = ["format_table", "machine", "package_versions", "worker_env", "write_report"]


def format_table(rows: list[list[str]]) -> str:
    """``rows`` (the first is the header) as aligned text: two label columns, numbers right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def worker_env(**extra: str) -> dict[str, str]:
    """The environment for a measured worker process: this one's, plus ``extra``.

    ``PYTHONDONTWRITEBYTECODE`` is dropped: the venvs are installed without byte code, so with
    it set every worker compiles each module it imports, lazily imported ones included (numpy's
    ``numpy.ma`` and ``numpy.random``, first used inside a timed start-up: tens of milliseconds
    that measure the compiler). Without it, workers use and write ``.pyc`` files as an ordinary
    installation does, for every library alike.
    """
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def machine() -> dict[str, Any]:
    """The machine, the interpreter and how busy the machine was when the run began."""
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "load_average_at_start": os.getloadavg(),
    }


def package_versions(python: str, packages: list[str]) -> dict[str, str | None]:
    """The installed version of each distribution in ``python``'s environment (None: absent)."""
    script = (
        "import json, sys\n"
        "from importlib.metadata import PackageNotFoundError, version\n"
        "found = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        found[name] = version(name)\n"
        "    except PackageNotFoundError:\n"
        "        found[name] = None\n"
        "print(json.dumps(found))\n"
    )
    try:
        completed = subprocess.run(
            [python, "-c", script, *packages], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return dict.fromkeys(packages)
    if completed.returncode != 0:
        return dict.fromkeys(packages)
    found: dict[str, str | None] = json.loads(completed.stdout)
    return found


def write_report(report: dict[str, Any], out: str) -> None:
    """Say whether every check passed, write ``report`` as JSON to ``out``; exit 1 if one failed."""
    print(f"correctness: {'PASS' if report['checks_passed'] else 'FAIL'}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as handle:
        json.dump(report, handle, indent=2)
    print(f"raw numbers: {out} ({report['seconds']:.0f} s)")
    if not report["checks_passed"]:
        raise SystemExit(1)
