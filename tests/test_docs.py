"""The documentation keeps its promises: snippets run, links resolve, every public name is shown.

The site's own build (``scripts/docs``, warnings as errors) runs in ``scripts/check``; these
tests cover what a build cannot see: that the README's quickstart and the getting-started
page run as they are, that the README's links (outside the site) lead somewhere, and that the
API pages name every public class and function.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PUBLIC_MODULES = (
    "shardstream",
    "shardstream.converters",
    "shardstream.loader",
    "shardstream.loader.petastorm",
    "shardstream.errors",
)
#: A block that cannot run on a laptop starts with this comment and says what it assumes.
NOT_RUN = "# Not run here:"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text(encoding="utf-8"))


def script_of(blocks: list[str]) -> str:
    """The blocks as one script, in order (as one Python session runs them), less those not run."""
    return "\n".join(block for block in blocks if not block.startswith(NOT_RUN))


def pasted_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a script run by a venv's python with the venv NOT activated.

    No ``VIRTUAL_ENV``, no ``PYSPARK_PYTHON``, the venv's ``bin`` off the ``PATH``, and first
    on it a ``python3`` that is not this one (Spark's default worker interpreter is
    ``python3`` on the ``PATH``): a worker that ran it would fail the job.
    """
    venv_bin = str(Path(sys.executable).parent)
    fake = tmp_path / "other-python"
    fake.mkdir(exist_ok=True)
    for name in ("python3", "python"):
        (fake / name).write_text("#!/bin/sh\necho 'not the venv python' >&2\nexit 3\n")
        (fake / name).chmod(0o755)
    path = [str(fake)] + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d != venv_bin]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    return {**env, "PATH": os.pathsep.join(path), "SPARK_LOCAL_IP": "127.0.0.1"}


