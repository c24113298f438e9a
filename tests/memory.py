"""This process's resident memory, read from Linux's ``/proc`` (for tests of what is mapped)."""

from __future__ import annotations

import os

#: Whether ``/proc/self/status`` can be read here (Linux).
HAS_PROC_STATUS = os.path.exists("/proc/self/status")


def rss_file_kib() -> int:
    """The process's resident file-backed memory (``RssFile``), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")
