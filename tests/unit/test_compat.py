"""compat.install_streaming_alias: code that imports ``streaming`` runs on shardstream.

``sys.modules`` belongs to the process, so every check runs in a fresh interpreter: the job of
streaming_alias_job.py (an LLM Foundry style dataset class, Composer's resume protocol), and
short scripts for the refusals. A stand-in ``streaming`` package on the path plays the real
mosaicml-streaming (installed, and imported or not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import shardstream

JOB = Path(__file__).with_name("streaming_alias_job.py")
SOURCE = Path(shardstream.__file__).parents[1]


def python(args: list[str], *path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [SOURCE, *path]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip


@pytest.fixture
def real_package(tmp_path: Path) -> Path:
    """A folder holding a ``streaming`` package that is not shardstream's alias."""
    package = tmp_path / "site" / "streaming"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("REAL = True\n")
    return package.parent


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_an_llm_foundry_style_job_runs_and_resumes_on_shardstream(tmp_path: Path, context: str):
    result = python([str(JOB), str(tmp_path), context])
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["is_shardstream"]
    assert seen["version"] == "0.13.0"
    # Every sample once, through the subclass's __getitem__, in DataLoader workers too.
    assert seen["workers_ids"] == list(range(60))
    assert seen["tokens_ids"] == list(range(60))
    # Composer's protocol: the resumed dataset yields exactly what the whole epoch had left.
    resume = seen["resume"]
    assert len(resume["head"]) == 12
    assert resume["head"] + resume["tail"] == resume["whole"]
    assert resume["whole"] != sorted(resume["whole"])  # shuffled, so order is what is checked


def test_the_real_package_imported_first_is_refused(real_package: Path):
    script = (
        "import streaming, shardstream\n"
        "try: shardstream.install_streaming_alias()\n"
        "except ImportError as error: print(type(error).__name__, error, streaming.REAL)\n"
    )
    result = python(["-c", script], real_package)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("StreamingAliasError cannot install")
    assert str(real_package / "streaming" / "__init__.py") in result.stdout
    assert "before anything imports streaming" in result.stdout
    assert result.stdout.strip().endswith("True")  # the real package is left as it was


def test_the_alias_shadows_the_package_and_names_what_it_lacks(real_package: Path):
    script = (
        "import importlib.util, json, shardstream\n"
        "names = shardstream.install_streaming_alias()\n"
        "assert shardstream.install_streaming_alias() == names  # a second call: nothing new\n"
        "import streaming, streaming.base.util as util, streaming.base.stream as stream\n"
        "from streaming.base.converters import infer_dataframe_schema\n"
        "seen = {'real': hasattr(streaming, 'REAL'), 'names': names,\n"
        "        'same': [streaming.StreamingDataset is shardstream.StreamingDataset,\n"
        "                 util.merge_index is shardstream.merge_index,\n"
        "                 stream.streams_registry is shardstream.streams_registry],\n"
        "        'spec': importlib.util.find_spec('streaming.base').name}\n"
        "from streaming import CSVWriter, JSONWriter, TSVWriter, XSVWriter\n"
        "from streaming.base.format import CSVWriter as F\n"
        "from streaming.base.format.json import JSONWriter as J\n"
        "from streaming.base.format.xsv import CSVWriter as C, TSVWriter as T, XSVWriter as X\n"
        "seen['writers'] = [CSVWriter is shardstream.CSVWriter is F is C,\n"
        "                   JSONWriter is shardstream.JSONWriter is J,\n"
        "                   TSVWriter is shardstream.TSVWriter is T,\n"
        "                   XSVWriter is shardstream.XSVWriter is X]\n"
        "for statement in ['import streaming.text', 'import streaming.base.shared']:\n"
        "    try:\n"
        "        exec(statement)\n"
        "    except ImportError as error:\n"
        "        seen[statement] = str(error)\n"
        "print(json.dumps(seen))\n"
    )
    result = python(["-c", script], real_package)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["real"] is False
    assert seen["same"] == [True, True, True]
    assert seen["spec"] == "streaming.base"
    assert {"streaming", "streaming.base.util", "streaming.base.converters"} <= set(seen["names"])
    assert seen["writers"] == [True, True, True, True]
    assert "subclass StreamingDataset" in seen["import streaming.text"]
    assert "keeps no shared memory" in seen["import streaming.base.shared"]
