"""The Delta log's copy in the cache: what a store lists is not trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.cache.delta_log import _mirror
from shardstream.errors import ConfigurationError
from shardstream.storage import DownloadOptions, open_store
from shardstream.storage.base import ObjectInfo


def test_a_listed_log_key_that_climbs_out_of_the_log_is_refused(tmp_path: Path) -> None:
    remote = tmp_path / "table"
    (remote / "_delta_log").mkdir(parents=True)
    (remote / "_delta_log" / "00000000000000000000.json").write_text("{}\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    listing = {
        "_delta_log/00000000000000000000.json": ObjectInfo(size=3, etag=None),
        "_delta_log/../../shard.00000.mds": ObjectInfo(size=3, etag=None),
    }
    with pytest.raises(ConfigurationError, match=r"must not climb with '\.\.'"):
        _mirror(open_store(str(remote)), listing, str(cache), DownloadOptions(), str(remote))
    assert not (cache / "shard.00000.mds").exists()
