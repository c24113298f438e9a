"""Fixtures that build every interop dataset once per session, on both sides."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shardstream import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter, merge_index
from shardstream.format.hashing import HASH_ALGORITHMS
from shardstream.format.mds import MDSSchema
from tests.interop.cases import COLUMNS, make_samples

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("ref_worker.py")


def reference_python() -> str:
    """The reference venv's interpreter; its absence fails the suite (it must not skip)."""
    python = os.environ.get("SHARDSTREAM_REF_PYTHON", str(REPO / ".venv-ref" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"the reference venv is missing ({python}); run scripts/setup-ref-venv or "
            f"set SHARDSTREAM_REF_PYTHON to a python with mosaicml-streaming==0.13.0"
        )
    return python


def _exact_limit_case() -> dict[str, Any]:
    """A size limit that three 'fixed' samples fill to the byte (the config holds the limit)."""
    schema = MDSSchema(COLUMNS["fixed"])
    per_sample = 8 + 100 + 4  # int + ndarray:uint8:100, plus its offset
    limit = 0
    for _ in range(10):
        config = schema.config_bytes(compression=None, hashes=[], size_limit=limit)
        limit = 8 + len(config) + 3 * per_sample
    return {"name": "exact_limit", "generator": "fixed", "count": 10,
            "writer": {"size_limit": limit}}  # fmt: skip


COMPRESSIONS = ["br", "br:5", "bz2", "bz2:3", "gz", "gz:1", "snappy", "zstd", "zstd:7"]

MDS_CASES: list[dict[str, Any]] = [
    {"name": "all_encodings", "generator": "all_encodings", "count": 24,
     "writer": {"hashes": ["sha1", "xxh64"], "size_limit": 6000}},
    *[
        {"name": f"compression_{code}", "generator": "simple", "count": 40,
         "writer": {"compression": code, "hashes": ["md5"], "size_limit": 4000}}
        for code in COMPRESSIONS
    ],
    {"name": "every_hash", "generator": "simple", "count": 10,
     "writer": {"hashes": sorted(HASH_ALGORITHMS), "compression": "zstd"}},
    _exact_limit_case(),
    {"name": "oversized_sample", "generator": "sized", "count": 12,
     "sizes": [100, 5000, 300, 2500], "writer": {"size_limit": 2048}},
    {"name": "merged", "generator": "simple", "count": 30, "parts": [10, 5, 15],
     "writer": {"compression": "zstd", "size_limit": 2000}},
    {"name": "empty_first_shard", "generator": "simple", "count": 5,
     "writer": {"size_limit": 100}},
]  # fmt: skip

SPLIT_CASES: list[dict[str, Any]] = [
    {"name": "split_json", "format": "json", "generator": "table", "count": 20,
     "writer": {"size_limit": 500}},
    {"name": "split_csv", "format": "csv", "generator": "table", "count": 20,
     "writer": {"size_limit": 500, "hashes": ["sha256"]}},
    {"name": "split_tsv", "format": "tsv", "generator": "table", "count": 20,
     "writer": {"compression": "gz"}},
    {"name": "split_xsv", "format": "xsv", "generator": "table", "count": 20,
     "writer": {"compression": "zstd", "size_limit": 300}},
    {"name": "split_json_text", "format": "json", "generator": "text", "count": 40,
     "writer": {"newline": "\r\n", "hashes": ["md5", "xxh3_64"], "size_limit": "1kb"}},
    {"name": "split_csv_text", "format": "csv", "generator": "text", "count": 40,
     "writer": {"newline": "\r\n", "compression": "br:5", "size_limit": 700}},
    {"name": "split_tsv_text", "format": "tsv", "generator": "text", "count": 40,
     "writer": {"compression": "snappy", "hashes": ["sha1", "xxh64"], "size_limit": 900}},
    {"name": "split_xsv_text", "format": "xsv", "generator": "text", "count": 40,
     "writer": {"separator": ";;", "newline": "<EOL>\n", "compression": "bz2",
                "size_limit": 800}},
    # Each sample is over the limit: the reference first flushes an empty shard, shardstream
    # does not (test_split_writers_never_write_an_empty_shard).
    {"name": "split_json_tiny_limit", "format": "json", "generator": "table", "count": 4,
     "writer": {"size_limit": 10}},
]  # fmt: skip
WRITERS: dict[str, Any] = {
    "json": JSONWriter, "csv": CSVWriter, "tsv": TSVWriter, "xsv": XSVWriter, "mds": MDSWriter,
}  # fmt: skip


@dataclass
class Interop:
    """Where each side's datasets are, and what the reference read back from ours."""

    ours: Path
    ref: Path
    dumps: Path

    def ref_read(self, name: str) -> list[Any]:
        """The normalized samples the reference read from our dataset ``name``."""
        with open(self.dumps / f"{name}.pkl", "rb") as handle:
            return pickle.load(handle)  # type: ignore[no-any-return]


def write_ours(case: dict[str, Any], out: Path) -> None:
    """Write a case with shardstream the way ref_worker.py writes it with the reference."""
    samples = make_samples(case)
    columns = COLUMNS[case["generator"]]
    kwargs = dict(case["writer"])
    if case.get("format") == "xsv":
        kwargs.setdefault("separator", "|")
    parts = case.get("parts")
    if not parts:
        writer_cls = WRITERS[case.get("format", "mds")]
        with writer_cls(out=str(out), columns=columns, **kwargs) as writer:
            for sample in samples:
                writer.write(sample)
        return
    start = 0
    for number, count in enumerate(parts):
        with MDSWriter(out=str(out / str(number)), columns=columns, **case["writer"]) as writer:
            for sample in samples[start : start + count]:
                writer.write(sample)
        start += count
    merge_index(str(out))


#: A dataset published to a store (a plain folder as the remote) and then rewritten there: its
#: shards have shardstream's per-write names, and the first write's are gone.
STORE_REWRITE = "store_rewrite"
STORE_REWRITE_CASE = "compression_zstd"


def write_rewritten_store(remote: Path, scratch: Path) -> None:
    """Write the first 10 samples of the case to ``remote`` as a store, then all of them over."""
    case = next(case for case in MDS_CASES if case["name"] == STORE_REWRITE_CASE)
    samples = make_samples(case)
    for number, part in enumerate((samples[:10], samples)):
        out = (str(scratch / str(number)), str(remote))
        columns = COLUMNS[case["generator"]]
        with MDSWriter(out=out, columns=columns, exist_ok=True, **case["writer"]) as writer:
            for sample in part:
                writer.write(sample)


@pytest.fixture(scope="session")
def interop(tmp_path_factory: pytest.TempPathFactory) -> Interop:
    """Every case written by both libraries, and the reference's reading of ours."""
    python = reference_python()
    base = tmp_path_factory.mktemp("interop")
    result = Interop(base / "ours", base / "ref", base / "dumps")
    result.dumps.mkdir()
    for case in MDS_CASES + SPLIT_CASES:
        write_ours(case, result.ours / case["name"])
    from tests.interop.test_interop import build_empty_shard_dataset

    build_empty_shard_dataset(result.ours / "with_empty_shard")
    write_rewritten_store(result.ours / STORE_REWRITE, base / "store-local")
    job = {
        "write": [
            {"case": case, "out": str(result.ref / case["name"])}
            for case in MDS_CASES + SPLIT_CASES
        ],
        # The reference decompresses next to the shards: it reads copies, keeping ours pristine.
        "read": [
            {
                "dir": str(base / "copies" / folder.name),
                "dump": str(result.dumps / f"{folder.name}.pkl"),
            }
            for folder in sorted(result.ours.iterdir())
        ],
    }
    shutil.copytree(result.ours, base / "copies")
    job_path = base / "job.json"
    job_path.write_text(json.dumps(job))
    completed = subprocess.run(
        [python, str(WORKER), str(job_path)], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        pytest.fail(f"the reference worker failed:\n{completed.stdout}\n{completed.stderr}")
    return result
