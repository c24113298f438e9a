"""Uploads through a fault-injecting proxy in front of SeaweedFS: retried, or no index at all.

MDSWriter publishes to ``s3://`` with ``S3_ENDPOINT_URL`` pointing at the proxy, as a user's
environment would; the proxy answers the next PUTs of one shard with a fault.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import MDSWriter
from shardstream.errors import UploadError
from shardstream.storage import S3Store

from .conftest import S3Server
from .faults import Fault, FaultProxy

pytestmark = pytest.mark.s3

SAMPLES = 40


@pytest.fixture
def proxy(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as fault_proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", fault_proxy.endpoint)
        yield fault_proxy


def publish(url: str, retry: int) -> None:
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300, retry=retry) as writer:
        for i in range(SAMPLES):
            writer.write(sample(i))


def copy_down(url: str, endpoint: str, folder: Path) -> list[str]:
    store = S3Store(url, endpoint_url=endpoint)
    keys = store.list()
    for key in keys:
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_bytes(store.get_bytes(key))
    return keys


# A PUT's answer has no body to cut short; a connection that goes silent and then closes is
# the upload's version of a truncated answer.
FAULTS: list[Fault] = ["status503", "status500", "reset", "stall"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_failed_upload_is_retried_and_the_dataset_is_whole(
    s3_env: S3Server, proxy: FaultProxy, tmp_path: Path, fault: Fault
):
    url = s3_env.url(f"upload-{fault}-{uuid.uuid4().hex[:6]}")
    proxy.inject(fault, count=2, method="PUT", path_contains=".00001.mds", stall_seconds=1)
    publish(url, retry=3)
    assert proxy.count("PUT", ".00001.mds") >= 3  # two failures, then success
    keys = copy_down(url, s3_env.endpoint, tmp_path / "copy")
    assert "index.json" in keys
    check_dataset(tmp_path / "copy", SAMPLES)


def test_an_upload_that_keeps_failing_publishes_no_index(
    s3_env: S3Server, proxy: FaultProxy, tmp_path: Path
):
    url = s3_env.url(f"upload-fails-{uuid.uuid4().hex[:6]}")
    proxy.inject("status500", count=1000, method="PUT", path_contains=".00002.mds")
    with pytest.raises(UploadError, match=r"shard\.[0-9a-f]{12}\.00002\.mds"):
        publish(url, retry=1)
    keys = copy_down(url, s3_env.endpoint, tmp_path / "copy")
    assert "index.json" not in keys
    assert proxy.count("PUT", "index.json") == 0
