"""S3Store and MDSWriter against a real S3-compatible server (SeaweedFS, auth enforced)."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import MDSWriter
from shardstream.errors import CredentialsError, ObjectNotFoundError, StorageError, UploadError
from shardstream.storage import S3Store, _aws_chain, open_store
from shardstream.writer import mds_writer

from .conftest import S3Server

pytestmark = pytest.mark.s3


def write(out: Any, n: int, **kwargs: Any) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))


def download(store: S3Store, folder: Path) -> list[str]:
    keys = store.list()
    for key in keys:
        target = folder / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.get_bytes(key))
    return keys


def test_put_get_exists_size_list(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    # Explicit arguments win over the environment (here holding a wrong secret).
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = S3Store(
        s3_env.url("roundtrip"), endpoint_url=s3_env.endpoint, key=s3_env.key, secret=s3_env.secret
    )
    data = os.urandom(100_000)
    source = tmp_path / "f.bin"
    source.write_bytes(data)
    store.put_file(str(source), "a.bin")
    store.put_file(str(source), "sub/b.bin")
    assert store.get_bytes("a.bin") == data
    assert store.exists("a.bin")
    assert store.exists("sub/b.bin")
    assert not store.exists("missing.bin")
    assert store.size("sub/b.bin") == len(data)
    assert store.list() == ["a.bin", "sub/b.bin"]
    assert store.list("sub/") == ["sub/b.bin"]
    with pytest.raises(ObjectNotFoundError, match=r"s3://.*/missing\.bin") as info:
        store.get_bytes("missing.bin")
    assert isinstance(info.value, FileNotFoundError)
    source.write_bytes(b"replaced")
    store.put_file(str(source), "a.bin")  # overwriting is a plain PUT too
    assert store.get_bytes("a.bin") == b"replaced"


def test_writer_publishes_to_s3(s3_env: S3Server, tmp_path: Path):
    url = s3_env.url("writer")
    write(url, 20)
    store = open_store(url)
    assert isinstance(store, S3Store)
    keys = download(store, tmp_path / "copy")
    assert "index.json" in keys
    assert len(keys) > 3  # several shards
    check_dataset(tmp_path / "copy", 20)


def test_writer_with_a_local_folder_keeps_it(s3_env: S3Server, tmp_path: Path):
    url = s3_env.url("pair")
    local = tmp_path / "local"
    write((str(local), url), 12, keep_local=True, compression="zstd")
    store = S3Store(url)
    remote = sorted(store.list())
    assert remote == sorted(os.listdir(local))  # before reading, which decompresses locally
    for key in remote:
        assert store.get_bytes(key) == (local / key).read_bytes()
    check_dataset(local, 12)


def test_index_is_published_with_every_shard(s3_env: S3Server):
    url = s3_env.url("complete")
    write(url, 15)
    store = S3Store(url)
    index = json.loads(store.get_bytes("index.json"))
    shards = {shard["raw_data"]["basename"] for shard in index["shards"]}
    assert len(shards) > 1
    assert set(store.list()) == {*shards, "index.json"}


class FailingStore:
    """An S3Store whose first shard fails, once the test says so (after every write)."""

    def __init__(self, inner: S3Store, release: threading.Event) -> None:
        self.inner = inner
        self.release = release

    def put_file(self, local_path: str, key: str) -> None:
        if key.endswith(".00000.mds"):
            self.release.wait(10)
            raise OSError("injected failure")
        self.inner.put_file(local_path, key)

    def url(self, key: str) -> str:
        return self.inner.url(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)


def test_a_failed_shard_upload_publishes_no_index(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
):
    url = s3_env.url("failing")
    release = threading.Event()
    monkeypatch.setattr(mds_writer, "open_store", lambda u, **_: FailingStore(S3Store(u), release))
    writer = MDSWriter(out=url, columns=COLUMNS, size_limit=300, retry=0)
    for i in range(15):
        writer.write(sample(i))
    release.set()
    with pytest.raises(UploadError, match=r"shard\.[0-9a-f]{12}\.00000\.mds"):
        writer.finish()
    store = S3Store(url)
    assert not store.exists("index.json")
    assert "index.json" not in store.list()


def test_wrong_credentials_name_the_url_and_their_source(s3_env: S3Server, tmp_path: Path):
    wrong = "wrong-" + s3_env.secret[::-1]
    url = s3_env.url("denied")
    store = S3Store(url, endpoint_url=s3_env.endpoint, key=s3_env.key, secret=wrong)
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(CredentialsError) as info:
        store.put_file(str(source), "f")
    message = str(info.value)
    assert url + "/f" in message
    assert "AWS_ACCESS_KEY_ID" in message
    assert "S3_ENDPOINT_URL" in message
    assert wrong not in message
    assert s3_env.secret not in message
    assert isinstance(info.value, StorageError)
    assert isinstance(info.value, OSError)


def test_wrong_credentials_from_the_environment_fail_the_writer(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    wrong = "wrong-" + s3_env.secret[::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    url = s3_env.url("denied-env")
    caplog.set_level(logging.DEBUG, logger="shardstream")
    with pytest.raises(UploadError, match="AWS_ACCESS_KEY_ID") as info:
        write(url, 3, retry=1)
    assert isinstance(info.value.__cause__, CredentialsError)
    assert url in str(info.value)
    for text in (str(info.value), caplog.text):
        assert wrong not in text
        assert s3_env.secret not in text


def test_a_dataset_regenerated_in_place_is_read_anew_through_the_cache(
    s3_env: S3Server, tmp_path: Path
):
    """Same shard names, sizes and index.json, new bytes: the cache notices by the ETags."""
    from shardstream import StreamingDataset

    url, local = s3_env.url("regenerated"), tmp_path / "cache"
    columns = {"id": "int", "text": "str"}

    def regenerate(label: str) -> bytes:
        # Written locally (the reference's names) and copied up file by file, as the reference
        # or a sync tool does: shardstream's own writer names each write's shards anew.
        folder = tmp_path / label
        with MDSWriter(out=folder, columns=columns, size_limit=300) as writer:
            for i in range(20):
                writer.write({"id": i, "text": f"{label}-{i:03d}"})
        store = open_store(url)
        for name in sorted(os.listdir(folder)):
            store.put_file(str(folder / name), name)
        return bytes(store.get_bytes("index.json"))

    def texts() -> list[str]:
        dataset = StreamingDataset(remote=url, local=str(local), batch_size=1)
        return [sample["text"] for sample in dataset]

    index = regenerate("aaa")
    assert texts()[0] == "aaa-000"
    assert regenerate("bbb") == index
    assert texts() == [f"bbb-{i:03d}" for i in range(20)]


def test_the_kept_session_follows_the_environments_credentials(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    # One botocore session serves the process; it must not keep serving credentials the
    # environment has since changed, nor hide credentials passed explicitly.
    monkeypatch.setattr(_aws_chain, "SESSIONS", _aws_chain.Sessions())
    url = s3_env.url("kept-session")
    source = tmp_path / "object.bin"
    source.write_bytes(b"kept")
    S3Store(url).put_file(str(source), "object.bin")
    assert S3Store(url).get_bytes("object.bin") == b"kept"  # the session made, and kept
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3_env.secret[::-1])
    with pytest.raises(CredentialsError):
        S3Store(url).get_bytes("object.bin")
    explicit = S3Store(url, key=s3_env.key, secret=s3_env.secret)
    assert explicit.get_bytes("object.bin") == b"kept"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_env.secret)
    assert S3Store(url).get_bytes("object.bin") == b"kept"
