"""``shardstream convert`` refuses a destination before it starts converting (no bar drawn)."""

from __future__ import annotations

from pathlib import Path

from tests.cli_run import run, write

from shardstream.cli.main import EXIT_FAILED


def test_convert_onto_a_dataset_is_refused_before_any_bar(tmp_path: Path):
    source = tmp_path / "table.csv"
    source.write_text("id,name\n1,a\n2,b\n")
    write(tmp_path / "ds", 3)
    before = sorted(p.name for p in (tmp_path / "ds").iterdir())
    done = run("convert", str(source), str(tmp_path / "ds"), check=EXIT_FAILED)
    assert done.stderr.count("\n") == 1, done.stderr
    assert "\r" not in done.stderr  # no "to MDS" bar before the refusal
    assert "is not empty" in done.stderr
    assert "--exist-ok" in done.stderr
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == before
    assert "wrote 2 samples" in run("convert", str(source), str(tmp_path / "ds"), "--exist-ok",
                                    "-q").stdout  # fmt: skip
