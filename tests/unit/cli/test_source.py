"""What the reading commands open: one Parquet file, a Delta table's version, a remote's bar.

Each command runs in a subprocess (``python -m shardstream.cli``), as a user types it.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.cli_run import run, write

from shardstream.cli.main import EXIT_FAILED


def test_inspect_reads_one_parquet_file(tmp_path: Path):
    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"k": list(range(20))}), path, row_group_size=8)
    pq.write_table(pa.table({"other": [1.5]}), tmp_path / "beside.parquet")  # not read
    out = run("inspect", str(path)).stdout
    assert "format       Parquet" in out
    assert "samples      20" in out
    assert "shards       3" in out  # its row groups: 8, 8 and 4 rows
    assert "other" not in out
    summary = json.loads(run("inspect", str(path), "--json").stdout)
    assert (summary["format"], summary["samples"]) == ("parquet", 20)


def test_inspect_of_a_delta_table_names_the_format_and_the_version(tmp_path: Path):
    deltalake = pytest.importorskip("deltalake")
    table = tmp_path / "table"
    deltalake.write_deltalake(str(table), pa.table({"a": [1, 2, 3]}))
    deltalake.write_deltalake(str(table), pa.table({"a": [7, 8]}), mode="overwrite")
    out = run("inspect", str(table)).stdout
    assert "format       Delta table, version 1 (the latest)" in out
    assert "samples      2" in out  # the latest version's rows, not the replaced file's too
    summary = json.loads(run("inspect", str(table), "--json").stdout)
    assert (summary["format"], summary["version"], summary["samples"]) == ("delta", 1, 2)
    head = run("head", str(table), "-q").stdout
    assert "a: 7" in head
    assert "a: 1" not in head


def test_inspect_names_mds(tmp_path: Path):
    write(tmp_path / "ds", 3)
    assert "format       MDS" in run("inspect", str(tmp_path / "ds")).stdout


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """An MDS dataset served over HTTP on 127.0.0.1, by its URL."""
    write(tmp_path / "site" / "ds", 30)
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "site")
    )
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/ds"
        finally:
            server.shutdown()
            thread.join()


def test_no_bar_is_drawn_before_a_remote_refuses_an_argument(served: str):
    done = run("head", served, "--columns", "id,nope", check=None)
    assert done.returncode == EXIT_FAILED, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "\r" not in done.stderr
    assert "downloaded" not in done.stderr
    assert "--columns names nope" in done.stderr
    # The bar is still drawn where there is something to download.
    done = run("head", served, "-n", "2")
    assert "id: 1" in done.stdout
    assert "downloaded" in done.stderr
