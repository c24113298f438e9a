"""S3 listings read from the page's own XML: every key, size and tag, page after page."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.storage import S3Store
from shardstream.storage import s3 as s3_module

from .conftest import S3Server

pytestmark = pytest.mark.s3

KEYS = ["a b.bin", "c+d.bin", "e%41.bin", "f&g<h>.bin", "ünï.bin", "n/deep/x.bin", "z.bin"]


def test_list_info_reads_every_key_size_and_tag_across_pages(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = S3Store(
        s3_env.url("listing"), endpoint_url=s3_env.endpoint, key=s3_env.key, secret=s3_env.secret
    )
    source = tmp_path / "f.bin"
    for number, key in enumerate(KEYS):
        source.write_bytes(bytes([number]) * (number + 1))
        store.put_file(str(source), key)
    monkeypatch.setattr(s3_module, "_PAGE_KEYS", 2)  # four pages, three continuation tokens
    listed = store.list_info()
    assert sorted(listed) == sorted(KEYS)
    for number, key in enumerate(KEYS):
        info = store.info(key)
        assert listed[key].size == number + 1 == info.size
        assert listed[key].etag == info.etag
        assert info.etag
        assert '"' not in info.etag
    assert sorted(store.list_info("n/")) == ["n/deep/x.bin"]
    assert store.list_info("nothing-here/") == {}
