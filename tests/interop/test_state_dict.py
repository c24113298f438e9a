"""State dicts cross between shardstream and mosaicml-streaming 0.13 both ways.

Ours (the reference's keys, the pipeline's ``stages`` and our own keys) loads into the
reference, which resumes where we stopped; the reference's loads into ours, which resumes
where it says. The reference runs in its own venv (``ref_resume.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shardstream import MDSWriter, StreamingDataLoader, StreamingDataset
from tests.interop.conftest import reference_python

pytestmark = pytest.mark.interop

SAMPLES = 117
BATCH = 4
WORKER = Path(__file__).with_name("ref_resume.py")
#: (shuffle, canonical nodes, batches read before the state is saved)
REFERENCE_KEYS = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed",
                  "initial_physical_nodes")  # fmt: skip
PLACES = [(False, 1, 0), (False, 1, 5), (False, 2, 11), (True, 1, 7), (True, 4, 29)]


def ours(folder: Path, cache: Path, shuffle: bool, ncn: int) -> StreamingDataset:
    return StreamingDataset(
        remote=str(folder), local=str(cache), batch_size=BATCH, shuffle=shuffle,
        num_canonical_nodes=ncn,
    )  # fmt: skip


def batches(loader: StreamingDataLoader) -> list[list[int]]:
    return [[int(i) for i in batch["id"]] for batch in loader]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("state-dict") / "ds"
    with MDSWriter(out=str(root), columns={"id": "int"}, size_limit=300) as writer:
        for i in range(SAMPLES):
            writer.write({"id": i})
    return root


def run_reference(cases: list[dict[str, Any]], scratch: Path) -> list[Any]:
    job, out = scratch / "job.json", scratch / "out.json"
    job.write_text(json.dumps(cases))
    completed = subprocess.run(
        [reference_python(), str(WORKER), str(job), str(out)], capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        pytest.fail(f"the reference worker failed:\n{completed.stdout}\n{completed.stderr}")
    answers: list[Any] = json.loads(out.read_text())
    return answers


def test_our_state_dicts_resume_the_reference_where_we_stopped(folder: Path, tmp_path: Path):
    cases, expected = [], []
    for number, (shuffle, ncn, read) in enumerate(PLACES):
        loader = StreamingDataLoader(
            ours(folder, tmp_path / "ours", shuffle, ncn), batch_size=BATCH
        )
        whole = batches(loader)
        stopped = StreamingDataLoader(
            ours(folder, tmp_path / "ours", shuffle, ncn), batch_size=BATCH
        )
        for _, _ in zip(range(read), stopped, strict=False):
            pass
        state = stopped.state_dict()
        assert state["stages"] == {"batch": read}
        copy = tmp_path / f"ref-{number}"  # the reference may write beside the shards
        shutil.copytree(folder, copy)
        # Ours whole, and its reference keys alone (what the reference writes at that place).
        cases += [
            {"mode": "resume", "folder": str(copy), "batch": BATCH, "shuffle": shuffle,
             "ncn": ncn, "state": keys}
            for keys in (state, {key: state[key] for key in REFERENCE_KEYS})
        ]  # fmt: skip
        expected.append(whole[read:])
    got = run_reference(cases, tmp_path)
    for (shuffle, ncn, _), theirs, own, mine in zip(
        PLACES, got[::2], got[1::2], expected, strict=True
    ):
        assert theirs == own  # our stages and keys change nothing for the reference
        if ncn == 1:  # as many samples left as we have (its shuffle is not ours) ...
            assert sum(map(len, theirs)) == sum(map(len, mine))
            if not shuffle:  # ... and unshuffled, the very samples we have not read
                assert theirs == mine


def test_the_reference_s_state_dicts_resume_us_where_it_says(folder: Path, tmp_path: Path):
    # (Before its first batch the reference saves epoch -1, which no dataset resumes.)
    places = [place for place in PLACES if place[2] > 0]
    cases = []
    for number, (shuffle, ncn, read) in enumerate(places):
        copy = tmp_path / f"ref-{number}"
        shutil.copytree(folder, copy)
        cases.append({"mode": "save", "folder": str(copy), "batch": BATCH, "shuffle": shuffle,
                      "ncn": ncn, "read": read})  # fmt: skip
    states = run_reference(cases, tmp_path)
    for (shuffle, ncn, read), state in zip(places, states, strict=True):
        assert set(state) == set(REFERENCE_KEYS)
        assert (state["epoch"], state["sample_in_epoch"]) == (0, read * BATCH)
        whole = batches(
            StreamingDataLoader(ours(folder, tmp_path / "ours", shuffle, ncn), batch_size=BATCH)
        )
        resumed = StreamingDataLoader(
            ours(folder, tmp_path / "ours", shuffle, ncn), batch_size=BATCH
        )
        resumed.load_state_dict(state)
        assert batches(resumed) == whole[read:]
        assert resumed.state_dict()["stages"] == {"batch": -(-SAMPLES // BATCH)}
