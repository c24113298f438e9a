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


def mapped_kib(folder: str) -> int:
    """This process's resident memory of the files it maps under ``folder``, in KiB."""
    total, counting = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                counting = len(fields) > 5 and fields[5].startswith(folder)  # a mapping's line
            elif counting and fields and fields[0] == "Rss:":
                total += int(fields[1])
    return total
