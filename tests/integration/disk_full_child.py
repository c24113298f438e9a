"""Run by test_disk_full.py inside a mount namespace whose cache folder is a tiny tmpfs.

Streams the dataset at argv[1] into the cache argv[2] and prints one JSON line: what was raised,
and every file left in the cache with its size.
"""

from __future__ import annotations

import json
import os
import sys

from shardstream import StreamingDataset


def main() -> None:
    remote, local = sys.argv[1], sys.argv[2]
    outcome: dict[str, object] = {}
    try:
        dataset = StreamingDataset(remote=remote, local=local, batch_size=4, shuffle=False)
        outcome["samples"] = sum(1 for _ in dataset)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which checks it
        outcome["error"] = type(exc).__name__
        outcome["is_oserror"] = isinstance(exc, OSError)
        outcome["errno"] = getattr(exc, "errno", None)
        outcome["message"] = str(exc)
    outcome["files"] = {
        os.path.relpath(os.path.join(folder, name), local): os.path.getsize(
            os.path.join(folder, name)
        )
        for folder, _, names in os.walk(local)
        for name in names
    }
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
