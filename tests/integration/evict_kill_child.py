"""Run by test_evict_kill.py: stream with a tight cache and die by SIGKILL in mid-eviction.

After ``--arm-after`` samples, the next removal of a shard file (which only eviction does here:
compressed files are kept) removes the file and then kills this process, so the other file of
the same shard is left behind and the shard's lock dies with the process.
"""

from __future__ import annotations

import argparse
import os
import signal

from shardstream import StreamingDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--cache-limit", type=int, required=True)
    parser.add_argument("--arm-after", type=int, required=True)
    args = parser.parse_args()
    real_remove = os.remove
    armed = False

    def remove(path: str) -> None:
        real_remove(path)
        if armed and path.endswith(".mds"):
            os.kill(os.getpid(), signal.SIGKILL)

    os.remove = remove  # type: ignore[assignment]
    dataset = StreamingDataset(
        remote=args.remote, local=args.cache, batch_size=4, shuffle=True, keep_zip=True,
        cache_limit=args.cache_limit,
    )  # fmt: skip
    for count, _ in enumerate(dataset):
        if count == args.arm_after:
            armed = True
    raise SystemExit("the epoch ended without an eviction")


if __name__ == "__main__":
    main()
