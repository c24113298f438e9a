"""A cold first batch is read by range requests, before the whole shards land.

SeaweedFS (S3) on 127.0.0.1 behind :class:`tests.integration.faults.FaultProxy`, which holds
every GET of a whole shard until the test lets them go: the first batch must come out of
range requests alone, equal to a read of whole shards, while the cache holds no shard file.
The proxy counts the requests; nothing here is timed but a generous bound on a wait.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import ObjectChangedError, ShardFormatError, StorageError
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage import S3Store

from .conftest import S3Server
from .faults import FaultProxy

pytestmark = pytest.mark.s3

BATCH = 12
_SHARD_FILE = re.compile(r"shard\.\d+\.mds")
#: (samples, payload bytes, shard size limit): tiny shards are read in one range each, large
#: ones (over the one-range size) as their offset table, then their samples; a batch of bulky
#: samples needs too much of its large shards' bytes to read them by range.
SHAPES = {
    "tiny": (240, 40, 600),
    "large": (960, 2_000, 420_000),
    "bulky": (96, 20_000, 420_000),
}


def _sample(i: int, size: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    return {
        "id": i,
        "pad": rng.integers(0, 256, size + (i % 7), dtype=np.uint8).tobytes(),
        "text": f"sample {i} " * (i % 5),
        "vec": rng.standard_normal(4).astype(np.float32),
    }


def _write(out: str, samples: int, size: int, limit: int, compression: str | None = None) -> None:
    columns = {"id": "int", "pad": "bytes", "text": "str", "vec": "ndarray:float32:4"}
    with MDSWriter(out=out, columns=columns, size_limit=limit, compression=compression) as writer:
        for i in range(samples):
            writer.write(_sample(i, size))


class Served:
    """A dataset written to a local folder, uploaded to SeaweedFS, read through the proxy."""

    def __init__(self, server: S3Server, proxy: FaultProxy, folder: Path, name: str) -> None:
        self.folder = folder
        self.url = server.url(name)
        self.proxy = proxy
        store = S3Store(self.url, endpoint_url=server.endpoint)
        for file in sorted(os.listdir(folder)):  # the index last, as a writer publishes it
            if file != "index.json":
                store.put_file(str(folder / file), file)
        store.put_file(str(folder / "index.json"), "index.json")

    def shard_gets(self, *, ranged: bool) -> list[str]:
        """The shard files' GETs (their names) through the proxy so far, ranged or whole."""
        return [
            match.group(0)
            for seen in self.proxy.seen
            if seen.method == "GET"
            and seen.ranged == ranged
            and (match := _SHARD_FILE.search(seen.path)) is not None
        ]


@pytest.fixture
def served(s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    made: list[FaultProxy] = []

    def make(shape: str, compression: str | None = None) -> Served:
        samples, size, limit = SHAPES[shape]
        folder = tmp_path / f"written-{len(made)}"
        _write(str(folder), samples, size, limit, compression)
        proxy = FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1])).__enter__()
        made.append(proxy)
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.endpoint)
        return Served(s3_env, proxy, folder, f"ranges-{uuid.uuid4().hex[:8]}")

    yield make
    for proxy in made:
        proxy.__exit__(None, None, None)


def _dataset(url: str, cache: Path, batch_size: int = BATCH) -> StreamingDataset:
    return StreamingDataset(
        remote=url, local=str(cache), batch_size=batch_size, shuffle=True, shuffle_seed=11,
        download_retry=0, download_timeout=30,
    )  # fmt: skip


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert int(got["id"]) == int(want["id"])
    assert bytes(got["pad"]) == bytes(want["pad"])
    assert got["text"] == want["text"]
    assert got["vec"].dtype == want["vec"].dtype
    assert got["vec"].tobytes() == want["vec"].tobytes()


def _shard_files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if _SHARD_FILE.fullmatch(path.name)]