def run_pasted(script: str, tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """``script`` written to a file and run as a user who pasted it would run it.

    By the venv's python (an absolute path), from a working folder under ``tmp_path``.
    """
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(script, encoding="utf-8")
    assert os.path.isabs(sys.executable)
    return subprocess.run(
        [sys.executable, str(path)], cwd=work, env=pasted_env(tmp_path), capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


def assert_ran(done: subprocess.CompletedProcess[str], run: int) -> None:
    assert done.returncode == 0, f"run {run} failed:\n{done.stderr[-4000:]}"


@pytest.mark.slow
def test_getting_started_runs_pasted_twice(tmp_path: Path) -> None:
    page = DOCS / "getting-started.md"
    blocks = python_blocks(page)
    assert len(blocks) >= 5
    skipped = [block for block in blocks if block.startswith(NOT_RUN)]
    assert len(skipped) <= 1, "say what each block assumes, and run the rest"
    script = script_of(blocks) + (
        "\nprint('resumed', sum(len(batch['label']) for batch in loader), 'of', len(dataset))\n"
    )  # how many samples the resumed loader reads: the page's promise, checked
    for run in (1, 2):  # the second run meets the first one's folders
        done = run_pasted(script, tmp_path, "getting_started.py")
        assert_ran(done, run)
        # The resumed loader starts after the three batches taken before the checkpoint.
        assert done.stdout.splitlines()[-1] == f"resumed {40 - 3 * 8} of 40"
        assert (tmp_path / "work" / "flowers" / "train" / "index.json").exists()
        assert (tmp_path / "work" / "checkpoint.pt").exists()


@pytest.mark.slow
def test_the_readme_quickstart_runs_pasted_twice(tmp_path: Path) -> None:
    (block,) = python_blocks(REPO / "README.md")
    assert block.count('"/tmp/') == 3, "the quickstart's folders, moved under tmp_path here"
    script = block.replace('"/tmp/', f'"{tmp_path}/')
    for run in (1, 2):  # the second run replaces the first one's dataset
        done = run_pasted(script, tmp_path, "quickstart.py")
        assert_ran(done, run)
        assert done.stdout.splitlines()[-1] == "read 1000 of 1000 samples"
        index = json.loads((tmp_path / "my-ds" / "index.json").read_text(encoding="utf-8"))
        assert sum(shard["samples"] for shard in index["shards"]) == 1000


@pytest.mark.slow
def test_a_worker_without_shardstream_says_what_to_set_in_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare"  # a Python without shardstream (nor numpy, pyarrow, ...)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    chosen = bare / "bin" / "python"
    script = (
        "from pyspark.sql import SparkSession\n"
        "from shardstream.converters import dataframe_to_mds\n"
        "spark = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')\n"
        f"         .config('spark.pyspark.python', {str(chosen)!r}).getOrCreate())\n"
        f"dataframe_to_mds(spark.range(10), mds_kwargs={{'out': {str(tmp_path / 'out')!r}}})\n"
    )
    done = run_pasted(script, tmp_path, "wrong_python.py")
    assert done.returncode == 1
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith("shardstream.errors.ConfigurationError: Spark's Python workers ")
    assert f"({chosen}) cannot import '" in last
    assert "set PYSPARK_PYTHON (or spark.pyspark.python) to a Python that has shardstream" in last
    assert last.endswith(f"such as this driver's {sys.executable}")
    # Refused before any job: no task's failure, no Java trace, in the whole output.
    assert "org.apache.spark" not in done.stderr
    assert "Py4JJavaError" not in done.stderr
    assert "Lost task" not in done.stderr
    # The Python traceback is the script's call only: no worker's, no chained Java trace.
    python_trace = done.stderr[done.stderr.rindex("Traceback (most recent call last)") :]
    assert "During handling" not in python_trace
    assert "org.apache.spark" not in python_trace
    assert "Py4JJavaError" not in python_trace


def test_the_snippets_join_in_order_less_those_not_run() -> None:
    script = script_of(["x = 1\n", f"{NOT_RUN} a cluster\nx = 1 / 0\n", "y = x + 1\n"])
    namespace: dict[str, Any] = {}
    exec(compile(script, "<made up>", "exec"), namespace)  # noqa: S102 (made-up code)
    assert namespace["y"] == 2
    with pytest.raises(ZeroDivisionError):
        exec(compile(script_of(["x = 1 / 0\n"]), "<made up>", "exec"), {})  # noqa: S102


def linked_targets(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_links_resolve() -> None:
    targets = [t for t in linked_targets(REPO / "README.md") if "://" not in t]
    assert "docs/getting-started.md" in targets
    missing = [t for t in targets if not (REPO / t.split("#")[0]).exists()]
    assert missing == []


def test_the_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 150, "long material belongs in docs/ pages"
    assert not [line for line in lines if re.search(r"\b20\d\d-\d\d-\d\d\b", line)], (
        "dated measurements belong in docs/benchmarks.md"
    )


def documented_names() -> set[str]:
    """Every name an ``auto*`` or ``py:*`` directive of docs/api documents, fully qualified."""
    names: set[str] = set()
    directive = re.compile(r"^\.\. (?:auto(\w+)|py:(\w+))::\s+(\S+)", re.MULTILINE)
    for page in sorted((DOCS / "api").glob("*.rst")):
        text = page.read_text(encoding="utf-8")
        current = re.search(r"^\.\. currentmodule::\s+(\S+)", text, re.MULTILINE)
        for match in directive.finditer(text):
            kind, name = match[1] or match[2], match[3]
            if kind == "module":
                module = importlib.import_module(name)
                names.update(f"{name}.{member}" for member in module.__all__)
            else:
                assert current is not None, f"{page.name} documents {name} with no currentmodule"
                names.add(f"{current[1]}.{name}")
    return names


def public_names() -> dict[str, Any]:
    found = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            found[f"{module_name}.{name}"] = getattr(module, name)
    return found


def test_every_public_name_is_on_an_api_page() -> None:
    documented = documented_names()
    public = public_names()
    assert set(documented) <= set(public), "an API page names something not public"
    shown = {id(public[name]) for name in documented if not isinstance(public[name], str)}
    # A name is shown when it, or the same object under another public name, is documented.
    missing = [
        name
        for name, value in public.items()
        if name not in documented and (isinstance(value, str) or id(value) not in shown)
    ]
    assert missing == [], "add these to the page of their topic in docs/api/"


def test_the_api_check_can_fail() -> None:
    documented = documented_names()
    assert "shardstream.StreamingDataset" in documented
    assert "shardstream.errors.ShardstreamError" in documented
    assert "shardstream.not_a_name" not in documented


def test_the_site_config_shows_examples_as_code() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        conf = importlib.import_module("conf")
    finally:
        sys.path.remove(str(DOCS))
    lines = ["Summary.", "", "Example:", "    x = 1", "    print(x)", "", "Returns:", "    y."]
    conf._examples_as_code(None, "function", "f", None, None, lines)
    assert lines[:7] == [
        "Summary.", "", "Example:", "    .. code-block:: python", "", "        x = 1",
        "        print(x)",
    ]  # fmt: skip
    assert lines[-2:] == ["Returns:", "    y."]
    ast.parse("x = 1")  # the examples themselves are parsed in test_docstring_examples.py


def test_setup_needs_no_npm_and_the_tests_say_when_it_is_missing(tmp_path: Path) -> None:
    setup = (REPO / "scripts" / "setup").read_text(encoding="utf-8")
    body = setup.split("set -euo pipefail", 1)[1]  # the commands, after the header comment
    assert "npm" not in body
    assert "azurite" not in body.lower()
    assert "scripts/setup-test-tools" in (REPO / "scripts" / "test").read_text(encoding="utf-8")
    # The installer in a copy of the tree with no Azurite, on a PATH with no npm.
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "setup-test-tools"
    script.write_text((REPO / "scripts" / "setup-test-tools").read_text(encoding="utf-8"))
    bare = tmp_path / "bin"
    bare.mkdir()
    dirname = next(
        Path(d) / "dirname" for d in ("/usr/bin", "/bin") if (Path(d) / "dirname").exists()
    )
    os.symlink(dirname, bare / "dirname")
    done = subprocess.run(
        ["/bin/bash", str(script)], capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": str(bare)},
    )  # fmt: skip
    assert done.returncode == 1
    assert "npm is not installed" in done.stderr
    assert "scripts/demo needs neither" in done.stderr


#: An issue's number, as a title or a sentence would give it ("issue 8", "issues 27", "#32").
ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+|(?<![\w/&`])#\d+\b", re.IGNORECASE)


def issue_numbers(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if ISSUE_NUMBER.search(line)]


def test_what_users_read_names_no_issue_numbers() -> None:
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md")), *sorted(DOCS.rglob("*.rst"))]
    found = {str(p.relative_to(REPO)): issue_numbers(p.read_text(encoding="utf-8")) for p in pages}
    assert {page: lines for page, lines in found.items() if lines} == {}
    # The command line's help, each command's included.
    from shardstream.cli.main import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = [parser.format_help(), *(sub.format_help() for sub in commands.choices.values())]
    assert len(helps) > 5
    assert [issue_numbers(text) for text in helps if issue_numbers(text)] == []


def test_the_issue_number_check_can_fail() -> None:
    assert issue_numbers("## Targets (issue 32)\n| issue 8's targets |\nfine\nsee #12") == [
        "## Targets (issue 32)", "| issue 8's targets |", "see #12",
    ]  # fmt: skip
    assert issue_numbers("# A title\n`--issue-sizes`, 20 issues of a journal\n&#39;") == []


def test_the_docs_script_sets_itself_up_first() -> None:
    script = (REPO / "scripts" / "docs").read_text(encoding="utf-8")
    body = script.split("set -euo pipefail", 1)[1]  # the commands, after the header comment
    assert "scripts/setup" in body, "a fresh clone has no .venv: set it up as scripts/demo does"
    assert body.index("scripts/setup") < body.index("sphinx-build")


#: A date, or a commit named in backticks: what a diary holds and a design note does not.
DIARY = re.compile(r"\b20\d\d-\d\d-\d\d\b|`[0-9a-f]{7,40}`")


def diary_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if DIARY.search(line)]


def test_design_notes_say_what_is_not_when() -> None:
    notes = sorted((DOCS / "design").glob("*.md"))
    assert len(notes) >= 3
    found = {note.name: diary_lines(note.read_text(encoding="utf-8")) for note in notes}
    assert {name: lines for name, lines in found.items() if lines} == {}, (
        "dated figures and commits belong in docs/benchmarks.md and in commit messages"
    )
    # A reference, not a diary: the read path's note stays readable in one sitting.
    assert len((DOCS / "design" / "read-path.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_the_diary_check_can_fail() -> None:
    assert diary_lines("## Run of 2026-11-28\nsee `82654c8`\nfine\n8 MiB, `read_whole_bytes`") == [
        "## Run of 2026-11-28", "see `82654c8`",
    ]  # fmt: skip
