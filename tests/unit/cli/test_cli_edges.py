"""The edges a new user hits on the command line: each ends in one line and a documented code.

Every command runs in a subprocess (``python -m shardstream``), as a user types it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.cli_run import run, write

from shardstream import LocalDataset, MDSWriter
from shardstream.cli.main import EXIT_BROKEN_PIPE, EXIT_FAILED, cli_terms
from shardstream.writer.merge import merge_partitions


def one_line_failure(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The error line of a failed command: exit 3, one line on stderr, no traceback."""
    assert done.returncode == EXIT_FAILED, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith(f"shardstream {command}: ")
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``splits/`` (train, validation), ``parquet/`` (two files) and ``parts/`` (two schemas)."""
    root = tmp_path_factory.mktemp("edges")
    write(root / "splits" / "train", 30)
    write(root / "splits" / "validation", 10, start=30)
    (root / "parquet" / "year=2024").mkdir(parents=True)
    for part in range(2):
        table = pa.table({"k": list(range(part * 20, part * 20 + 20)), "v": [0.5] * 20})
        pq.write_table(table, root / "parquet" / "year=2024" / f"{part}.parquet", row_group_size=8)
    write(root / "parts" / "a", 5)
    with MDSWriter(out=str(root / "parts" / "b"), columns={"id": "int", "label": "str"}) as w:
        w.write({"id": 9, "label": "nine"})
    return root


def test_a_root_of_splits_lists_them_and_says_split(data: Path):
    line = one_line_failure(run("inspect", str(data / "splits"), check=None), "inspect")
    assert "holds the splits train, validation" in line
    assert "--split train" in line
    line = one_line_failure(
        run("head", str(data / "splits"), "--split", "trian", check=None), "head"
    )
    assert "no split 'trian'" in line
    assert "did you mean --split train?" in line
    out = run("head", str(data / "splits"), "--split", "validation", "-n", "1", "-q").stdout
    assert "id: 30" in out


def test_head_refuses_an_unknown_column_naming_those_there_are(data: Path):
    done = run("head", str(data / "splits"), "--split", "train", "--columns", "id,lable",
               check=None)  # fmt: skip
    line = one_line_failure(done, "head")
    assert "--columns names lable" in line
    assert "its columns are blob, id, text, vec" in line


def test_merge_refuses_partitions_of_different_columns_naming_both(data: Path, tmp_path: Path):
    line = one_line_failure(run("merge", str(data / "parts"), check=None), "merge")
    assert "partitions 'a' and 'b' have different columns" in line
    assert "label: str" in line
    assert not (data / "parts" / "index.json").exists()


def test_bench_on_shards_of_different_columns_says_so(data: Path, tmp_path: Path):
    mixed = tmp_path / "mixed"
    for name in ("a", "b"):
        shutil.copytree(data / "parts" / name, mixed / name)
    merge_partitions(str(mixed), ["a", "b"])  # the library merges them as MDS allows
    line = one_line_failure(run("bench", str(mixed), check=None), "bench")
    assert "mixes shards of different columns" in line
    assert "label:str" in line


def test_simulate_plot_into_a_missing_folder(data: Path, tmp_path: Path):
    target = tmp_path / "no" / "such" / "sim.png"
    done = run("simulate", str(data / "splits"), "--split", "train", "--plot", str(target),
               check=None)  # fmt: skip
    line = one_line_failure(done, "simulate")
    assert f"the folder {target.parent} does not exist" in line


def test_a_closed_output_pipe_ends_quietly(data: Path):
    with subprocess.Popen(
        [sys.executable, "-m", "shardstream", "inspect", str(data / "splits" / "train"), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()  # as `| head` does once it has read enough
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert stderr == ""


def test_every_reading_command_takes_a_parquet_folder(data: Path, tmp_path: Path):
    folder = str(data / "parquet")
    summary = json.loads(run("inspect", folder, "--json").stdout)
    assert summary["samples"] == 40
    assert summary["shards"] == 6  # row groups of 8, 8 and 4 rows in each file
    assert summary["formats"] == {"parquet": 6}
    assert summary["stored_bytes"] == sum(
        f.stat().st_size for f in (data / "parquet").rglob("*.parquet")
    )
    out = run("head", folder, "-n", "2", "--columns", "k,year", "-q").stdout
    assert "k: 1" in out
    assert "year: 2024" in out
    out = run("validate", folder, "-q").stdout
    assert out.startswith("OK: 6 shards")
    assert "40 samples decoded" in out
    assert "Parquet files carry no digests" in out
    result = json.loads(run("bench", folder, "--batch-size", "8", "--json", "-q").stdout)
    assert result["passes"][0]["samples"] == 40
    result = json.loads(run("simulate", folder, "--ranks-per-node", "2", "--workers", "1",
                            "--batch-size", "4", "--json").stdout)  # fmt: skip
    assert (result["dataset"]["shards"], result["dataset"]["samples"]) == (6, 40)
    assert 0 < result["dataset"]["stored_bytes"] < summary["stored_bytes"]  # row groups' spans


def test_validate_without_digests_says_the_bytes_went_unchecked(tmp_path: Path):
    root = tmp_path / "plain"
    write(root, 20)  # no hashes, no compression
    shard = root / LocalDataset(root).shards[0].data_file.basename
    data = shard.read_bytes()
    at = data.index(b"sample 3")
    shard.write_bytes(data[:at] + b"SAMPLE 3" + data[at + 8 :])  # still decodes
    out = run("validate", str(root), "-q").stdout
    assert out.startswith("OK: ")
    assert "0 digests checked" in out
    assert "bytes were NOT checked against digests" in out
    assert "--hashes xxh64" in out
    damaged = bytearray(shard.read_bytes())
    damaged[4:8] = (10**9).to_bytes(4, "little")  # the offset table is now corrupt
    shard.write_bytes(bytes(damaged))
    done = run("validate", str(root), "--json", check=1)
    problem = json.loads(done.stdout)["problems"][0]["problem"]
    assert "delete" not in problem  # this folder is the only copy there is
    assert "write the shard again from its source" in problem


def test_messages_name_the_command_lines_flags(tmp_path: Path):
    csv = tmp_path / "in.csv"
    csv.write_text("id,score\n1,2\n2,\n")  # a null score
    line = one_line_failure(run("convert", str(csv), str(tmp_path / "o"), "-q", check=None),
                            "convert")  # fmt: skip
    assert "--skip-nulls" in line
    assert "on_null" not in line
    assert "udf_iterable" not in line
    assert "Fill it in the source first" in line
    again = ["convert", str(csv), str(tmp_path / "o"), "-q", "--skip-nulls"]
    run(*again)
    line = one_line_failure(run(*again, check=None), "convert")
    assert "--exist-ok" in line
    assert "exist_ok" not in line
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = run("inspect", f"http://127.0.0.1:{port}/ds", "--retry", "0", "--timeout", "2",
               check=None)  # fmt: skip
    line = one_line_failure(done, "inspect")
    assert "(--retry 0, --timeout 2)" in line
    assert "DownloadOptions" not in line


def test_cli_terms():
    assert cli_terms("pass on_null='skip' to drop them") == "pass --skip-nulls to drop them"
    assert cli_terms("pass exist_ok=True in mds_kwargs to write") == "pass --exist-ok to write"
    assert cli_terms("(retry=2, timeout=60 s): x. Raise DownloadOptions.timeout or retry") == (
        "(--retry 2, --timeout 60): x. Raise --timeout or --retry"
    )
