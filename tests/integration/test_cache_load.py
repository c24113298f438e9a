"""Load on one node's cache: 8 rank processes x 4 DataLoader workers, cache_limit of two shards.

Every process reads through one cache folder whose limit holds two shards; shards are fetched,
opened and evicted all the time. Over several epochs nothing may hang, every epoch delivers
each sample exactly once over the ranks (plus the reported padding), every rank gets the same
count, and the shard files in the folder never pass the limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.streaming_data import write_dataset

from shardstream import LocalDataset

JOB = Path(__file__).with_name("cache_load_job.py")
RANKS, WORKERS, BATCH, EPOCHS = 8, 4, 4, 3
SAMPLES = 2000


@pytest.mark.timeout(900)
def test_eight_ranks_of_four_workers_share_a_two_shard_cache(tmp_path: Path):
    remote = write_dataset(tmp_path / "remote", SAMPLES, size_limit=8192, payload=200)
    shards = LocalDataset(remote).shards
    largest = max(entry.raw_data.bytes for entry in shards)
    limit = 2 * largest
    cache, out = tmp_path / "cache", tmp_path / "out"
    out.mkdir()
    procs = [
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
                str(RANKS),
                "--workers",
                str(WORKERS),
                "--batch-size",
                str(BATCH),
                "--epochs",
                str(EPOCHS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(RANKS)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=800)
        assert proc.returncode == 0, err[-3000:]
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(RANKS)]
    for epoch in range(EPOCHS):
        per_rank = [r["epochs"][epoch] for r in results]
        assert len({len(ids) for ids in per_rank}) == 1  # equal counts on every rank
        counts = Counter(i for ids in per_rank for i in ids)
        assert set(counts) == set(range(SAMPLES))  # every sample, none other
        padding = sum(counts.values()) - SAMPLES
        assert 0 <= padding < RANKS * BATCH  # only the last global batch is topped up
        assert sum(c - 1 for c in counts.values()) == padding
    assert max(r["peak_shard_bytes"] for r in results) <= limit
    assert len(shards) > 20 * 2  # many more shards than the cache holds