@pytest.mark.parametrize("shape", ["tiny", "large"])
def test_the_first_batch_is_read_by_ranges_before_any_whole_shard_lands(served, tmp_path, shape):
    data: Served = served(shape)
    # The same shuffle over the written folder itself: whole shards, read in place.
    expected = list(_dataset(None, data.folder))  # type: ignore[arg-type]
    first_shards = {
        int(np.searchsorted(_starts(data.folder), int(s["id"]), side="right")) - 1
        for s in expected[:BATCH]
    }
    data.proxy.inject("hold", count=10**6, method="GET", path_contains=".mds", ranged=False)
    cache = tmp_path / "cache"
    got: list[dict[str, Any]] = []
    failed: list[BaseException] = []
    out = threading.Condition()

    def read() -> None:
        try:
            for sample in _dataset(data.url, cache):
                with out:
                    got.append(sample)
                    out.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)
            with out:
                out.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with out:  # a generous bound: what is asserted is what came out, not when
            out.wait_for(lambda: len(got) >= BATCH or bool(failed), 60)
            first = list(got[:BATCH])
        assert not failed, failed
        assert len(first) == BATCH, "the first batch waited for whole shards"
        for sample, want in zip(first, expected, strict=False):
            _same(sample, want)
        assert _shard_files(cache) == []  # no range result under a shard's name, no partial file
        ranged = data.shard_gets(ranged=True)
        assert {int(name.split(".")[1]) for name in ranged} == first_shards
        if shape == "tiny":  # one range a shard: its header and samples together
            assert len(ranged) == len(first_shards)
        else:  # its offset table, then its samples, nearby ones in one range
            assert len(first_shards) < len(ranged) <= len(first_shards) + BATCH
        assert data.proxy.holding == len(data.shard_gets(ranged=False))  # none answered yet
    finally:
        data.proxy.release()
        reader.join(120)
    assert not failed, failed
    assert len(got) == len(expected)
    for sample, want in zip(got, expected, strict=True):
        _same(sample, want)
    # The whole shards followed, each once, and the cache holds them whole and exact.
    wholes = data.shard_gets(ranged=False)
    assert sorted(wholes) == sorted(set(wholes))
    for path in _shard_files(cache):
        assert path.read_bytes() == (data.folder / path.name).read_bytes()
    # A warm epoch reads the cache: no range request.
    before = len(data.shard_gets(ranged=True))
    assert len(list(_dataset(data.url, cache))) == len(expected)
    assert len(data.shard_gets(ranged=True)) == before


def _starts(folder: Path) -> np.ndarray:
    index = json.loads((folder / "index.json").read_text())
    return np.cumsum([0] + [shard["samples"] for shard in index["shards"]])


def test_a_header_that_disagrees_with_the_index_is_an_error_naming_the_shard(served, tmp_path):
    data: Served = served("large")
    index = data.folder / "index.json"
    text = index.read_text()
    lying = text.replace('"samples": ', '"samples": 1')  # every shard claims more
    assert lying != text
    store = S3Store(data.url)
    index.write_text(lying)
    store.put_file(str(index), "index.json")
    dataset = _dataset(data.url, tmp_path / "cache")
    with pytest.raises(ShardFormatError, match=r"s3://\S+/shard\.\d+\.mds.*read by range"):
        for _ in dataset:
            pass
    assert data.shard_gets(ranged=True)  # it was the range read that said so
    # Large shards are fetched whole beside the ranges: what landed is the remote's whole
    # file, never a range's bytes under a shard's name.
    for path in _shard_files(tmp_path / "cache"):
        assert path.read_bytes() == (data.folder / path.name).read_bytes()


@pytest.mark.parametrize("fault", ["short200", "truncate"])
def test_a_short_range_answer_is_an_error_naming_the_shard_never_garbage(served, tmp_path, fault):
    data: Served = served("large")
    data.proxy.inject(fault, count=10**6, method="GET", path_contains=".mds", ranged=True)
    got: list[dict[str, Any]] = []
    with pytest.raises((StorageError, ShardFormatError), match=r"shard\.\d+\.mds"):
        got.extend(_dataset(data.url, tmp_path / "cache"))
    assert got == []
    for path in _shard_files(tmp_path / "cache"):  # whole shards fetched beside the ranges
        assert path.read_bytes() == (data.folder / path.name).read_bytes()


def test_compressed_shards_are_fetched_whole_and_say_so(served, tmp_path, caplog):
    data: Served = served("large", compression="zstd")
    expected = list(_dataset(None, data.folder))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="shardstream.cache.sample_ranges"):
        got = list(_dataset(data.url, tmp_path / "cache"))
    assert len(got) == len(expected)
    for sample, want in zip(got, expected, strict=True):
        _same(sample, want)
    assert not [seen for seen in data.proxy.seen if seen.ranged and ".mds" in seen.path]
    assert any("cannot be read by range" in record.getMessage() for record in caplog.records)
    shutil.rmtree(tmp_path / "cache")


def test_small_shards_a_batch_mostly_needs_are_fetched_whole_only(served, tmp_path):
    # 80 small shards, a batch of 60 samples needs over a quarter of them: the epoch needs
    # them whole at once, so a range read would only make each cross the link twice.
    data: Served = served("tiny")
    expected = list(_dataset(None, data.folder, batch_size=60))  # type: ignore[arg-type]
    got = list(_dataset(data.url, tmp_path / "cache", batch_size=60))
    assert [int(s["id"]) for s in got] == [int(s["id"]) for s in expected]
    assert data.shard_gets(ranged=True) == []
    assert sorted(data.shard_gets(ranged=False)) == sorted(set(data.shard_gets(ranged=False)))


