"""StreamingDataLoader: whole device batches from the dataset, identical to torch's collation."""

from __future__ import annotations

import functools
import gc
import itertools
import multiprocessing
import multiprocessing.util
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.forked import in_forked_child
from torch.utils.data import DataLoader

from shardstream import MDSWriter, StreamingDataLoader, StreamingDataset
from shardstream.errors import ConfigurationError, ShardFormatError
from shardstream.loader import dataloader as dataloader_module
from shardstream.loader.result_pipe import RESULT_PIPE_BYTES, widen_result_pipe
from shardstream.pipeline.policy import ReadPolicy
from shardstream.storage import obstore_client

COLUMNS = {
    "id": "int",
    "payload": "bytes",
    "name": "str",
    "score": "float32",
    "small": "uint8",
    "vector": "ndarray:float64:3",
    "meta": "json",
}
SAMPLES = 203


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote") / "ds"
    with MDSWriter(out=str(root), columns=COLUMNS, size_limit=1500) as writer:
        for i in range(SAMPLES):
            writer.write({
                "id": i, "payload": bytes([i % 256]) * (i % 17), "name": f"sample {i}",
                "score": i / 7, "small": i % 256, "vector": np.arange(3.0) * i,
                "meta": {"i": i, "odd": bool(i % 2)},
            })  # fmt: skip
    return root


def make(remote: Path, local: Path, **kwargs: Any) -> StreamingDataset:
    return StreamingDataset(
        remote=str(remote), local=str(local), batch_size=8, shuffle=True, **kwargs
    )


def same_batch(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(same_batch(a[k], b[k]) for k in a)
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_batch, a, b))
    return type(a) is type(b) and a == b


