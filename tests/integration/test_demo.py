"""``scripts/demo``'s main job as the README shows it: one real run of the flowers demo.

The demo runs on its embedded defaults (100 images, 6 epochs, a local folder for the shards)
from an empty working folder, with the venv's python and no ``PYSPARK_PYTHON``, as
``scripts/demo`` runs it. Its output must be the README's block line for line, figures aside
(every number is compared as a number's place, the working folder as ``...``, and a ``...``
line of the README stands for the epochs it leaves out); and no line of the JVM's start-up or
of Spark's log may reach the terminal without ``-v``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "flowers" / "flowers_demo.py"
#: What the JVM and Spark print as they start and log (on stderr or stdout).
JVM_LINES = (
    "log4j",
    "NativeCodeLoader",
    "Setting default log level",
    "To adjust logging level",
    "Using incubator modules",
    "WARN ",
    "ERROR ",
    "[Stage ",
)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the demo's main job on its defaults, from an empty folder."""
    work = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # as scripts/demo sets it
    done = subprocess.run(
        [sys.executable, str(DEMO)], cwd=work, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return {"work": work, "stdout": done.stdout, "stderr": done.stderr}


def readme_demo_block() -> list[str]:
    """The lines of the README's block that shows what ``scripts/demo`` prints."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```text\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    (block,) = [block for block in blocks if "accuracy:" in block]
    return str(block).splitlines()


def shape(line: str, work: Path | None = None) -> str:
    """A line with its figures and the working folder taken out, spaces collapsed."""
    if work is not None:
        line = line.replace(str(work), "...")
    return " ".join(NUMBER.sub("N", line).split())


def matches(shown: list[str], printed: list[str]) -> bool:
    """``printed`` is ``shown`` line for line.

    A ``...`` line of ``shown`` stands for any number of printed lines (at least one).
    """
    if not shown:
        return not printed
    if shown[0] == "...":
        return any(matches(shown[1:], printed[n:]) for n in range(1, len(printed) + 1))
    return bool(printed) and shown[0] == printed[0] and matches(shown[1:], printed[1:])


def test_the_readme_shows_what_the_demo_prints(demo: dict[str, Any]) -> None:
    shown = [shape(line) for line in readme_demo_block()]
    printed = [shape(line, demo["work"]) for line in demo["stdout"].splitlines()]
    assert "..." in shown  # the README leaves the middle epochs out
    assert matches(shown, printed), "\n".join(["README:", *shown, "printed:", *printed])


def test_the_comparison_can_fail() -> None:
    shown = [shape(line) for line in readme_demo_block()]
    assert matches(["a N", "...", "b"], ["a N", "x", "y", "b"])
    assert not matches(["a N", "...", "b"], ["a N", "b"])
    assert not matches(shown, [*shown[:-1], "accuracy: N% on training"])


def test_the_demo_shows_no_jvm_lines_without_verbose(demo: dict[str, Any]) -> None:
    output = demo["stdout"] + demo["stderr"]
    assert [line for line in output.splitlines() if line.startswith(JVM_LINES)] == []
    assert not [marker for marker in JVM_LINES[:5] if marker in output]
    # They went to the work folder's log, where -v leaves them on the terminal instead.
    log = (demo["work"] / "demo-data" / "flowers" / "spark.log").read_text(encoding="utf-8")
    assert "Setting default log level" in log or "log4j" in log
