"""A start lists the remote while its first shards are fetched, and hands over no stale byte."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shardstream import MDSWriter, ReadPolicy, StreamingDataLoader, StreamingDataset
from shardstream.cache.provenance import read_record
from shardstream.storage import open_store, store_base

from .conftest import S3Server
from .faults import FaultProxy

pytestmark = pytest.mark.s3

COLUMNS = {"id": "int", "text": "str"}
SAMPLES = 24


def _regenerate(url: str, folder: Path, label: str, samples: int = SAMPLES) -> bytes:
    """The dataset under ``url``, written anew in place: same names, sizes and index.

    Written locally and copied up file by file, as the reference or a sync tool does; a
    shard holds a sample.
    """
    with MDSWriter(out=str(folder), columns=COLUMNS, size_limit=200) as writer:
        for i in range(samples):
            writer.write({"id": i, "text": f"{label}-{i:03d}"})
    store = open_store(url)
    for name in sorted(os.listdir(folder)):
        store.put_file(str(folder / name), name)
    return bytes(store.get_bytes("index.json"))


def _cached(s3_env: S3Server, tmp_path: Path, lister: str) -> tuple[str, Path, list[str]]:
    """A dataset read whole into a cache, then rewritten in place (same names, sizes, index).

    Returns its URL, the cache folder and the cached shards' names; the first shard is
    removed from the cache, so a start must fetch it, while the others are stale there.
    """
    url, local = s3_env.url(f"held-listing-{lister}"), tmp_path / "cache"
    index = _regenerate(url, tmp_path / "aaa", "aaa")
    old = [s["text"] for s in StreamingDataset(remote=url, local=str(local), batch_size=4)]
    assert old == [f"aaa-{i:03d}" for i in range(SAMPLES)]
    assert _regenerate(url, tmp_path / "bbb", "bbb") == index  # the index is the same
    shards = sorted(name for name in os.listdir(local) if name.endswith(".mds"))
    assert len(shards) >= 4
    os.remove(local / shards[0])
    return url, local, shards


def _read_while_listing_held(
    proxy: FaultProxy, url: str, local: Path, shard: str, meanwhile: Any = None
) -> list[str]:
    """Every sample, read while the listing is held back until ``shard`` has been asked for.

    ``meanwhile``: called while the listing is still held, once ``shard`` was asked for.
    """
    proxy.inject("hold", count=1000, method="GET", path_contains="list-type=2")
    dataset = StreamingDataset(remote=url, local=str(local), batch_size=SAMPLES // 2)
    samples: list[str] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            samples.extend(sample["text"] for sample in dataset)
        except BaseException as exc:  # noqa: BLE001 (reported by the test thread)
            failed.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # A bound, not a timing: a start that lists before it fetches never gets there.
        deadline = time.monotonic() + 30
        while not (proxy.holding and proxy.count("GET", shard)):
            assert time.monotonic() < deadline, "no shard was fetched while listing"
            time.sleep(0.05)
        assert proxy.holding  # the listing is still held back
        if meanwhile is not None:
            meanwhile()
    finally:
        proxy.release()
        reader.join(60)
    assert not failed, failed
    return samples


def _recorded(local: Path, url: str) -> dict[str, str]:
    """The cache's record, checked: each object the listing's identity, or none known."""
    record = read_record(str(local / ".shardstream"))
    assert record is not None
    listed = {key: f"{info.size}:{info.etag}" for key, info in open_store(url).list_info().items()}
    assert set(record.objects) == set(listed)
    assert all(value in ("", listed[key]) for key, value in record.objects.items())
    assert record.objects["index.json"] == listed["index.json"]
    return dict(record.objects)


@pytest.mark.parametrize("lister", ["obstore", "botocore"])
def test_a_rewritten_dataset_is_read_anew_while_its_listing_is_held(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lister: str
) -> None:
    """The cache holds the old shards; the listing is held back; the first batch is new.

    The shard the cache lacks is fetched while the listing is held (the start does not wait
    for it); the shards the cache holds are stale, and are handed over only once the listing
    has shown them changed and they have been fetched again.
    """
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", lister)
    url, local, shards = _cached(s3_env, tmp_path, lister)
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
        samples = _read_while_listing_held(proxy, url, local, shards[0])
    assert samples == [f"bbb-{i:03d}" for i in range(SAMPLES)]
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_env.endpoint)
    # The shard fetched while the listing ran is of no known version: the next start checks it.
    assert _recorded(local, url)[shards[0]] == ""
    again = [s["text"] for s in StreamingDataset(remote=url, local=str(local), batch_size=4)]
    assert again == [f"bbb-{i:03d}" for i in range(SAMPLES)]
    _recorded(local, url)


def test_a_shard_fetched_before_a_rewrite_the_listing_saw_is_fetched_again(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewritten between a shard's GET and the listing: the record does not vouch for it."""
    url, local, shards = _cached(s3_env, tmp_path, "rewritten-meanwhile")
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
        samples = _read_while_listing_held(
            proxy, url, local, shards[0], lambda: _regenerate(url, tmp_path / "ccc", "ccc")
        )
    # A writer rewrote the dataset mid-start: any version but the cache's stale one.
    assert not [text for text in samples if text.startswith("aaa")]
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_env.endpoint)
    again = [s["text"] for s in StreamingDataset(remote=url, local=str(local), batch_size=4)]
    assert again == [f"ccc-{i:03d}" for i in range(SAMPLES)]