# ndarray columns decode to read-only views of the shard (as in the reference); torch warns
# when it wraps one, whichever path collates it.
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_torch_collating_each_sample(remote: Path, tmp_path: Path, workers: int):
    plain = list(DataLoader(make(remote, tmp_path / "c"), batch_size=8, num_workers=workers))
    fast = list(
        StreamingDataLoader(make(remote, tmp_path / "c"), batch_size=8, num_workers=workers)
    )
    assert len(fast) == len(plain) == -(-SAMPLES // 8)
    assert all(same_batch(a, b) for a, b in zip(fast, plain, strict=True))
    ids = torch.cat([batch["id"] for batch in fast]).tolist()
    assert set(ids) == set(range(SAMPLES))


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("workers", [0, 2])
def test_token_arrays_in_large_batches_equal_torch_collating_each_sample(
    tmp_path: Path, workers: int
):
    # Batches of 64 from shards of ~100 samples: the batch decoder gathers each shard's arrays
    # at once, and DataLoader workers send them stacked.
    root = tmp_path / "tokens"
    columns = {"id": "int", "tokens": "ndarray:uint16:32", "patch": "ndarray:float32:2,3"}
    with MDSWriter(out=str(root), columns=columns, size_limit=8000) as writer:
        for i in range(640):
            writer.write({
                "id": i, "tokens": (np.arange(32) * i % 65536).astype(np.uint16),
                "patch": np.full((2, 3), i / 3, np.float32),
            })  # fmt: skip

    def dataset() -> StreamingDataset:
        return StreamingDataset(
            remote=str(root), local=str(tmp_path / "c"), batch_size=64, shuffle=True
        )

    plain = list(DataLoader(dataset(), batch_size=64, num_workers=workers))
    fast = list(StreamingDataLoader(dataset(), batch_size=64, num_workers=workers))
    assert len(fast) == len(plain) == 10
    assert all(same_batch(a, b) for a, b in zip(fast, plain, strict=True))
    assert fast[0]["tokens"].shape == (64, 32)
    assert fast[0]["tokens"].dtype == torch.uint16
    ids = torch.cat([batch["id"] for batch in fast])
    assert sorted(ids.tolist()) == list(range(640))
    for batch in fast:
        expected = (torch.arange(32)[None, :] * batch["id"][:, None] % 65536).to(torch.uint16)
        assert torch.equal(batch["tokens"], expected)


def test_a_custom_collate_fn_gets_samples(remote: Path, tmp_path: Path):
    loader = StreamingDataLoader(make(remote, tmp_path / "c"), batch_size=8, collate_fn=list)
    first = next(iter(loader))
    assert isinstance(first, list)
    assert len(first) == 8
    assert set(first[0]) == set(COLUMNS)


def test_len_counts_batches(remote: Path, tmp_path: Path):
    loader = StreamingDataLoader(make(remote, tmp_path / "c"), batch_size=8)
    assert loader.batch_size == 8
    assert len(loader) == -(-SAMPLES // 8)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("workers", [0, 2])
def test_drop_last_drops_the_short_last_batch_as_torch_does(
    remote: Path, tmp_path: Path, workers: int
):
    def loader(cls: Any, drop_last: bool) -> Any:
        return cls(make(remote, tmp_path / "c"), batch_size=8, num_workers=workers,
                   drop_last=drop_last)  # fmt: skip

    whole, rest = divmod(SAMPLES, 8)  # 25 batches of 8, then one of 3
    kept = loader(StreamingDataLoader, True)
    batches = list(kept)
    assert len(kept) == len(batches) == whole
    assert [len(batch["id"]) for batch in batches] == [8] * whole
    assert all(map(same_batch, batches, loader(DataLoader, True)))
    assert kept.state_dict()["sample_in_epoch"] == whole * 8
    every = loader(StreamingDataLoader, False)
    assert [len(batch["id"]) for batch in every] == [8] * whole + [rest]
    assert len(every) == whole + 1


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_state_saved_after_a_dropped_batch_ends_the_epoch_there(remote: Path, tmp_path: Path):
    first = StreamingDataLoader(make(remote, tmp_path / "a"), batch_size=8, drop_last=True)
    list(first)
    state = first.state_dict()
    again = StreamingDataLoader(make(remote, tmp_path / "b"), batch_size=8, drop_last=True)
    again.load_state_dict(state)
    assert list(again) == []  # what was left is the short batch: dropped again
    assert [b["id"].tolist() for b in again] == [b["id"].tolist() for b in first]  # epoch 1


def test_batch_sizes_that_differ_are_refused(remote: Path, tmp_path: Path):
    with pytest.raises(ConfigurationError, match="batch_size"):
        StreamingDataLoader(make(remote, tmp_path / "c"), batch_size=16)


def test_the_dataset_still_yields_samples_outside_the_loader(remote: Path, tmp_path: Path):
    ds = make(remote, tmp_path / "c")
    next(iter(StreamingDataLoader(ds, batch_size=8)))
    sample = next(iter(ds))
    assert set(sample) == set(COLUMNS)


@pytest.fixture(scope="module")
def large_remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Batches of 8 values of ~200 KiB: over the size from which workers pack them."""
    root = tmp_path_factory.mktemp("remote") / "large"
    rng = np.random.default_rng(5)
    with MDSWriter(out=str(root), columns={"id": "int", "payload": "bytes"}) as writer:
        for i in range(37):
            writer.write({"id": i, "payload": rng.bytes(200_000 + i)})
    return root


@pytest.mark.parametrize("workers", [0, 2])
def test_large_values_from_workers_equal_torch_collating_each_sample(
    large_remote: Path, tmp_path: Path, workers: int
):
    plain = list(DataLoader(make(large_remote, tmp_path / "c"), batch_size=8, num_workers=workers))
    loader = StreamingDataLoader(
        make(large_remote, tmp_path / "c"), batch_size=8, num_workers=workers
    )
    fast = list(loader)
    assert len(fast) == len(plain) == 5
    assert loader.state_dict()["sample_in_epoch"] == 37  # packed batches count their rows
    assert all(same_batch(a, b) for a, b in zip(fast, plain, strict=True))
    assert all(type(value) is bytes for batch in fast for value in batch["payload"])
    ids = torch.cat([batch["id"] for batch in fast]).tolist()
    assert set(ids) == set(range(37))


def test_batches_decoded_together_equal_torch_collating_each_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # 610 small samples in ~60 shards, batches of 16: each batch draws a sample or two from
    # each of many shards, so the reader decodes several batches in one call per shard
    # (38 batches + 1 of 2: groups of up to 8, the last one partial).
    from shardstream.pipeline import batch_assembly

    root = tmp_path / "many"
    with MDSWriter(out=str(root), columns={"id": "int", "data": "bytes"}, size_limit=200) as w:
        for i in range(610):
            w.write({"id": i, "data": i.to_bytes(4, "little") * (i % 5)})
    calls = []
    decode = batch_assembly.decode_columns

    def counted(shards: list[int], *args: Any) -> Any:
        calls.append(len(shards))
        return decode(shards, *args)

    monkeypatch.setattr(batch_assembly, "decode_columns", counted)

    def dataset() -> StreamingDataset:
        return StreamingDataset(
            remote=str(root), local=str(tmp_path / "c"), batch_size=16, shuffle=True
        )

    plain = list(DataLoader(dataset(), batch_size=16))
    fast = list(StreamingDataLoader(dataset(), batch_size=16))
    assert len(fast) == len(plain) == -(-610 // 16)
    assert all(same_batch(a, b) for a, b in zip(fast, plain, strict=True))
    assert calls[0] == 16  # the first batch alone
    assert max(calls) > 16  # then several batches a call
    assert sum(calls) == 610  # each sample once: the last batch is short
    for batch in fast:
        assert batch["data"] == [
            int(i).to_bytes(4, "little") * (int(i) % 5) for i in batch["id"].tolist()
        ]


def _large_samples(root: Path, count: int) -> Path:
    """``count`` samples of ~40 KiB in shards of ~10 MiB: shards read with ``pread``."""
    with MDSWriter(
        out=str(root), columns={"id": "int", "payload": "bytes"}, size_limit=10 << 20
    ) as writer:
        for i in range(count):
            writer.write({"id": i, "payload": bytes([i % 251]) * (40_000 + i)})
    return root


def test_batches_of_large_samples_leave_workers_as_ids_and_come_out_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from shardstream.pipeline.reader import SampleReader

    remote = _large_samples(tmp_path / "remote", 600)  # 2 shards for pread, 1 read whole

    def batches(workers: int, limit: str | None = None) -> list[tuple[list[int], list[bytes]]]:
        ds = StreamingDataset(
            remote=str(remote), local=str(tmp_path / "cache"), batch_size=32, shuffle=True,
            cache_limit=limit,
        )  # fmt: skip
        loader = StreamingDataLoader(ds, batch_size=32, num_workers=workers)
        out = [(batch["id"].tolist(), batch["payload"]) for batch in loader]
        assert loader.num_samples_yielded == 600  # batches handed over by id count their ids
        return out

    expected = batches(0)
    read_here: list[int] = []
    original = SampleReader.read_batch

    def read_batch(reader: SampleReader, ids: Any) -> Any:
        read_here.append(len(ids))
        return original(reader, ids)

    monkeypatch.setattr(SampleReader, "read_batch", read_batch)
    assert batches(2) == expected
    assert 0 < len(read_here) < len(expected)  # some batches came as ids, the rest as values
    read_here.clear()
    # Under a cache limit a shard could be evicted before the loader read it: values only.
    assert batches(2, limit="100mb") == expected
    assert read_here == []
    ids = [i for batch_ids, _ in expected for i in batch_ids]
    assert set(ids) == set(range(600))
    assert len(ids) == 600  # each once: the last batch is short
    assert [len(batch_ids) for batch_ids, _ in expected[-2:]] == [32, 600 % 32]
    payloads = [p for _, batch in expected for p in batch]
    assert all(type(p) is bytes for p in payloads)
    assert all(p == bytes([i % 251]) * (40_000 + i) for i, p in zip(ids, payloads, strict=True))


@pytest.mark.parametrize(
    ("tokens", "shuffle", "by_id"), [(2048, False, True), (2048, True, True), (256, True, False)]
)
def test_batches_from_mapped_shards_of_large_values_leave_workers_as_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokens: int, shuffle: bool, by_id: bool
):
    # Shards over 8 MiB are mapped. Batches of 256 token arrays of 2,048 uint16 (1 MiB) would
    # cross through shared memory: the loader's process reads them itself. Samples in order
    # it gathers from the mappings and lets their pages go; shuffled ones it reads from the
    # files, mapping nothing. Arrays of 256 tokens (128 KiB a batch) still cross as values.
    from shardstream.format.mds import MDSShardView
    from shardstream.format.mds_file import SampleRuns
    from shardstream.pipeline.reader import SampleReader

    root = tmp_path / "tokens"
    count = 19 * (1 << 20) // (2 * tokens)  # two shards over 8 MiB each: both mapped
    columns = {"id": "int", "tokens": f"ndarray:uint16:{tokens}"}
    with MDSWriter(out=str(root), columns=columns, size_limit=10 << 20) as writer:
        for i in range(count):
            writer.write({"id": i, "tokens": np.full(tokens, i % 65536, np.uint16)})

    cache = tmp_path / "cache"  # a cache's copies are mapped; data read in place never is

    def batches(workers: int) -> list[tuple[list[int], Any]]:
        ds = StreamingDataset(remote=str(root), local=str(cache), batch_size=256, shuffle=shuffle)
        loader = StreamingDataLoader(ds, batch_size=256, num_workers=workers)
        return [(batch["id"].tolist(), batch["tokens"]) for batch in loader]

    expected = batches(0)
    read_here: list[int] = []
    from_files: list[tuple[set[str], int, int]] = []  # shard files, samples, distinct runs
    dropped: list[tuple[str, int, int]] = []
    read, drop, read_runs = SampleReader.read_batch, MDSShardView.let_go, SampleRuns.read
    in_read_batch = [False]

    def let_go(view: MDSShardView, first: int, stop: int) -> None:
        dropped.append((view.source, first, stop))
        drop(view, first, stop)

    def read_batch(reader: SampleReader, ids: Any) -> Any:
        read_here.append(len(ids))
        in_read_batch[0] = True
        try:
            return read(reader, ids)
        finally:
            in_read_batch[0] = False

    def counted(runs: SampleRuns) -> bytes:
        if in_read_batch[0]:  # the loader's reads (workers read their own batches alike)
            files = {source.source for source in runs.sources}
            from_files.append((files, len(runs.indices), len(runs.run_sizes)))
        return read_runs(runs)

    monkeypatch.setattr(SampleReader, "read_batch", read_batch)
    monkeypatch.setattr(SampleRuns, "read", counted)
    monkeypatch.setattr(MDSShardView, "let_go", let_go)
    got = batches(2)
    assert [ids for ids, _ in got] == [ids for ids, _ in expected]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, expected, strict=True))
    for ids, values in got:
        assert torch.equal(values, torch.tensor(ids)[:, None].expand(-1, tokens).to(torch.uint16))
    if not by_id:
        assert read_here == []
        assert from_files == []
        assert dropped == []
        return
    assert read_here == [256] * len(got)  # every batch comes as its ids
    shard_files = {str(cache / f"shard.0000{k}.mds") for k in range(2)}
    if shuffle:  # read from the files, about one read a sample; nothing mapped or dropped
        assert dropped == []
        assert [samples for _, samples, _ in from_files] == read_here
        assert set().union(*(files for files, _, _ in from_files)) == shard_files
        assert sum(runs for _, _, runs in from_files) > 200 * len(from_files)
        return
    assert from_files == []
    # In order: each batch's pages are let go, every sample's once (within its shard).
    assert {source for source, _, _ in dropped} == shard_files
    for source in shard_files:
        ranges = sorted((first, stop) for name, first, stop in dropped if name == source)
        assert ranges[0][0] == 0
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_the_workers_result_pipe_holds_a_whole_batch(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe sizes are Linux's")
    sizes: list[int | None] = []

    def widen(iterator: Any, size: int) -> int | None:
        assert size == ReadPolicy().result_pipe_bytes  # the policy's, passed by the loader
        sizes.append(widen_result_pipe(iterator, size))
        reader = iterator._worker_result_queue._reader
        sizes.append(fcntl.fcntl(reader.fileno(), fcntl.F_GETPIPE_SZ))
        return sizes[0]

    monkeypatch.setattr(dataloader_module, "widen_result_pipe", widen)
    batches = list(StreamingDataLoader(make(remote, tmp_path), batch_size=8, num_workers=2))
    monkeypatch.undo()
    assert sizes == [RESULT_PIPE_BYTES, RESULT_PIPE_BYTES]
    expected = list(StreamingDataLoader(make(remote, tmp_path / "again"), batch_size=8))
    assert len(batches) == len(expected)
    assert all(same_batch(a, b) for a, b in zip(batches, expected, strict=True))


def test_the_result_pipe_is_left_alone_without_workers():
    assert widen_result_pipe(iter([1, 2])) is None
    assert widen_result_pipe(object()) is None


def test_workers_prefetch_four_batches_unless_told(remote: Path, tmp_path: Path):
    def loader(**kwargs: Any) -> StreamingDataLoader:
        return StreamingDataLoader(make(remote, tmp_path), batch_size=8, **kwargs)

    assert loader(num_workers=2).prefetch_factor == ReadPolicy().prefetch_factor == 4
    assert loader(num_workers=2, prefetch_factor=3).prefetch_factor == 3
    assert loader().prefetch_factor is None  # no workers: nothing to prefetch
    custom = loader(num_workers=2, collate_fn=lambda samples: samples)
    assert custom.prefetch_factor == 2  # samples collated by the caller: torch's default


# --- resume under every start method (workers once found their rank through os.getppid(), which
# under forkserver is the fork server) --------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize(
    ("method", "persistent", "workers"),
    [
        (method, persistent, 2)
        for method in ("fork", "spawn", "forkserver")
        for persistent in (False, True)
    ]
    + [(None, False, 0)],
)
def test_a_state_taken_in_the_second_epoch_resumes_it_under_every_start_method(
    remote: Path, tmp_path: Path, method: str | None, persistent: bool, workers: int
):
    def loader(local: Path) -> StreamingDataLoader:
        return StreamingDataLoader(
            make(remote, local), batch_size=8, num_workers=workers,
            multiprocessing_context=method, persistent_workers=persistent,
        )  # fmt: skip

    first = loader(tmp_path / "a")
    list(first)  # epoch 0
    second_epoch = iter(first)
    seen = [next(second_epoch)["id"].tolist() for _ in range(5)]
    state = first.state_dict()
    assert state["epoch"] == 1
    assert state["sample_in_epoch"] == 5 * 8
    rest = [batch["id"].tolist() for batch in second_epoch]
    resumed = loader(tmp_path / "b")
    resumed.load_state_dict(state)
    assert [batch["id"].tolist() for batch in resumed] == rest
    assert set(itertools.chain(*seen, *rest)) == set(range(SAMPLES))


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_plain_dataloader_s_forkserver_workers_share_the_rank_s_run_state(
    remote: Path, tmp_path: Path
):
    dataset = make(remote, tmp_path / "c")
    plain = DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="forkserver")
    list(plain)  # epoch 0
    assert dataset.state_dict(0, from_beginning=False)["epoch"] == 0
    epoch = iter(plain)
    next(epoch)
    assert dataset.state_dict(8, from_beginning=False)["epoch"] == 1


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_state_loaded_after_an_epoch_reaches_persistent_workers(remote: Path, tmp_path: Path):
    saved = StreamingDataLoader(
        make(remote, tmp_path / "a", shuffle_algo="py1e", shuffle_seed=1), batch_size=8,
        num_workers=2,
    )  # fmt: skip
    batches = iter(saved)
    for _ in range(5):
        next(batches)
    state = saved.state_dict()
    rest = [batch["id"].tolist() for batch in batches]
    loader = StreamingDataLoader(
        make(remote, tmp_path / "b", shuffle_algo="py1s", shuffle_seed=2), batch_size=8,
        num_workers=2, persistent_workers=True,
    )  # fmt: skip
    list(loader)  # the workers start, holding the dataset as it was built
    loader.load_state_dict(state)
    assert [batch["id"].tolist() for batch in loader] == rest  # the state's seed and shuffle


@pytest.mark.parametrize(
    ("workers", "context", "leaves"),
    [(0, None, False), (2, "spawn", False), (2, "forkserver", False), (2, "fork", True)],
)
def test_a_loader_that_forks_workers_leaves_obstore_to_them(
    remote: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    context: str | None,
    leaves: bool,
):
    # Workers forked after obstore's requests here could not use it: from the loader's
    # construction on (len() may load the index), this process keeps off obstore.
    monkeypatch.setattr(obstore_client, "_FORKING_PID", None)
    monkeypatch.setattr(obstore_client, "_RUNTIME_PID", None)
    StreamingDataLoader(
        make(remote, tmp_path / "c"),
        batch_size=8,
        num_workers=workers,
        multiprocessing_context=context,
    )
    assert obstore_client.usable_here() is not leaves
    assert in_forked_child(lambda: str(obstore_client.usable_here())) == "True"


def test_the_default_start_method_is_the_platforms(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: None)
    assert dataloader_module._start_method(None) == multiprocessing.get_all_start_methods()[0]
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    assert dataloader_module._start_method(None) == "spawn"
    assert dataloader_module._start_method(multiprocessing.get_context("fork")) == "fork"


def _record_freeze_count(folder: Path, worker: int) -> None:
    (folder / f"worker-{os.getpid()}").write_text(str(gc.get_freeze_count()))


@pytest.mark.parametrize(("context", "frozen_in_workers"), [("fork", True), ("spawn", False)])
def test_forked_workers_start_with_the_loader_s_heap_frozen_and_the_loader_thaws_it(
    tmp_path: Path, context: str, frozen_in_workers: bool
):
    # A forked worker's first full collection would walk (and copy) every object it
    # inherited, on the cores its first batch needs (loader/frozen_heap.py).
    gc.unfreeze()
    remote, seen = tmp_path / "ds", tmp_path / "seen"
    seen.mkdir()
    with MDSWriter(out=str(remote), columns={"id": "int"}, size_limit=100) as writer:
        for i in range(64):
            writer.write({"id": i})
    dataset = StreamingDataset(remote=str(remote), local=str(tmp_path / "c"), batch_size=8)
    loader = StreamingDataLoader(
        dataset,
        batch_size=8,
        num_workers=2,
        multiprocessing_context=context,
        worker_init_fn=functools.partial(_record_freeze_count, seen),
    )
    batches = iter(loader)
    ids = next(batches)["id"].tolist()
    assert gc.get_freeze_count() == 0  # the first batch is in: this process collects as before
    ids += [i for batch in batches for i in batch["id"].tolist()]
    assert sorted(ids) == list(range(64))
    counts = [int(path.read_text()) for path in seen.iterdir()]
    assert len(counts) == 2
    assert all((count > 0) is frozen_in_workers for count in counts)
    assert gc.get_freeze_count() == 0


# --- a small dataset read in place, under workers forked anew each epoch ----------------------

IN_PLACE_SAMPLES = 2000


def _write_in_place(root: Path, shift: int = 0) -> list[Path]:
    """2,000 samples of 1,000 bytes in shards of about 512 KiB; each blob tells its id."""
    columns = {"id": "int", "blob": "bytes"}
    with MDSWriter(out=str(root), columns=columns, size_limit=1 << 19) as writer:
        for i in range(IN_PLACE_SAMPLES):
            writer.write({"id": i, "blob": bytes([(i + shift) % 256]) * 1000})
    return sorted(root.glob("shard.*.mds"))


def _in_place_loader(root: Path, **kwargs: Any) -> StreamingDataLoader:
    # Shards over read_whole_bytes, of small samples, of a dataset within in_place_whole_bytes:
    # each is read whole when opened, as the suite's small-1KiB shard of 51 MB is.
    policy = ReadPolicy(read_whole_bytes=0)
    dataset = StreamingDataset(local=str(root), batch_size=50, shuffle=True, read_policy=policy)
    return StreamingDataLoader(
        dataset, batch_size=50, num_workers=2, multiprocessing_context="fork", **kwargs
    )


def _epoch_blobs(loader: StreamingDataLoader, shift: int = 0) -> None:
    """One epoch: every sample once, each blob the one its id was written with."""
    ids = []
    for batch in loader:
        for sample_id, blob in zip(batch["id"].tolist(), batch["blob"], strict=True):
            assert blob == bytes([(sample_id + shift) % 256]) * 1000, sample_id
            ids.append(sample_id)
    assert sorted(ids) == list(range(IN_PLACE_SAMPLES))


def _bytes_read() -> int:
    """The bytes this process read with system calls so far (Linux's /proc/self/io)."""
    io = Path("/proc/self/io").read_text()
    return int(next(line.split()[1] for line in io.splitlines() if line.startswith("rchar:")))


def _report_reads(folder: Path, worker: int) -> None:
    """As the worker exits, write the bytes it read since torch started it (not torch's own)."""
    started = _bytes_read()

    def report() -> None:
        (folder / str(os.getpid())).write_text(str(_bytes_read() - started))

    multiprocessing.util.Finalize(None, report, exitpriority=10)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/<pid>/io")
def test_forked_workers_inherit_the_shards_the_loader_holds_and_read_none_whole(tmp_path: Path):
    # Each worker forked anew read every shard whole each epoch (about 20 ms a worker and
    # epoch for the suite's 51 MB): the loader's process now reads them once, at the end of
    # an epoch, and the next epoch's workers inherit its bytes.
    root, reads = tmp_path / "ds", tmp_path / "reads"
    reads.mkdir()
    total = sum(path.stat().st_size for path in _write_in_place(root))
    loader = _in_place_loader(root, worker_init_fn=functools.partial(_report_reads, reads))
    by_epoch = []
    for _ in range(3):
        seen = set(reads.iterdir())
        _epoch_blobs(loader)
        by_epoch.append([int(path.read_text()) for path in set(reads.iterdir()) - seen])
    assert [len(epoch) for epoch in by_epoch] == [2, 2, 2]
    # The first epoch's workers read the shards (each reads from all of a shuffled epoch's)...
    assert all(read >= total // 2 for read in by_epoch[0]), (by_epoch, total)
    # ... the next epochs' read none of them: a few small files and pipe messages at most.
    assert all(read < total // 8 for epoch in by_epoch[1:] for read in epoch), (by_epoch, total)


def test_forked_workers_read_a_shard_rewritten_in_place_as_it_is_now(tmp_path: Path):
    # The loader holds the shards read at an epoch's end; the dataset is then rewritten in
    # place (cp over each file: same inode, same sizes, other bytes). The next epoch's
    # workers must yield the new bytes, not inherit the old ones.
    root, other = tmp_path / "ds", tmp_path / "other"
    shards = _write_in_place(root)
    rewritten = _write_in_place(other, shift=7)
    assert [path.name for path in rewritten] == [path.name for path in shards]
    loader = _in_place_loader(root)
    _epoch_blobs(loader)
    inodes = [path.stat().st_ino for path in shards]
    for path, new in zip(shards, rewritten, strict=True):
        with open(path, "r+b") as file:  # in place, as cp does: truncated, then written
            file.truncate(0)
            file.write(new.read_bytes())
    assert [path.stat().st_ino for path in shards] == inodes
    _epoch_blobs(loader, shift=7)
    _epoch_blobs(loader, shift=7)  # held again after that epoch: the new bytes


def test_a_shard_cut_short_between_epochs_is_a_format_error_under_forked_workers(
    tmp_path: Path,
):
    root = tmp_path / "ds"
    shards = _write_in_place(root)
    loader = _in_place_loader(root)
    _epoch_blobs(loader)  # the loader's process holds every shard now
    os.truncate(shards[1], 100)
    with pytest.raises(ShardFormatError, match=re.escape(f"{shards[1]} is 100 bytes but index")):
        _epoch_blobs(loader)
