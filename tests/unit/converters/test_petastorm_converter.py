"""The Petastorm converter's pure parts: codecs, the cache folder lookup, the epoch tail."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream.converters import spark_cache
from shardstream.converters.spark_cache import (
    PARENT_CACHE_DIR_URL_CONF,
    SHARDSTREAM_CACHE_DIR_URL_CONF,
    delete_cached,
    parent_cache_dir,
)
from shardstream.converters.spark_cache_key import mds_compression
from shardstream.errors import ConfigurationError
from shardstream.loader import SparkDatasetConverter
from shardstream.loader.epoch_tail import EpochTail
from shardstream.sampling import Topology


@pytest.mark.parametrize(
    ("codec", "expected"),
    [
        (None, "zstd"),
        ("uncompressed", None),
        ("gzip", "gz"),
        ("deflate", "gz"),
        ("bzip2", "bz2"),
        ("snappy", "snappy"),
        ("lz4", "zstd"),
        ("SNAPPY", "snappy"),
        ("zstd:7", "zstd:7"),
        ("br", "br"),
    ],
)
def test_codecs(codec: str | None, expected: str | None):
    assert mds_compression(codec) == expected


@pytest.mark.parametrize("codec", ["lzo", "", 3])
def test_unknown_codec(codec: Any):
    with pytest.raises(ConfigurationError, match="compression_codec"):
        mds_compression(codec)


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class FakeSpark:
    def __init__(self, **values: str) -> None:
        self.conf = FakeConf(values)


def test_cache_folder_order():
    both = FakeSpark(**{PARENT_CACHE_DIR_URL_CONF: "/ps/", SHARDSTREAM_CACHE_DIR_URL_CONF: "/ours"})
    assert parent_cache_dir(both, "s3://b/arg") == "s3://b/arg"
    assert parent_cache_dir(both, None) == "/ps"
    assert parent_cache_dir(FakeSpark(**{SHARDSTREAM_CACHE_DIR_URL_CONF: "/ours"}), None) == "/ours"


def test_no_cache_folder_names_all_three():
    with pytest.raises(ConfigurationError) as caught:
        parent_cache_dir(FakeSpark(), None)
    for name in ("parent_cache_dir_url", PARENT_CACHE_DIR_URL_CONF, SHARDSTREAM_CACHE_DIR_URL_CONF):
        assert name in str(caught.value)


def test_delete_refuses_object_stores():
    with pytest.raises(ConfigurationError, match="never deletes"):
        delete_cached("s3://bucket/cache/key")


def test_marker_first_creator_wins(tmp_path: Path):
    assert spark_cache._publish_marker(str(tmp_path), {"dataset": "run-a", "rows": 3})
    assert not spark_cache._publish_marker(str(tmp_path), {"dataset": "run-b", "rows": 3})
    assert json.loads((tmp_path / "converter.json").read_text())["dataset"] == "run-a"
    assert [p.name for p in tmp_path.iterdir()] == ["converter.json"]  # no temporaries left
    found = spark_cache._read_marker(str(tmp_path))
    assert found is not None
    assert (found.url, found.rows, found.created) == (str(tmp_path / "run-a"), 3, False)


def test_a_bad_marker_is_an_error(tmp_path: Path):
    (tmp_path / "converter.json").write_text('{"dataset": "../x", "rows": 1}')
    with pytest.raises(ConfigurationError, match="not a converter marker"):
        spark_cache._read_marker(str(tmp_path))


def test_converter_constructor_does_no_io(tmp_path: Path):
    converter = SparkDatasetConverter(str(tmp_path / "missing"), 12)
    assert len(converter) == 12
    assert converter.cache_dir_url == str(tmp_path / "missing")
    assert SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF == PARENT_CACHE_DIR_URL_CONF


@pytest.mark.parametrize(
    ("epoch_size", "batch", "nodes", "per_node"),
    [(10, 4, 1, 1), (103, 8, 1, 3), (103, 8, 2, 2), (7, 5, 1, 4), (24, 8, 1, 3), (1, 1, 1, 2)],
)
def test_tail_keeps_each_position_once(epoch_size: int, batch: int, nodes: int, per_node: int):
    """Over every rank, the kept positions of all steps are 0 .. epoch_size - 1, once each."""
    kept = []
    for rank in range(nodes * per_node):
        topology = Topology(nodes=nodes, ranks_per_node=per_node, rank=rank)
        tail = EpochTail.of(epoch_size=epoch_size, batch_size=batch, topology=topology)
        global_batch = batch * nodes * per_node
        for step in range(tail.steps):
            # The last step holds as many places for each rank as its last batch has rows.
            width = len(tail.keep) if step == tail.steps - 1 else batch
            within = np.arange(width)
            offsets = topology.node + nodes * (topology.rank_of_node + per_node * within)
            positions = step * global_batch + offsets
            if step == tail.steps - 1:
                positions = positions[tail.keep]
            kept.append(positions.tolist())
    assert sorted(itertools.chain(*kept)) == list(range(epoch_size))


def test_tail_without_padding():
    tail = EpochTail.of(epoch_size=12, batch_size=4, topology=Topology())
    assert (tail.steps, tail.padded) == (3, False)
