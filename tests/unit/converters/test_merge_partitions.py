"""writer.merge.merge_partitions: only the named partitions, in the given order.

The Spark driver names the task attempts that count; the tests live beside the converters
that rely on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream import LocalDataset, MDSWriter
from shardstream.errors import ConfigurationError
from shardstream.writer.merge import merge_index, merge_partitions


def write(folder: Path, ids: range) -> None:
    with MDSWriter(out=str(folder), columns={"id": "int"}, size_limit=100) as writer:
        for i in ids:
            writer.write({"id": i})


def test_only_the_named_partitions_are_merged(tmp_path: Path):
    write(tmp_path / "part-00000-1", range(10))
    write(tmp_path / "part-00001-2", range(10, 20))  # an attempt that finished but lost
    write(tmp_path / "part-00001-5", range(10, 20))  # the attempt the driver received
    write(tmp_path / "part-00002-3", range(20, 25))
    shards = merge_partitions(str(tmp_path), ["part-00000-1", "part-00001-5", "part-00002-3"])
    with LocalDataset(tmp_path) as dataset:
        assert [dataset[i]["id"] for i in range(len(dataset))] == list(range(25))
        assert len(dataset.shards) == shards
        assert {s.raw_data.basename.split("/")[0] for s in dataset.shards} == {
            "part-00000-1", "part-00001-5", "part-00002-3"}  # fmt: skip
    # Taking every sub-folder instead would count partition 1 twice.
    assert merge_index(str(tmp_path)) > shards


def test_a_local_copy_is_read_and_written_beside_the_root(tmp_path: Path):
    write(tmp_path / "copy" / "p1", range(3))
    merge_partitions(str(tmp_path / "copy"), ["p1"], local=str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "index.json").exists()


def test_bad_partition_lists_are_refused(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="no partitions"):
        merge_partitions(str(tmp_path), [])
    with pytest.raises(ConfigurationError, match="named twice"):
        merge_partitions(str(tmp_path), ["a", "a"])
    with pytest.raises(FileNotFoundError):
        merge_partitions(str(tmp_path), ["absent"])
