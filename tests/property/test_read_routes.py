"""Every route the read policy can choose yields the batches of the simplest route (issue 28).

The reference reads one sample at a time through ``__getitem__`` (a subclass that overrides
it, so iteration goes sample by sample) and collates with a plain DataLoader, in process.
Each route is a :class:`ReadPolicy` that forces one way of reading (shards read whole,
mapped, read with ``pread``; shuffled batches read from the files, ahead or not; batches
decoded together or alone; packed into in-memory files; handed over as ids), read through
``StreamingDataLoader`` (whole device batches) and through plain iteration of the dataset
(sample by sample). Whatever the route, the batches must be the reference's: as many, in
the same order, the same keys, values and types.

The Hypothesis part draws datasets (MDS of every compression, hashes on and off; Parquet) and
settings, in process; the parametrized part reads fixed datasets with DataLoader workers
under every start method.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from tests.read_routes_data import (
    KIB,
    MIB,
    ForcedRoute,
    MDSData,
    ParquetData,
    column_routes,
    route_name,
)
from torch.utils.data import DataLoader, default_collate

from shardstream import LocalDataset, StreamingDataLoader, StreamingDataset
from shardstream.cache.layout import kept_bytes
from shardstream.format.compression import COMPRESSIONS
from shardstream.pipeline.column_batch import PackedBytes
from shardstream.pipeline.policy import ReadPolicy, Route
from shardstream.tables.dataset import ParquetDataset
from shardstream.tables.layout_index import local_layouts

#: Larger than any file, sample or batch here: a threshold never reached.
HUGE = 1 << 50

#: One policy per route the read policy can choose, each forcing it where it applies.
ROUTES: dict[str, ReadPolicy] = {
    "default": ReadPolicy(),
    "read whole": ReadPolicy(read_whole_bytes=HUGE),
    "mapped": ReadPolicy(read_whole_bytes=0, pread_mean_bytes=HUGE),
    "pread": ReadPolicy(read_whole_bytes=0, pread_mean_bytes=0),
    "files, read ahead": ReadPolicy(
        read_whole_bytes=0, pread_mean_bytes=HUGE, mapped_read_bytes=0, read_ahead=True
    ),
    "files, pread": ReadPolicy(
        read_whole_bytes=0, pread_mean_bytes=HUGE, mapped_read_bytes=0, read_ahead=False
    ),
    "grouped": ReadPolicy(group_sample_bytes=HUGE, group_samples=1 << 20, group_rows=8),
    "not grouped": ReadPolicy(group_rows=1),
    "packed": ReadPolicy(pack_bytes=0, pack_mean_bytes=0, by_id=False),
    "not packed": ReadPolicy(pack_bytes=HUGE),
    "by id": ReadPolicy(by_id=True, pack_bytes=0, pack_mean_bytes=0, read_whole_bytes=0),
    "one open shard": ReadPolicy(open_shards=1, open_bytes=1),
    "one fetch thread": ReadPolicy(fetch_threads=1),
}

#: The routes read under spawn and forkserver too (each of their workers starts in seconds).
WORKER_ROUTES = ["default", "pread", "files, read ahead", "packed", "by id"]

#: Every shard compression shardstream writes, at its fastest level where it takes one.
CODECS = [None] + [
    code if family.levels is None else f"{code}:{family.levels.start}"
    for code, family in COMPRESSIONS.items()
]


class OneByOne(StreamingDataset):
    """The reference: each sample made by ``__getitem__``, one at a time (the simplest route)."""

    def __getitem__(self, sample_id: int) -> dict[str, Any]:
        sample: dict[str, Any] = super().__getitem__(sample_id)
        return sample


def open_dataset(
    remote: Path, local: Path, kind: type[StreamingDataset] = StreamingDataset, **options: Any
) -> StreamingDataset:
    return kind(remote=str(remote), local=str(local), num_canonical_nodes=1, **options)


def reference(remote: Path, local: Path, **options: Any) -> list[dict[str, Any]]:
    """The expected batches: one sample at a time, collated by a plain in-process DataLoader."""
    options = {**options, "zero_copy": False, "read_policy": None}
    ds = open_dataset(remote, local, OneByOne, **options)
    with collating_views():
        return list(DataLoader(ds, batch_size=options["batch_size"]))


@contextlib.contextmanager
def collating_views() -> Iterator[None]:
    """Torch's collation of read-only arrays (views of a shard) warns, as it would for a user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        yield