@pytest.mark.parametrize("lister", ["obstore", "botocore"])
def test_a_shard_of_an_early_range_is_read_while_the_last_range_is_held(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lister: str
) -> None:
    """The last shard is rewritten in place; its range's listing is held back at the proxy.

    The listing runs in a range a name (``KEYS_PER_RANGE`` 1): the first shard, cached and
    unchanged, is handed over once its own range is listed, while the last range is still
    held; the last shard's stale bytes wait for its range and come back new.
    """
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", lister)
    monkeypatch.setattr(store_base, "KEYS_PER_RANGE", 1)
    url, local = s3_env.url(f"last-range-{lister}"), tmp_path / "cache"
    _regenerate(url, tmp_path / "aaa", "aaa")
    # A first batch read by ranges may leave its shards uncached: here shards come whole, so
    # that every shard is cached, in doubt at the next start, and handed over through a vouch.
    policy = ReadPolicy(first_batch_ranges=False)
    old = StreamingDataset(remote=url, local=str(local), batch_size=4, read_policy=policy)
    assert [s["text"] for s in old] == [f"aaa-{i:03d}" for i in range(SAMPLES)]
    index = json.loads((local / "index.json").read_bytes())
    shards = [shard["raw_data"]["basename"] for shard in index["shards"]]
    assert len(shards) >= 4
    assert all((local / shard).exists() for shard in shards)  # all cached: all in doubt
    with MDSWriter(out=str(tmp_path / "bbb"), columns=COLUMNS, size_limit=200) as writer:
        for i in range(SAMPLES):
            writer.write({"id": i, "text": f"bbb-{i:03d}"})
    open_store(url).put_file(str(tmp_path / "bbb" / shards[-1]), shards[-1])  # same size
    last = [i for i in range(SAMPLES) if i >= SAMPLES - index["shards"][-1]["samples"]]
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
        # The last shard's range starts after the shard before it ("/" quoted in a query).
        proxy.inject("hold", count=1000, method="GET", path_contains=f"%2F{shards[-2]}")
        dataset = StreamingDataset(
            remote=url, local=str(local), batch_size=1, shuffle=False, read_policy=policy
        )
        samples = iter(dataset)
        first: list[str] = []
        try:
            reader = threading.Thread(target=lambda: first.append(next(samples)["text"]))
            reader.start()  # the start (it lists) and the first sample
            deadline = time.monotonic() + 30  # a bound, not a timing
            while not proxy.holding:
                assert time.monotonic() < deadline, "the last range was never asked for"
                time.sleep(0.05)
            reader.join(30)  # a bound: a vouch that waits for the last range never returns
            assert first == ["aaa-000"]
            assert proxy.holding  # handed over while the last range is still held back
            assert (local / shards[-1]).exists()  # stale, but not judged before its range
        finally:
            proxy.release()
        rest = [sample["text"] for sample in samples]
    assert [*first, *rest] == [f"{'bbb' if i in last else 'aaa'}-{i:03d}" for i in range(SAMPLES)]
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_env.endpoint)
    assert _recorded(local, url)[shards[0]] != ""  # confirmed by its range: a known version


