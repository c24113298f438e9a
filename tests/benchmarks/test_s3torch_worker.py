"""The s3torchconnector worker's check (``benchmarks/s3torch_worker.py``), on canned reads."""

from __future__ import annotations

from benchmarks.s3torch_worker import check_objects

MANIFEST = {"p/index.json": 2, "p/shard.00000.mds": 10, "p/shard.00001.mds": 7}


def test_every_object_once_and_whole_passes() -> None:
    read = [("p/shard.00001.mds", 7), ("p/index.json", 2), ("p/shard.00000.mds", 10)]
    assert check_objects(read, MANIFEST) == {
        "passed": True, "objects": 3, "missing": [], "extra": [], "repeated": [],
        "wrong_size": [],
    }  # fmt: skip


def test_a_missing_repeated_extra_or_short_object_fails() -> None:
    whole = [("p/index.json", 2), ("p/shard.00000.mds", 10), ("p/shard.00001.mds", 7)]
    cases = {
        "missing": whole[:2],
        "repeated": [*whole, ("p/index.json", 2)],
        "extra": [*whole, ("p-litdata/chunk-0.bin", 5)],
        "wrong_size": [whole[0], ("p/shard.00000.mds", 9), whole[2]],
    }
    for field, read in cases.items():
        checks = check_objects(read, MANIFEST)
        assert checks["passed"] is False, field
        assert checks[field], field