def by_batches(
    ds: StreamingDataset, workers: int = 0, context: str | None = None
) -> list[dict[str, Any]]:
    """The batch route: whole device batches through StreamingDataLoader."""
    options: dict[str, Any] = {"num_workers": workers}
    if workers:
        options.update(multiprocessing_context=context, persistent_workers=False)
    return list(StreamingDataLoader(ds, batch_size=ds.batch_size, **options))


def by_samples(ds: StreamingDataset) -> list[dict[str, Any]]:
    """The per-sample route: iterating the dataset, each device batch's samples collated."""
    width = ds.batch_size
    assert width is not None
    samples = list(ds)
    assert len(samples) == len(ds), f"{len(samples)} samples, where len() says {len(ds)}"
    out = []
    for begin in range(0, len(samples), width):
        chunk = [as_collated(sample, ds.zero_copy) for sample in samples[begin : begin + width]]
        with collating_views():
            out.append(default_collate(chunk))
    return out


def as_collated(sample: dict[str, Any], zero_copy: bool) -> dict[str, Any]:
    """``sample`` as default_collate can take it: ``zero_copy`` memoryviews as ``bytes``.

    zero_copy hands ``bytes`` values as read-only memoryviews on purpose (no copy); torch's
    collation would take them for sequences of ints, so they are checked and made ``bytes``.
    """
    out = {}
    for name, value in sample.items():
        if isinstance(value, memoryview):
            assert zero_copy, f"{name}: a memoryview without zero_copy"
            assert value.readonly, f"{name}: a writable view of a shard"
            value = bytes(value)
        out[name] = value
    return out


def assert_same_batches(
    expected: list[dict[str, Any]], got: list[dict[str, Any]], *, zero_copy: bool = False
) -> None:
    """As many batches, in order, each with the same keys, values and types."""
    assert len(got) == len(expected), f"{len(got)} batches, expected {len(expected)}"
    for number, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert isinstance(have, dict), f"batch {number} is a {type(have).__name__}"
        assert list(have) == list(want), f"batch {number}: keys {list(have)} != {list(want)}"
        for name in want:
            assert_same(want[name], have[name], f"batch {number}[{name!r}]", zero_copy)


def assert_same(want: Any, have: Any, where: str, zero_copy: bool) -> None:
    """``have`` is ``want``: tensors of one dtype and values, lists of the same Python types."""
    if isinstance(want, torch.Tensor):
        assert isinstance(have, torch.Tensor), f"{where}: {type(have).__name__}, not a tensor"
        assert have.dtype == want.dtype, f"{where}: dtype {have.dtype} != {want.dtype}"
        assert have.shape == want.shape, f"{where}: shape {have.shape} != {want.shape}"
        assert torch.equal(have, want), f"{where}: {have} != {want}"
    elif isinstance(want, list):
        assert isinstance(have, list), f"{where}: {type(have).__name__}, not a list"
        assert len(have) == len(want), f"{where}: {len(have)} values, expected {len(want)}"
        for k, (a, b) in enumerate(zip(want, have, strict=True)):
            assert_same(a, b, f"{where}[{k}]", zero_copy)
    elif isinstance(want, bytes) and isinstance(have, memoryview):
        # zero_copy hands bytes values as read-only memoryviews of the shard on purpose.
        assert zero_copy, f"{where}: a memoryview without zero_copy"
        assert have.readonly, f"{where}: a writable view of a shard"
        assert bytes(have) == want, f"{where}: other bytes"
    else:
        assert type(have) is type(want), f"{where}: {type(have).__name__} != {type(want)}"
        assert have == want, f"{where}: {have!r} != {want!r}"


def cache_limit_for(remote: Path, scratch: Path, readers: int) -> tuple[int, int]:
    """A cache limit that holds the largest shard or a few smaller ones, beside the rest.

    The rest is what the cache keeps beside shards, measured as ``state_allowance`` does, here
    through a dataset: a Parquet folder has no index.json of its own. Returns the limit and
    the bytes of every shard on disk (compressed and not), which an epoch reads.
    """
    probe = open_dataset(remote, scratch / "probe", batch_size=1)
    cache = probe._prepare().cache
    footprints = [cache.footprint(shard) for shard in range(probe.num_shards)]
    limit = max(footprints) + kept_bytes(str(scratch / "probe")) + 512 * readers
    return limit, sum(footprints)


# --- the Hypothesis part: drawn datasets and settings, in process ------------------------------


