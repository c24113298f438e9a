"""OCIStore and MDSWriter against a local OCI Object Storage server (tests/integration/fake_oci.py).

No emulator of OCI Object Storage exists, so the server is a small fake on 127.0.0.1 that
implements the documented REST calls the store makes (GetObject with Range, HeadObject,
PutObject, paged ListObjects) and verifies each request's signature against the test's key.
The real ``oci`` SDK makes the requests; a guard fails any test that connects elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.forked import in_forked_child
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import MDSWriter
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    StorageError,
    UploadError,
)
from shardstream.storage import OCIStore, open_store, store_base

from .fake_oci import BUCKET, NAMESPACE, PAGE_SIZE, OCIAccount


def write(out: Any, n: int, **kwargs: Any) -> None:
    with MDSWriter(out=out, columns=COLUMNS, size_limit=300, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))


def put(store: OCIStore, tmp_path: Path, key: str, data: bytes) -> None:
    source = tmp_path / "upload.bin"
    source.write_bytes(data)
    store.put_file(str(source), key)


def list_calls(account: OCIAccount) -> int:
    """How many ListObjects requests the service has seen."""
    return sum(1 for m, p in account.server.requests if urlsplit(p).path.endswith("/o"))


def test_round_trip_range_info_and_overwrite(oci_env: OCIAccount, tmp_path: Path):
    store = OCIStore(oci_env.url("roundtrip"))
    data = os.urandom(70_000)
    put(store, tmp_path, "a.bin", data)
    assert store.get_bytes("a.bin") == data
    assert store.get_range("a.bin", 0, 1) == data[:1]
    assert store.get_range("a.bin", 1000, 5000) == data[1000:5000]
    assert store.get_range("a.bin", 69_999, 70_000) == data[-1:]
    assert store.get_range("a.bin", 70_000, 70_000) == b""
    first = store.info("a.bin")
    assert first.size == len(data)
    assert first.etag
    put(store, tmp_path, "a.bin", b"replaced")
    assert store.get_bytes("a.bin") == b"replaced"
    second = store.info("a.bin")
    assert (second.size, second.etag != first.etag) == (8, True)
    # What the service was asked: a ranged GetObject on the object's full name.
    ranged = [p for m, p in oci_env.server.requests if m == "GET" and "a.bin" in p]
    assert ranged
    assert all(p.startswith(f"/n/{NAMESPACE}/b/{BUCKET}/o/") for p in ranged)


def test_a_forked_child_reads_through_a_client_of_its_own(oci_env: OCIAccount, tmp_path: Path):
    """A parent's SDK client (its pooled connections) is never a forked child's (the base's)."""
    store = OCIStore(oci_env.url("fork"))
    put(store, tmp_path, "a.bin", b"0123456789")
    assert store.get_range("a.bin", 2, 5) == b"234"
    parent_client = id(store._oci_client())

    def read_in_child() -> str:
        data = store.get_range("a.bin", 5, 8)
        return f"{data!r} {id(store._oci_client()) != parent_client}"

    assert in_forked_child(read_in_child) == "b'567' True"
    assert id(store._oci_client()) == parent_client  # the parent keeps its own


@pytest.mark.parametrize(("start", "end"), [(60, 101), (100, 101), (200, 300), (101, 101)])
def test_ranges_past_the_end_fail(oci_env: OCIAccount, tmp_path: Path, start: int, end: int):
    store = OCIStore(oci_env.url("range"))
    put(store, tmp_path, "f", bytes(100))
    with pytest.raises(
        StorageError, match=r"runs past the end of the object \(100 bytes\)"
    ) as info:
        store.get_range("f", start, end)
    assert store.url("f") in str(info.value)
    assert not isinstance(info.value, ObjectNotFoundError)


def test_bad_ranges_and_keys_are_refused_before_any_request(oci_env: OCIAccount):
    store = OCIStore(oci_env.url("bad"))
    before = len(oci_env.server.requests)
    with pytest.raises(ConfigurationError, match="0 <= start <= end"):
        store.get_range("f", 5, 4)
    with pytest.raises(ConfigurationError, match="relative"):
        store.get_bytes("../escape")
    assert len(oci_env.server.requests) == before


def test_list_follows_pagination(oci_env: OCIAccount, tmp_path: Path):
    url = oci_env.url("list")
    store = OCIStore(url)
    keys = [f"shard.{i:05}.mds" for i in range(3 * PAGE_SIZE + 1)] + ["sub/x", "sub/y", "z"]
    for key in keys:
        put(store, tmp_path, key, key.encode())
    # A sibling prefix that starts with the same characters must not leak in.
    put(OCIStore(url + "-sibling"), tmp_path, "shard.99999.mds", b"other")
    pages_before = list_calls(oci_env)
    assert store.list() == sorted(keys)
    assert list_calls(oci_env) - pages_before == 5  # 13 objects, 3 a page
    assert store.list("sub/") == ["sub/x", "sub/y"]
    assert store.list("nothing") == []
    assert OCIStore(oci_env.url("empty")).list() == []


def test_missing_objects_and_buckets(oci_env: OCIAccount):
    store = OCIStore(oci_env.url("missing"))
    assert not store.exists("nope")
    for call in (store.get_bytes, store.info, lambda key: store.get_range(key, 0, 1)):
        with pytest.raises(ObjectNotFoundError, match=r"oci://.*/nope") as info:
            call("nope")
        assert isinstance(info.value, FileNotFoundError)
    other = OCIStore(f"oci://no-such-bucket@{NAMESPACE}/p")
    with pytest.raises(ObjectNotFoundError, match="BucketNotFound"):
        other.get_bytes("x")


@pytest.mark.parametrize("same_fingerprint", [True, False])
def test_a_key_the_service_does_not_know_is_refused(
    oci_env: OCIAccount, tmp_path: Path, same_fingerprint: bool
):
    phrase = "pass-phrase-that-must-not-leak"
    config_file = oci_env.config_with_other_key(
        same_fingerprint=same_fingerprint, pass_phrase=phrase
    )
    store = OCIStore(oci_env.url("denied"), config_file=config_file)
    source = tmp_path / "f"
    source.write_bytes(b"x")
    with pytest.raises(CredentialsError) as info:
        store.put_file(str(source), "f")
    message = str(info.value)
    assert store.url("f") in message
    assert "NotAuthenticated" in message
    assert "~/.oci/config" in message
    assert "OCI_CONFIG_FILE" in message
    assert phrase not in message
    assert phrase not in repr(info.value.__cause__) + repr(info.value.__context__)
    assert all("denied" not in name for name in oci_env.server.buckets[BUCKET])


def test_missing_or_broken_config_names_its_source(oci_env: OCIAccount, tmp_path: Path):
    missing = OCIStore(oci_env.url("noconfig"), config_file=str(tmp_path / "absent"))
    with pytest.raises(CredentialsError, match=r"absent.*ConfigFileNotFound") as info:
        missing.get_bytes("f")
    for text in (missing.url(""), "OCI_CONFIG_FILE", "~/.oci/config", "OCI_CLI_PROFILE"):
        assert text in str(info.value)
    no_profile = OCIStore(oci_env.url("noprofile"), profile="NOPE")
    with pytest.raises(CredentialsError, match="profile NOPE"):
        no_profile.list()
    broken = tmp_path / "broken"
    broken.write_text("[DEFAULT]\nuser=not-an-ocid\nfingerprint=zz\n")
    with pytest.raises(CredentialsError, match="OCI_CLI_PROFILE"):
        OCIStore(oci_env.url("broken"), config_file=str(broken)).exists("f")


def test_an_unreachable_endpoint_is_a_storage_error(oci_env: OCIAccount):
    store = OCIStore(oci_env.url("down"), endpoint_url="http://127.0.0.1:9")
    with pytest.raises(StorageError, match=r"oci://.*/f failed at http://127\.0\.0\.1:9") as info:
        store.get_bytes("f")
    assert not isinstance(info.value, (CredentialsError, ObjectNotFoundError))


def test_writer_publishes_to_oci_and_reads_back(oci_env: OCIAccount, tmp_path: Path):
    url = oci_env.url("writer")
    write(url, 20, compression="zstd")
    store = open_store(url)
    assert isinstance(store, OCIStore)
    keys = store.list()
    assert "index.json" in keys
    index = json.loads(store.get_bytes("index.json"))
    shards = {shard["zip_data"]["basename"] for shard in index["shards"]}  # compressed only
    assert len(index["shards"]) > 1
    assert set(keys) == {*shards, "index.json"}
    copy = tmp_path / "copy"
    for key in keys:
        (copy / key).parent.mkdir(parents=True, exist_ok=True)
        (copy / key).write_bytes(store.get_bytes(key))
    check_dataset(copy, 20)


def test_refused_credentials_fail_the_writer_without_leaking(
    oci_env: OCIAccount, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    phrase = "writer-pass-phrase-that-must-not-leak"
    monkeypatch.setenv("OCI_CONFIG_FILE", oci_env.config_with_other_key(pass_phrase=phrase))
    url = oci_env.url("writer-denied")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(UploadError, match="OCI_CONFIG_FILE") as info:
        write(url, 3, retry=1)
    assert isinstance(info.value.__cause__, CredentialsError)
    assert url in str(info.value)
    assert phrase not in str(info.value)
    assert phrase not in caplog.text


def test_uploads_and_reads_from_many_threads(oci_env: OCIAccount, tmp_path: Path):
    store = OCIStore(oci_env.url("threads"))
    payloads = {f"part/{i:02}": os.urandom(1000 + i) for i in range(16)}
    for key, data in payloads.items():
        (tmp_path / key.replace("/", "-")).write_bytes(data)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda k: store.put_file(str(tmp_path / k.replace("/", "-")), k), payloads))
        read = dict(zip(payloads, pool.map(store.get_bytes, payloads), strict=True))
    assert read == payloads
    assert store.list("part/") == sorted(payloads)


def test_a_split_listing_is_the_serial_one_asked_from_each_split_key(
    oci_env: OCIAccount, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = OCIStore(oci_env.url("split"))
    keys = [f"shard.{k:02}.mds" for k in range(24)] + ["index.json", "sub/x", "z"]
    for key in keys:
        put(store, tmp_path, key, key.encode())
    serial = store.list_info()
    assert list(serial) == sorted(keys)
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 6)
    before = len(oci_env.server.requests)
    names = [key for key in keys if key.startswith("shard.")]
    split = store.list_info(split_at=names)
    assert split == serial
    assert list(split) == list(serial)
    asked = [urlsplit(p).query for _, p in oci_env.server.requests[before:]]
    # 24 names, 6 a range: five ranges, four of them asked from a split key on.
    assert sum("startAfter=" in query for query in asked) == 4
