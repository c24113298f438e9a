"""Load on one node's cache: 8 rank processes x 4 DataLoader workers, cache_limit of two shards.

Every process reads through one cache folder whose limit holds two shards (beside the cached
index and state, which the limit counts too); shards are fetched,
opened and evicted all the time. Over several epochs nothing may hang, every epoch delivers
each sample exactly once over the ranks (plus the reported repeats), every rank gets the same
count, and the shard files in the folder never pass the limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.streaming_data import state_allowance, write_dataset

from shardstream import LocalDataset
from shardstream.format.hashing import hash_bytes

JOB = Path(__file__).with_name("cache_load_job.py")
RANKS, WORKERS, BATCH, EPOCHS = 8, 4, 4, 3
SAMPLES = 2000


def start(remote: Path, cache: Path, out: Path, limit: int, ranks: int, workers: int,
          epochs: int, seed: int = 5) -> list[subprocess.Popen[str]]:  # fmt: skip
    """The rank processes of one job, started."""
    out.mkdir()
    return [
        subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                "--remote",
                str(remote),
                "--cache",
                str(cache),
                "--out",
                str(out),
                "--cache-limit",
                str(limit),
                "--rank",
                str(rank),
                "--world-size",
                str(ranks),
                "--workers",
                str(workers),
                "--batch-size",
                str(BATCH),
                "--epochs",
                str(epochs),
                "--seed",
                str(seed),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(ranks)
    ]


def finish(procs: list[subprocess.Popen[str]], out: Path) -> list[dict[str, Any]]:
    """Wait for a job's ranks; check every epoch; return what each rank recorded."""
    for proc in procs:
        _, err = proc.communicate(timeout=800)
        assert proc.returncode == 0, err[-3000:]
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(len(procs))]
    for epoch in range(len(results[0]["epochs"])):
        per_rank = [r["epochs"][epoch] for r in results]
        assert len({len(ids) for ids in per_rank}) == 1  # equal counts on every rank
        counts = Counter(i for ids in per_rank for i in ids)
        assert set(counts) == set(range(SAMPLES))  # every sample, none other
        padding = sum(counts.values()) - SAMPLES
        assert padding == -SAMPLES % len(procs)  # only repeats that make the ranks equal
        assert sum(c - 1 for c in counts.values()) == padding
    return results


def check_cached_files(remote: Path, cache: Path) -> None:
    """Every shard file left in the cache is whole and has the digest its index records."""
    for entry in LocalDataset(remote).shards:
        path = cache / entry.raw_data.basename
        if path.exists():
            assert hash_bytes("xxh64", path.read_bytes()) == entry.raw_data.hashes["xxh64"]


@pytest.mark.timeout(900)
def test_eight_ranks_of_four_workers_share_a_two_shard_cache(tmp_path: Path):
    remote = write_dataset(tmp_path / "remote", SAMPLES, size_limit=8192, payload=200)
    shards = LocalDataset(remote).shards
    kept = state_allowance(remote, tmp_path / "allowance", readers=RANKS * (WORKERS + 1))
    limit = 2 * max(entry.raw_data.bytes for entry in shards) + kept
    cache, out = tmp_path / "cache", tmp_path / "out"
    results = finish(start(remote, cache, out, limit, RANKS, WORKERS, EPOCHS), out)
    assert max(r["peak_shard_bytes"] for r in results) <= limit
    assert len(shards) > 20 * 2  # many more shards than the cache holds
    check_cached_files(remote, cache)
    # Steady work: every epoch refetches every shard through the two-shard cache, so a later
    # epoch that downloads far more than the first means the ranks thrash (fetch and evict
    # again and again).
    per_epoch = [sum(r["downloads"][epoch] for r in results) for epoch in range(EPOCHS)]
    assert per_epoch[0] >= len(shards), per_epoch  # the counter sees every fetch
    assert max(per_epoch[1:]) <= 2 * per_epoch[0], per_epoch


@pytest.mark.timeout(900)
def test_two_jobs_share_one_cache_folder(tmp_path: Path):
    """Two jobs of other shapes and seeds, at once, on one cache of three shards, 3 epochs."""
    remote = write_dataset(tmp_path / "remote", SAMPLES, size_limit=8192, payload=200)
    kept = state_allowance(remote, tmp_path / "allowance", readers=20)
    limit = 3 * max(entry.raw_data.bytes for entry in LocalDataset(remote).shards) + kept
    cache = tmp_path / "cache"
    first = start(remote, cache, tmp_path / "a", limit, ranks=3, workers=2, epochs=3, seed=1)
    second = start(remote, cache, tmp_path / "b", limit, ranks=2, workers=3, epochs=3, seed=2)
    results = finish(first, tmp_path / "a") + finish(second, tmp_path / "b")
    assert max(r["peak_shard_bytes"] for r in results) <= limit
    check_cached_files(remote, cache)