@st.composite
def blob_sizes(draw: st.DrawFn, samples: int) -> tuple[int, ...]:
    """Sizes from nothing to a MiB, mostly small; at most two near a MiB."""
    tiny, small = st.integers(0, 64), st.integers(65, 8 * KIB)
    size = st.one_of(tiny, tiny, small, small, st.integers(8 * KIB, 64 * KIB))
    sizes = draw(st.lists(size, min_size=samples, max_size=samples))
    for _ in range(draw(st.integers(0, 2))):
        sizes[draw(st.integers(0, samples - 1))] = draw(st.integers(256 * KIB, MIB))
    return tuple(sizes)


@st.composite
def mds_data(draw: st.DrawFn) -> MDSData:
    samples = draw(st.integers(1, 48))
    return MDSData(
        blob_sizes=draw(blob_sizes(samples)),
        compression=draw(st.sampled_from(CODECS)),
        hashes=draw(st.sampled_from([(), ("xxh64",), ("sha1", "xxh3_64")])),
        size_limit=draw(st.sampled_from([2 * KIB, 16 * KIB, 128 * KIB, MIB])),
        var_dtype=draw(st.sampled_from(["int8", "int32", "float32", "float64", "uint8"])),
        var_shape=tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def parquet_data(draw: st.DrawFn) -> ParquetData:
    rows_and_groups = st.tuples(st.integers(1, 30), st.integers(1, 12))
    files = draw(st.lists(rows_and_groups.map(lambda f: (f[0], min(f))), min_size=1, max_size=4))
    return ParquetData(
        files=tuple(files),
        blob_sizes=draw(blob_sizes(sum(rows for rows, _ in files))),
        compression=draw(st.sampled_from(["none", "snappy", "gzip", "zstd", "brotli", "lz4"])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@pytest.mark.parametrize("zero_copy", [False, True])
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=mds_data() | parquet_data(),
    batch_size=st.integers(1, 6),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    limited=st.booleans(),
)
def test_every_route_yields_the_reference_batches(
    zero_copy: bool,
    data: MDSData | ParquetData,
    batch_size: int,
    shuffle: bool,
    seed: int,
    limited: bool,
) -> None:
    with tempfile.TemporaryDirectory(prefix="read-routes-") as folder:
        scratch = Path(folder)
        remote = data.write(scratch / "remote")
        options: dict[str, Any] = {
            "batch_size": batch_size, "shuffle": shuffle, "shuffle_seed": seed,
            "validate_hash": data.validate_hash if isinstance(data, MDSData) else None,
            "cache_limit": cache_limit_for(remote, scratch, readers=1)[0] if limited else None,
        }  # fmt: skip
        local = scratch / "cache"
        expected = reference(remote, local, **options)
        assert sum(len(batch["blob"]) for batch in expected) >= len(data.blob_sizes)
        for name, policy in ROUTES.items():
            note(f"route {name!r}")
            route = {**options, "zero_copy": zero_copy, "read_policy": policy}
            got = by_batches(open_dataset(remote, local, **route))
            assert_same_batches(expected, got, zero_copy=zero_copy)
            got = by_samples(open_dataset(remote, local, **route))
            assert_same_batches(expected, got, zero_copy=zero_copy)
        if not limited:  # read in place: never mapped; read whole, or as runs of the file
            in_place_routes = {
                "read whole": ROUTES["mapped"],  # a small dataset of small samples
                "runs, read ahead": ROUTES["files, read ahead"].replace(in_place_whole_bytes=0),
            }
            for name, policy in in_place_routes.items():
                note(f"route {name!r}, read in place")
                route = {**options, "zero_copy": zero_copy, "read_policy": policy}
                in_place = StreamingDataset(local=str(remote), num_canonical_nodes=1, **route)
                assert_same_batches(expected, by_batches(in_place), zero_copy=zero_copy)
                in_place = StreamingDataset(local=str(remote), num_canonical_nodes=1, **route)
                assert_same_batches(expected, by_samples(in_place), zero_copy=zero_copy)


# --- random access: every entrance of one id reads the samples of iteration -------------------


def assert_same_sample(want: dict[str, Any], have: dict[str, Any], where: str) -> None:
    """``have`` is ``want``: the same keys, and values of the same types, dtypes and shapes."""
    assert list(have) == list(want), f"{where}: keys {list(have)} != {list(want)}"
    for name, value in want.items():
        got = have[name]
        assert type(got) is type(value), f"{where}[{name!r}]: {type(got)} != {type(value)}"
        if isinstance(value, np.ndarray):
            assert (got.dtype, got.shape) == (value.dtype, value.shape), f"{where}[{name!r}]"
            assert np.array_equal(got, value), f"{where}[{name!r}]: other values"
        elif isinstance(value, memoryview):
            assert got.readonly, f"{where}[{name!r}]: a writable view"
            assert bytes(got) == bytes(value), f"{where}[{name!r}]: other bytes"
        else:
            assert got == value, f"{where}[{name!r}]: {got!r} != {value!r}"


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=mds_data() | parquet_data(), zero_copy=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_random_access_reads_the_samples_of_iteration(
    data: MDSData | ParquetData, zero_copy: bool, seed: int
) -> None:
    """``ds[i]``, ``LocalDataset[i]`` and ``ParquetDataset[i]`` give iteration's samples.

    Iteration (the pipeline's per-sample decode stage, unshuffled) reads every sample in id
    order; each one-id entrance is asked for every id, in a random order, negative ids too.
    """
    with tempfile.TemporaryDirectory(prefix="one-id-") as folder:
        root = data.write(Path(folder) / "data")
        validate = data.validate_hash if isinstance(data, MDSData) else None
        ds = StreamingDataset(
            local=str(root), batch_size=1, num_canonical_nodes=1, zero_copy=zero_copy,
            validate_hash=validate,
        )  # fmt: skip
        iterated = list(ds)
        size = len(data.blob_sizes)
        assert len(iterated) == size == ds.num_samples
        source: Any
        if isinstance(data, MDSData):
            ids = [data.sample(i)["id"] for i in range(size)]
            source = LocalDataset(root, zero_copy=zero_copy, validate_hash=validate)
            assert_same_samples(iterated, list(source), "iterating a LocalDataset")
        else:
            ids = data.table(0, size)["id"].to_pylist()
            source = ParquetDataset(str(root), local_layouts(str(root)))
        assert [int(sample["id"]) for sample in iterated] == ids  # in id order
        order = np.random.default_rng(seed).permutation(size).tolist()
        for name, entrance in (("ds", ds), ("source", source)):
            for i in order:
                key = i - size if i % 2 else i  # negative ids count from the end
                assert_same_sample(iterated[i], entrance[key], f"{name}[{key}]")
            for bad in (size, -size - 1):
                with pytest.raises(IndexError):
                    entrance[bad]


def assert_same_samples(want: list[dict[str, Any]], have: list[dict[str, Any]], where: str) -> None:
    assert len(have) == len(want), f"{where}: {len(have)} samples, expected {len(want)}"
    for k, (a, b) in enumerate(zip(want, have, strict=True)):
        assert_same_sample(a, b, f"{where}, sample {k}")


# --- the parametrized part: DataLoader workers under every start method -----------------------


def _mixed_sizes() -> tuple[int, ...]:
    """Bytes to a MiB: mostly small samples (many a shard), a few large, two near a MiB."""
    sizes = [[0, 1, 60, 700, 3 * KIB, 300, 12, 40 * KIB][i % 8] for i in range(96)]
    sizes[13], sizes[30], sizes[71] = MIB, 700 * KIB, 100 * KIB
    return tuple(sizes)


#: The datasets the worker tests read: several shards (row groups) each, a MiB-sized sample.
FIXED: dict[str, MDSData | ParquetData] = {
    "mds": MDSData(
        blob_sizes=_mixed_sizes(), compression="zstd", hashes=("xxh64",), size_limit=256 * KIB,
        var_dtype="float32", var_shape=(2, 3), seed=28,
    ),
    "parquet": ParquetData(
        files=((40, 9), (7, 7), (49, 20)), blob_sizes=_mixed_sizes(), compression="snappy",
        seed=28,
    ),
}  # fmt: skip

#: Shuffled, as training reads; the batch size of every worker test.
FIXED_OPTIONS: dict[str, Any] = {"batch_size": 4, "shuffle": True, "shuffle_seed": 2028}

Fixed = dict[str, tuple[Path, Path, list[dict[str, Any]]]]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Fixed:
    """Each fixed dataset's remote folder, cache folder and reference batches."""
    # Forkserver workers fork from a server with torch imported, not each importing it anew.
    multiprocessing.set_forkserver_preload(["torch", "shardstream"])
    out = {}
    for kind, data in FIXED.items():
        root = tmp_path_factory.mktemp(f"fixed-{kind}")
        remote = data.write(root / "remote")
        expected = reference(remote, root / "reference", **fixed_options(kind))
        whole = len(data.blob_sizes) // FIXED_OPTIONS["batch_size"]
        assert len(expected) == whole  # the reference read every sample once
        out[kind] = (remote, root / "cache", expected)
    return out


def fixed_options(kind: str, **options: Any) -> dict[str, Any]:
    data = FIXED[kind]
    validate = data.validate_hash if isinstance(data, MDSData) else None
    return {**FIXED_OPTIONS, "validate_hash": validate, **options}


@pytest.fixture
def loader_reads(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Counts the batches the loader's process read by id, and the columns it unpacked."""
    counts: collections.Counter[str] = collections.Counter()
    read_batch, unpack = StreamingDataset.read_batch, PackedBytes.unpack

    def counted_read(self: StreamingDataset, batch: Any) -> Any:
        counts["by id"] += 1
        return read_batch(self, batch)

    def counted_unpack(self: PackedBytes) -> list[bytes]:
        counts["packed"] += 1
        return unpack(self)

    monkeypatch.setattr(StreamingDataset, "read_batch", counted_read)
    monkeypatch.setattr(PackedBytes, "unpack", counted_unpack)
    return counts


def assert_route_taken(route: str, kind: str, counts: collections.Counter[str]) -> None:
    """The routes seen from the loader's process were taken (Parquet is never read by id)."""
    if route == "packed" or (route == "by id" and kind == "mds"):
        assert counts[route] > 0, f"no batch came {route}: {dict(counts)}"


#: The routes that differ for Parquet (row groups are read whole: no pread, files or ids).
PARQUET_ROUTES = ["default", "packed"]

#: (start method, dataset, route): every route under fork, a handful under spawn and forkserver.
WORKER_CASES = [("fork", kind, route) for kind in FIXED for route in ROUTES] + [
    (method, kind, route)
    for method in ("spawn", "forkserver")
    for kind in FIXED
    for route in (WORKER_ROUTES if kind == "mds" else PARQUET_ROUTES)
]


@pytest.mark.parametrize(("method", "kind", "route"), WORKER_CASES)
def test_workers_yield_the_reference_batches(
    fixed: Fixed, loader_reads: collections.Counter[str], method: str, kind: str, route: str
) -> None:
    remote, local, expected = fixed[kind]
    ds = open_dataset(remote, local, **fixed_options(kind, read_policy=ROUTES[route]))
    assert_same_batches(expected, by_batches(ds, workers=2, context=method))
    assert_route_taken(route, kind, loader_reads)


@pytest.mark.parametrize("route", ROUTES)
def test_forked_workers_with_zero_copy_yield_the_reference_batches(
    fixed: Fixed, loader_reads: collections.Counter[str], route: str
) -> None:
    remote, local, expected = fixed["mds"]
    options = fixed_options("mds", read_policy=ROUTES[route], zero_copy=True)
    ds = open_dataset(remote, local, **options)
    assert_same_batches(expected, by_batches(ds, workers=2, context="fork"), zero_copy=True)
    assert_route_taken(route, "mds", loader_reads)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("kind", list(FIXED))
def test_workers_yield_the_reference_samples(fixed: Fixed, method: str, kind: str) -> None:
    """The per-sample route with workers: a plain DataLoader collates each worker's samples."""
    remote, local, expected = fixed[kind]
    ds = open_dataset(remote, local, **fixed_options(kind))
    with collating_views():
        loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=method)
        assert_same_batches(expected, list(loader))


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("kind", list(FIXED))
def test_no_workers_yield_the_reference_batches(fixed: Fixed, kind: str, route: str) -> None:
    remote, local, expected = fixed[kind]
    options = fixed_options(kind, read_policy=ROUTES[route])
    assert_same_batches(expected, by_batches(open_dataset(remote, local, **options)))
    assert_same_batches(expected, by_samples(open_dataset(remote, local, **options)))


@pytest.mark.parametrize("route", WORKER_ROUTES)
@pytest.mark.parametrize("kind", list(FIXED))
def test_workers_under_a_cache_limit_yield_the_reference_batches(
    fixed: Fixed, loader_reads: collections.Counter[str], tmp_path: Path, kind: str, route: str
) -> None:
    """Shards are evicted and fetched again meanwhile, also between a worker and the loader."""
    remote, _, expected = fixed[kind]
    limit, shards = cache_limit_for(remote, tmp_path, readers=3)
    assert shards > limit  # the epoch cannot keep every shard: some are evicted
    options = fixed_options(kind, read_policy=ROUTES[route], cache_limit=limit)
    ds = open_dataset(remote, tmp_path / "cache", **options)
    assert_same_batches(expected, by_batches(ds, workers=2, context="fork"))
    assert_route_taken(route, kind, loader_reads)


# --- every pipeline: each stage variant the policy can pick, forced ----------------------------

#: How shard files are opened (the policy's thresholds), under every pipeline.
OPENINGS: dict[str, dict[str, Any]] = {
    "read whole": {"read_whole_bytes": HUGE},
    "mapped": {"read_whole_bytes": 0, "pread_mean_bytes": HUGE},
    "pread": {"read_whole_bytes": 0, "pread_mean_bytes": 0},
}


def forced(opening: str, route: Route | None) -> ForcedRoute:
    """A policy taking ``route`` (files read once they may be; batches grouped) on ``opening``."""
    grouped: dict[str, Any] = {
        "mapped_read_bytes": 0,
        "group_sample_bytes": HUGE,
        "group_samples": 1 << 20,
    }
    return ForcedRoute(**OPENINGS[opening], **grouped, forced=route)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=mds_data(),
    batch_size=st.integers(1, 6),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    zero_copy=st.booleans(),
)
def test_every_pipeline_yields_the_plain_reading(
    data: MDSData, batch_size: int, shuffle: bool, seed: int, zero_copy: bool
) -> None:
    """Each pipeline (opening x decode stage x every batch-mode stage mix) reads the reference.

    The batch-mode pipelines go through ``StreamingDataLoader`` in process (a batch handed
    over by id is read by the loader's read stage); the per-sample pipeline through iteration;
    the ids pipeline and ``ds[i]`` through a subclass's ``__getitem__``.
    """
    with tempfile.TemporaryDirectory(prefix="pipelines-") as folder:
        scratch = Path(folder)
        remote = data.write(scratch / "remote")
        options: dict[str, Any] = {
            "batch_size": batch_size, "shuffle": shuffle, "shuffle_seed": seed,
            "validate_hash": data.validate_hash, "zero_copy": zero_copy,
        }  # fmt: skip
        local = scratch / "cache"
        expected = reference(remote, local, **options)
        for opening in OPENINGS:
            for route in column_routes():
                note(f"{opening}: {route_name(route)}")
                ds = open_dataset(remote, local, read_policy=forced(opening, route), **options)
                assert_same_batches(expected, by_batches(ds), zero_copy=zero_copy)
            note(f"{opening}: samples, ids")
            policy = forced(opening, None)
            ds = open_dataset(remote, local, read_policy=policy, **options)
            assert_same_batches(expected, by_samples(ds), zero_copy=zero_copy)
            ds = open_dataset(remote, local, OneByOne, read_policy=policy, **options)
            assert_same_batches(expected, by_samples(ds), zero_copy=zero_copy)


#: (start method, opening, pipeline): every batch-mode pipeline of a worker under fork, on
#: mapped and pread shards; under spawn and forkserver (seconds a worker), each mix of by id
#: and file reads once (read ahead with file reads, first decodes of 3 by id).
PIPELINE_CASES = [
    ("fork", opening, route) for opening in ("mapped", "pread") for route in column_routes(True)
] + [
    (method, "pread" if route.by_id else "mapped", route)
    for method in ("spawn", "forkserver")
    for route in column_routes(hand_over=True)
    if route.read_ahead == route.file_reads and route.first_rows == (3 if route.by_id else 1)
]


@pytest.mark.parametrize(
    ("method", "opening", "route"),
    PIPELINE_CASES,
    ids=[f"{method}-{opening}-{route_name(route)}" for method, opening, route in PIPELINE_CASES],
)
def test_every_worker_pipeline_yields_the_reference_batches(
    fixed: Fixed,
    loader_reads: collections.Counter[str],
    method: str,
    opening: str,
    route: Route,
) -> None:
    remote, local, expected = fixed["mds"]
    ds = open_dataset(remote, local, **fixed_options("mds", read_policy=forced(opening, route)))
    assert_same_batches(expected, by_batches(ds, workers=2, context=method))
    if route.by_id:  # the loader's read stage read them
        assert loader_reads["by id"] > 0, dict(loader_reads)
