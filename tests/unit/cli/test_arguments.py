"""Every argument is checked as the command line is parsed: one line, exit 2, nothing drawn.

Each command runs in a subprocess (``python -m shardstream.cli``), as a user types it, without
``-q``: a progress bar drawn before the refusal would show on stderr.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.cli_run import run, write

from shardstream.cli.main import EXIT_USAGE

READERS = ("inspect", "validate", "head", "bench", "simulate")


def usage_error(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The refusal of a command line: exit 2, one line on stderr, no traceback, no bar."""
    assert done.returncode == EXIT_USAGE, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.endswith("\n")
    assert "\r" not in done.stderr  # no progress bar was drawn
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"shardstream {command}: ")
    return done.stderr.rstrip("\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ds/`` (MDS, two shards), ``one.parquet`` and ``table.csv``."""
    root = tmp_path_factory.mktemp("arguments")
    write(root / "ds", 30)
    pq.write_table(pa.table({"k": list(range(20))}), root / "one.parquet", row_group_size=8)
    (root / "table.csv").write_text("id,name\n1,a\n2,b\n")
    return root


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (command, name)
        for command in READERS
        for name in ("index.json", "shard.00000.mds", "../one.parquet")
        if (command, name) != ("inspect", "../one.parquet")  # inspect reads it (test_source)
    ],
)
def test_a_file_where_a_dataset_folder_is_expected(data: Path, command: str, name: str):
    path = data / "ds" / name
    assert path.is_file()
    line = usage_error(run(command, str(path), check=None), command)
    assert f"argument url: {path} is " in line
    assert f"name the dataset's folder, e.g. {path.parent}" in line


def test_a_url_naming_the_index_is_refused_before_any_request():
    url = "http://127.0.0.1:9/ds/index.json"  # nothing listens on port 9: a request would fail
    line = usage_error(run("head", url, check=None), "head")
    assert "is the dataset's index" in line
    assert "http://127.0.0.1:9/ds" in line


def test_head_refuses_a_negative_count(data: Path):
    line = usage_error(run("head", str(data / "ds"), "-n", "-1", check=None), "head")
    assert "argument -n/--samples: must be 0 or more, got -1" in line
    assert run("head", str(data / "ds"), "-n", "0").stdout == ""


def test_convert_onto_an_existing_file(data: Path, tmp_path: Path):
    target = tmp_path / "taken.txt"
    target.write_text("keep me\n")
    line = usage_error(run("convert", str(data / "table.csv"), str(target), check=None), "convert")
    assert f"argument out: {target} is a file" in line
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--size-limit", "-5"], "argument --size-limit: size='-5' is not a size"),
        (["--size-limit", "0"], "must be at least 1 byte"),
        (["--compression", "zzz"], "unknown compression 'zzz'"),
        (["--hashes", "sha1,nope"], "unknown hash algorithm 'nope'"),
        (["--columns", "id:nope"], "unknown column encoding 'nope'"),
        (["--columns", "id"], "'id' is not name:encoding"),
        (["--delimiter", ";;"], "must be one character"),
        (["--image-encoding", "gif"], "invalid choice: 'gif'"),
        (["--version", "yesterday"], "neither a version number nor an ISO 8601 time"),
    ],
)
def test_convert_refuses_a_bad_option_before_its_bar(
    data: Path, tmp_path: Path, args: list[str], says: str
):
    out = tmp_path / "out"
    line = usage_error(run("convert", str(data / "table.csv"), str(out), *args, check=None),
                       "convert")  # fmt: skip
    assert says in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("bench", ["--max-batches", "0"], "--max-batches: must be 1 or more"),
        ("bench", ["--epochs", "0"], "--epochs: must be 1 or more"),
        ("bench", ["--workers", "-1"], "--workers: must be 0 or more"),
        ("bench", ["--batch-size", "0"], "--batch-size: must be 1 or more"),
        ("bench", ["--link-mbps", "0"], "--link-mbps: must be a number of megabits per second"),
        ("bench", ["--link-mbps", "-100"], "--link-mbps: must be a number of megabits per"),
        ("bench", ["--link-mbps", "nan"], "--link-mbps: must be a number of megabits per second"),
        ("bench", ["--link-mbps", "inf"], "--link-mbps: must be a number of megabits per second"),
        ("bench", ["--link-mbps", "1Gbit"], "--link-mbps: '1Gbit' is not a number of megabits"),
        ("simulate", ["--shuffle-block-size", "0"], "--shuffle-block-size: must be 1 or more"),
        ("simulate", ["--num-canonical-nodes", "0"], "--num-canonical-nodes: must be 1 or more"),
        ("simulate", ["--epoch", "-1"], "--epoch: must be 0 or more"),
        ("simulate", ["--nodes", "0"], "--nodes: must be 1 or more"),
        ("simulate", ["--cache-limit", "lots"], "--cache-limit: size='lots' is not a size"),
        ("validate", ["--timeout", "0"], "--timeout: must be more than 0 seconds"),
        ("inspect", ["--retry", "-1"], "--retry: must be 0 or more"),
        ("head", ["--columns", "id,,text"], "--columns: 'id,,text' has an empty column name"),
        ("head", ["--cache", "{data}/table.csv"], "table.csv is a file: name a folder"),
        ("validate", ["--cache", "{data}/table.csv"], "table.csv is a file: name a folder"),
        ("bench", ["--cache", "{data}/table.csv"], "table.csv is a file: name a folder"),
    ],
)
def test_reading_commands_refuse_a_bad_option(data: Path, command: str, args: list[str], says: str):
    args = [arg.format(data=data) for arg in args]
    assert says in usage_error(run(command, str(data / "ds"), *args, check=None), command)


def test_a_wrong_command_line_is_one_line_too():
    line = usage_error(run("inspect", check=None), "inspect")
    assert "the following arguments are required: url" in line
    assert "shardstream inspect --help" in line
