"""What every benchmark driver prints and records: aligned tables and the machine it ran on."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

__all__ = ["format_table", "machine"]


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