def test_a_cold_start_s_listing_waits_for_the_forked_workers_first_batch(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing cached, workers forked: the loader's process lists once the first batch is in.

    The proxy holds the workers' range requests, so that no first batch can be read: until it
    lets them go, the loader's process has sent no listing request (on a cold cache no read
    waits for the listing, and its pages would take the cores the workers need). Then the
    epoch is whole and the listing runs, and records the remote for the next start.
    """
    url, local, samples = s3_env.url("cold-forked"), tmp_path / "cache", 240
    _regenerate(url, tmp_path / "aaa", "aaa", samples)
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
        proxy.inject("hold", count=10_000, method="GET", ranged=True)
        dataset = StreamingDataset(remote=url, local=str(local), batch_size=4, shuffle=True)
        loader = StreamingDataLoader(
            dataset, batch_size=4, num_workers=2, multiprocessing_context="fork"
        )
        batches = iter(loader)
        first: list[Any] = []
        reader = threading.Thread(target=lambda: first.append(next(batches)), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60  # a bound, not a timing
            while not proxy.holding:
                assert time.monotonic() < deadline, "no first batch was read by ranges"
                time.sleep(0.02)
            assert proxy.count("GET", "list-type=2") == 0  # nothing listed yet
        finally:
            proxy.release()
            reader.join(60)
        assert len(first) == 1
        texts = list(first[0]["text"]) + [text for batch in batches for text in batch["text"]]
        assert sorted(texts) == [f"aaa-{i:03d}" for i in range(samples)]
        deadline = time.monotonic() + 60
        while read_record(str(local / ".shardstream")) is None:  # written once listed
            assert time.monotonic() < deadline, "the held listing never ran"
            time.sleep(0.05)
        assert proxy.count("GET", "list-type=2") > 0
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_env.endpoint)
    _recorded(local, url)


def test_a_cold_start_whose_first_batch_lands_whole_lists_before_it(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Few shards for the batch: they are fetched whole, so the listing is not held for them.

    A shard that lands before the listing is recorded as of no known version and fetched
    again at the next start: the proxy holds every shard's GET, the listing runs meanwhile,
    and the record vouches for every shard.
    """
    url, local, samples = s3_env.url("cold-forked-whole"), tmp_path / "cache", 48
    _regenerate(url, tmp_path / "aaa", "aaa", samples)
    with FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
        # The shards' GETs, not the listing's (which may start after a shard's name).
        prefix = url.split("/", 3)[3]  # the test's own key prefix, its unique suffix included
        proxy.inject("hold", count=10_000, method="GET", path_contains=f"{prefix}/shard.")
        # A batch of 16 of the 48 one-sample shards: over the policy's share, fetched whole.
        dataset = StreamingDataset(remote=url, local=str(local), batch_size=16, shuffle=True)
        assert not ReadPolicy().ranges_small_shards(16, samples)
        loader = StreamingDataLoader(
            dataset, batch_size=16, num_workers=2, multiprocessing_context="fork"
        )
        texts: list[str] = []
        reader = threading.Thread(
            target=lambda: texts.extend(t for batch in loader for t in batch["text"]), daemon=True
        )
        reader.start()
        try:
            deadline = time.monotonic() + 60  # a bound, not a timing
            while read_record(str(local / ".shardstream")) is None:
                assert time.monotonic() < deadline, "the listing waited for the first batch"
                time.sleep(0.02)
            assert not [name for name in os.listdir(local) if name.endswith(".mds")]
        finally:
            proxy.release()
            reader.join(60)
        assert sorted(texts) == [f"aaa-{i:03d}" for i in range(samples)]
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_env.endpoint)
    assert "" not in _recorded(local, url).values()
