"""The documentation keeps its promises: snippets run, links resolve, every public name is shown.

The site's own build (``scripts/docs``, warnings as errors) runs in ``scripts/check``; these
tests cover what a build cannot see: that the README's quickstart and the getting-started
page run as they are, that the README's links (outside the site) lead somewhere, and that the
API pages name every public class and function.
"""

from __future__ import annotations

import ast
import importlib
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


def run_blocks(blocks: list[str], name: str) -> dict[str, Any]:
    """Exec the blocks in order in one namespace (as one Python session would); the namespace."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for number, code in enumerate(blocks, 1):
        compiled = compile(code, f"<{name}, python block {number}>", "exec")
        if not code.startswith(NOT_RUN):
            exec(compiled, namespace)  # noqa: S102 (the documentation's own code)
    return namespace


@pytest.fixture
def spark_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An empty working folder, and Spark's workers on this interpreter, on loopback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")


def stop_spark_started_by(namespace: dict[str, Any], before: Any) -> None:
    """Stop the session a snippet started (not one another test's fixture owns)."""
    session = namespace.get("spark")
    if session is not None and session is not before:
        session.stop()


def active_spark() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


@pytest.mark.slow
def test_getting_started_runs_as_written(spark_env: None, tmp_path: Path) -> None:
    page = DOCS / "getting-started.md"
    blocks = python_blocks(page)
    assert len(blocks) >= 5
    skipped = [block for block in blocks if block.startswith(NOT_RUN)]
    assert len(skipped) <= 1, "say what each block assumes, and run the rest"
    before = active_spark()
    namespace = run_blocks(blocks, page.name)
    try:
        assert (tmp_path / "flowers" / "train" / "index.json").exists()
        assert len(namespace["dataset"]) == 40  # every image became a sample
        assert (tmp_path / "checkpoint.pt").exists()
        # The resumed loader starts after the three batches taken before the checkpoint.
        resumed = sum(len(batch["label"]) for batch in namespace["loader"])
        assert resumed == 40 - 3 * 8
    finally:
        stop_spark_started_by(namespace, before)


@pytest.mark.slow
def test_the_readme_quickstart_runs_as_written(spark_env: None, tmp_path: Path) -> None:
    (block,) = python_blocks(REPO / "README.md")
    block = block.replace('"/tmp/', f'"{tmp_path}/')
    before = active_spark()
    namespace = run_blocks([block], "README.md")
    try:
        assert len(namespace["dataset"]) == 1000
        assert namespace["state"]["sample_in_epoch"] == 1000
        assert set(namespace["batch"]) == {"id", "label", "x"}
    finally:
        stop_spark_started_by(namespace, before)


def test_a_failing_snippet_fails_the_test() -> None:
    with pytest.raises(ZeroDivisionError):
        run_blocks(["x = 1\n", "y = x / 0\n"], "made up")
    assert run_blocks([f"{NOT_RUN} a cluster\nx = 1 / 0\n"], "made up")["__name__"] == "__main__"


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
