"""kill -9 in the middle of an eviction, then the same job again: the cache is consistent."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.streaming_data import state_allowance, write_dataset

from shardstream import LocalDataset, StreamingDataset
from shardstream.format.hashing import hash_bytes

CHILD = Path(__file__).with_name("evict_kill_child.py")
SAMPLES = 240


def test_a_process_killed_mid_eviction_leaves_a_usable_cache(tmp_path: Path):
    remote = write_dataset(tmp_path / "remote", SAMPLES, compression="zstd", payload=300)
    shards = LocalDataset(remote).shards
    footprint = max(e.raw_data.bytes + (e.zip_data.bytes if e.zip_data else 0) for e in shards)
    limit = 3 * footprint + state_allowance(remote, tmp_path / "allowance")
    cache = tmp_path / "cache"
    done = subprocess.run(
        [sys.executable, str(CHILD), "--remote", str(remote), "--cache", str(cache),
         "--cache-limit", str(limit), "--arm-after", "30"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    # One shard lost its uncompressed file and kept its compressed one.
    raw = {e.raw_data.basename for e in shards}
    zipped = {e.zip_data.basename: e.raw_data.basename for e in shards if e.zip_data}
    present = {p.name for p in cache.iterdir() if p.is_file()}
    assert any(name in present and raw_name not in present for name, raw_name in zipped.items())
    # The same job again, with no clean-up: every sample once, files whole.
    again = StreamingDataset(remote=str(remote), local=str(cache), batch_size=4, shuffle=True,
                             keep_zip=True, cache_limit=limit)  # fmt: skip
    ids = sorted(int(sample["id"]) for sample in again)
    assert ids == list(range(SAMPLES))
    for entry in shards:
        path = cache / entry.raw_data.basename
        if path.name in raw and path.exists():
            assert hash_bytes("xxh64", path.read_bytes()) == entry.raw_data.hashes["xxh64"]
    assert not [p.name for p in cache.iterdir() if ".tmp-" in p.name]
