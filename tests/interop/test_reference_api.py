"""The reference's public dataset API, called on mosaicml-streaming 0.13 and on shardstream.

The same calls (tests/interop/api_cases.py) on the same datasets, in the reference's venv
(ref_api_worker.py) and here: introspection values and their types, settled Stream weights,
NumPy-style keys, the shard cache calls, and the builtin class of each error it raises (ours
must be an instance of it).
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
from pathlib import Path
from typing import Any

import pytest

import shardstream
from shardstream import MDSWriter, StreamingDataset
from tests.interop.api_cases import (
    COLUMNS,
    SIZES,
    SIZES_READ,
    TABLES,
    WEIGHTS,
    WRITER,
    bad_values,
    files_of,
    ids,
    keys,
    make_dataset,
    settled_weights,
    shard_facts,
    split_bad_samples,
)
from tests.interop.conftest import reference_python

pytestmark = pytest.mark.interop

WORKER = Path(__file__).with_name("ref_api_worker.py")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job both libraries run (datasets written by shardstream), and the reference's result."""
    base = tmp_path_factory.mktemp("reference-api")
    remotes, first = [], 0
    for number, (count, writer) in enumerate(zip(SIZES, WRITER, strict=True)):
        root = base / "remotes" / str(number)
        with MDSWriter(out=str(root), columns=COLUMNS, **writer) as out:
            for i in range(first, first + count):
                out.write({"id": i, "text": f"sample {i} " * (i % 4 + 1)})
        remotes.append(str(root))
        first += count
    empty = base / "empty"
    empty.mkdir()
    (empty / "index.json").write_text(json.dumps({"version": 2, "shards": []}))
    job: dict[str, Any] = {"remotes": remotes, "empty": str(empty), "scratch": str(base / "ref"),
           "out": str(base / "ref.pkl")}  # fmt: skip
    job_path = base / "job.json"
    job_path.write_text(json.dumps(job))
    completed = subprocess.run(
        [reference_python(), str(WORKER), str(job_path)], capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        pytest.fail(f"the reference worker failed:\n{completed.stdout}\n{completed.stderr}")
    with open(job["out"], "rb") as handle:
        ref = pickle.load(handle)
    job["scratch"] = str(base / "ours")
    return job, ref


def dataset(job: dict[str, Any], name: str, weights: list[dict[str, Any]], **kwargs: Any) -> Any:
    return make_dataset(shardstream, job, name, weights, **kwargs)


def builtin(name: str) -> type[BaseException]:
    module, _, qualname = name.partition(".")
    error: type[BaseException] = getattr(importlib.import_module(module), qualname)
    return error


def raises_like(expected: str | None, call: Any) -> None:
    """``call`` raises an instance of the builtin class the reference raised."""
    assert expected is not None, "the reference raised nothing here"
    with pytest.raises(builtin(expected)):
        call()


def test_introspection_values_and_types_match(setup: tuple[dict[str, Any], dict[str, Any]]):
    job, ref = setup
    want = ref["introspection"]
    ds = dataset(job, "tables", [{}, {}])
    for name in TABLES:
        table = getattr(ds, name)
        assert (table.tolist(), str(table.dtype)) == tuple(want["tables"][name]), name
    for name in SIZES_READ:
        value = getattr(ds, name)
        assert (value, type(value).__name__) == tuple(want["sizes"][name]), name
    assert len(ds.shards) == len(want["shards"])
    for shard, expected in zip(ds.shards, want["shards"], strict=True):
        got = shard_facts(shard)
        # The same file, under each library's own cache folder.
        expected = {**expected, "path": expected["path"].replace("/ref/", "/ours/")}
        assert got == expected


def test_numpy_style_keys_read_the_same_samples(setup: tuple[dict[str, Any], dict[str, Any]]):
    job, ref = setup
    want = ref["introspection"]
    ds = dataset(job, "keys", [{}, {}])
    assert {name: ids(ds[key]) for name, key in keys().items()} == want["keys"]
    raises_like(want["bad_key"], lambda: ds[1.5])
    raises_like(want["out_of_range"], lambda: ds[10**6])


def test_prepare_and_evict_shard_do_what_the_references_do(
    setup: tuple[dict[str, Any], dict[str, Any]],
):
    job, ref = setup
    want = ref["introspection"]
    ds = dataset(job, "cache", [{}, {}])
    last = ds.num_shards - 1
    folder = os.path.join(job["scratch"], "cache", "1")
    cache = [files_of(folder)]
    assert ds.prepare_shard(last) is want["prepare"] is None
    cache.append(files_of(folder))
    assert ds.evict_shard(last) is want["evict"] is None
    cache.append(files_of(folder))
    assert cache == want["cache"]  # fetched and decompressed, then gone
    raises_like(want["prepare_out_of_range"], lambda: ds.prepare_shard(10**6))


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_streams_are_settled_with_the_references_weights(
    setup: tuple[dict[str, Any], dict[str, Any]], name: str
):
    job, ref = setup
    given, epoch_size = WEIGHTS[name]
    ds = dataset(job, f"weights-{name}", given, epoch_size=epoch_size)
    ds.prepare()  # the reference settles them in its constructor; we at first use
    got = settled_weights(ds.streams)
    want = ref["weights"][name]
    if not name.endswith("_rounded"):
        assert got == want
        return
    # The sample left over by rounding may go to another stream: all else is the same.
    assert [[kind for _, kind in stream] for stream in got] == [
        [kind for _, kind in stream] for stream in want
    ]
    assert [stream[0] for stream in got] == [stream[0] for stream in want]  # proportions
    chosen, wanted = [s[2][0] for s in got], [s[2][0] for s in want]
    assert sum(chosen) == sum(wanted)
    assert all(abs(c - w) <= 1 for c, w in zip(chosen, wanted, strict=True))
    assert [s[1][0] for s in got] == [c / n for c, n in zip(chosen, SIZES, strict=True)]


@pytest.mark.parametrize("case", list(bad_values()))
def test_a_bad_column_value_raises_what_the_reference_raises(
    setup: tuple[dict[str, Any], dict[str, Any]], case: str, tmp_path: Path
):
    _, ref = setup
    spec, value = bad_values()[case]

    def write() -> None:
        with MDSWriter(out=str(tmp_path / "out"), columns={"c": spec}) as writer:
            writer.write({"c": value})

    raises_like(ref["errors"]["values"][case], write)


@pytest.mark.parametrize("case", list(split_bad_samples()))
def test_a_bad_sample_for_a_text_writer_raises_what_the_reference_raises(
    setup: tuple[dict[str, Any], dict[str, Any]], case: str, tmp_path: Path
):
    _, ref = setup
    writer, columns, sample = split_bad_samples()[case]
    kwargs = {"separator": "|"} if writer == "XSVWriter" else {}

    def write() -> None:
        with getattr(shardstream, writer)(out=str(tmp_path), columns=columns, **kwargs) as out:
            out.write(sample)

    raises_like(ref["errors"]["split_samples"][case], write)
    assert not (tmp_path / "index.json").exists()


def test_an_empty_stream_and_a_starved_stratum_raise_what_the_reference_raises(
    setup: tuple[dict[str, Any], dict[str, Any]],
):
    job, ref = setup
    errors = ref["errors"]
    raises_like(errors["empty"], StreamingDataset(local=job["empty"], batch_size=4).prepare)
    tiny = dataset(job, "stratified", [{"proportion": 0.99}, {"proportion": 0.01}],
                   epoch_size=20, batching_method="stratified")  # fmt: skip
    raises_like(errors["stratified"], lambda: next(iter(tiny)))