def test_large_shards_the_first_batch_reads_by_ranges_are_fetched_whole_beside_them(
    served, tmp_path
):
    # The ranges cost round trips, not the link's bytes: the whole shards' transfer starts
    # with them, not after the first batch (a cold epoch would wait that long for every byte).
    # Every range request is held: the whole GETs of the batch's (large) shards must still go
    # out, while nothing has come out of the reader yet.
    data: Served = served("large")
    expected = list(_dataset(None, data.folder))  # type: ignore[arg-type]
    starts = _starts(data.folder)
    first_shards = {
        f"shard.{int(np.searchsorted(starts, int(s['id']), side='right')) - 1:05d}.mds"
        for s in expected[:BATCH]
    }
    data.proxy.inject("hold", count=10**6, method="GET", path_contains=".mds", ranged=True)
    got: list[dict[str, Any]] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            got.extend(_dataset(data.url, tmp_path / "cache"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60  # a generous bound on a wait, not a timing
        # Under load the whole GETs may reach the proxy before any range does: wait for both.
        while (
            not (first_shards <= set(data.shard_gets(ranged=False)) and data.proxy.holding > 0)
            and not failed
        ):
            assert time.monotonic() < deadline, "the whole shards waited for the ranges"
            time.sleep(0.02)
        assert not failed, failed
        assert got == []  # the ranges are held: the first batch is not out
    finally:
        data.proxy.release()
        reader.join(120)
    assert not failed, failed
    assert [int(s["id"]) for s in got] == [int(s["id"]) for s in expected]
    for sample, want in zip(got, expected, strict=True):
        _same(sample, want)
    wholes = data.shard_gets(ranged=False)
    assert sorted(wholes) == sorted(set(wholes))  # each shard fetched whole once
    assert data.shard_gets(ranged=True)  # the first batch was still read by ranges
    for path in _shard_files(tmp_path / "cache"):
        assert path.read_bytes() == (data.folder / path.name).read_bytes()


def test_a_batch_that_needs_much_of_its_large_shards_bytes_fetches_them_whole_only(
    served, tmp_path
):
    # Ranged bytes would cross the link twice (the whole shards follow): above the share, the
    # batch waits for the whole shards instead, each fetched once.
    data: Served = served("bulky")
    index = json.loads((data.folder / "index.json").read_text())
    shard_bytes = {s["raw_data"]["basename"]: s["raw_data"]["bytes"] for s in index["shards"]}
    assert min(shard_bytes.values()) > ReadPolicy().range_whole_bytes  # large shards
    expected = list(_dataset(None, data.folder))  # type: ignore[arg-type]
    got = list(_dataset(data.url, tmp_path / "cache"))
    assert [int(s["id"]) for s in got] == [int(s["id"]) for s in expected]
    for sample, want in zip(got, expected, strict=True):
        _same(sample, want)
    assert data.shard_gets(ranged=True) == []
    assert sorted(data.shard_gets(ranged=False)) == sorted(shard_bytes)


def test_a_shard_rewritten_between_its_ranges_and_its_whole_get_fails_the_epoch(
    served, s3_env: S3Server, tmp_path
):
    data: Served = served("tiny")
    expected = list(_dataset(None, data.folder))  # type: ignore[arg-type]
    # The same sizes and offsets, other payloads: a writer rewriting the shards in place.
    other = tmp_path / "other"
    columns = {"id": "int", "pad": "bytes", "text": "str", "vec": "ndarray:float32:4"}
    samples, size, limit = SHAPES["tiny"]
    with MDSWriter(out=str(other), columns=columns, size_limit=limit) as writer:
        for i in range(samples):
            sample = _sample(i, size)
            sample["pad"] = bytes(255 - byte for byte in sample["pad"])
            writer.write(sample)
    data.proxy.inject("hold", count=10**6, method="GET", path_contains=".mds", ranged=False)
    samples_out = iter(_dataset(data.url, tmp_path / "cache"))
    try:
        first = [next(samples_out) for _ in range(BATCH)]  # by ranges: the old version
        for sample, want in zip(first, expected, strict=False):
            _same(sample, want)
        direct = S3Store(data.url, endpoint_url=s3_env.endpoint)  # not through the proxy
        for path in sorted(other.glob("shard.*.mds")):
            direct.put_file(str(path), path.name)
    finally:
        data.proxy.release()  # the whole GETs now read the new version
    got: list[dict[str, Any]] = []
    with pytest.raises(ObjectChangedError, match=r"rewritten while this epoch read it"):
        got.extend(samples_out)  # never samples of the new version beside the old
    for sample, want in zip(got, expected[BATCH:], strict=False):
        _same(sample, want)
