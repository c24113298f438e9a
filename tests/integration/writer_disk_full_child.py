"""Run by test_writer_disk_full.py inside a mount namespace whose argv[1] is a tiny tmpfs.

Writes a dataset into the folder argv[2] until the disk fills up, and prints one JSON line: what
was raised, and every file left with its size and, for a shard, the size its header claims.
"""

from __future__ import annotations

import json
import os
import struct
import sys

from shardstream import MDSWriter


def claimed_size(path: str) -> int:
    """The file size a shard's offset table ends with (the whole shard's size)."""
    with open(path, "rb") as handle:
        head = handle.read(4)
        (count,) = struct.unpack("<I", head)
        handle.seek(4 + 4 * count)
        (end,) = struct.unpack("<I", handle.read(4))
    return int(end)


def main() -> None:
    out = sys.argv[1]
    outcome: dict[str, object] = {}
    try:
        with MDSWriter(out=out, columns={"id": "int", "data": "bytes"}, size_limit=300_000) as w:
            for i in range(30):
                w.write({"id": i, "data": os.urandom(100_000)})
    except Exception as exc:  # noqa: BLE001 - reported to the test, which checks it
        outcome["error"] = type(exc).__name__
        outcome["is_oserror"] = isinstance(exc, OSError)
        outcome["errno"] = getattr(exc, "errno", None)
        outcome["message"] = str(exc)
    outcome["files"] = {
        name: [os.path.getsize(os.path.join(out, name)), claimed_size(os.path.join(out, name))]
        if name.endswith(".mds")
        else [os.path.getsize(os.path.join(out, name)), None]
        for name in sorted(os.listdir(out))
    }
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
