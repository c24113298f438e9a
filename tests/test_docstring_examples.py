"""Every public class and function shows an example in its docstring, and the example is code.

The public API is the ``__all__`` of the modules docs/api/ documents (exception classes
excepted: their docstrings say when they are raised). The examples that need only the local
disk are also run, in a temporary folder standing in for ``/tmp``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

MODULES = (
    "shardstream",
    "shardstream.converters",
    "shardstream.loader",
    "shardstream.loader.petastorm",
)
SECTIONS = ("Example:", "Examples:")

# Examples run as written but for "/tmp/", and in this order: LocalDataset reads what
# MDSWriter's example writes.
RUNNABLE = (
    "shardstream.MDSWriter",
    "shardstream.LocalDataset",
    "shardstream.JSONWriter",
    "shardstream.XSVWriter",
    "shardstream.CSVWriter",
    "shardstream.TSVWriter",
    "shardstream.Encoding",
    "shardstream.get_encoding",
    "shardstream.merge_index",
    "shardstream.converters.BatchConverter",
    "shardstream.converters.infer_columns",
    "shardstream.converters.infer_encoding",
    "shardstream.converters.is_json_compatible",
    "shardstream.converters.jsonl_to_mds",
    "shardstream.converters.pandas_to_mds",
    "shardstream.loader.petastorm.Unischema",
    "shardstream.loader.petastorm.UnischemaField",
    "shardstream.loader.petastorm.in_intersection",
    "shardstream.loader.petastorm.in_lambda",
    "shardstream.loader.petastorm.in_negate",
    "shardstream.loader.petastorm.in_pseudorandom_split",
    "shardstream.loader.petastorm.in_reduce",
    "shardstream.loader.petastorm.in_set",
    "shardstream.loader.petastorm.PredicateBase",
    "shardstream.loader.petastorm.decimal_friendly_collate",
)


def public_objects() -> list[tuple[str, Any]]:
    """``(qualified name, object)`` for each public class and function but exceptions."""
    found = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)  # resolves the top-level package's lazy names
            if inspect.isclass(value) and issubclass(value, BaseException):
                continue
            if inspect.isclass(value) or inspect.isfunction(value):
                found.append((f"{module_name}.{name}", value))
    return found


PUBLIC = public_objects()


def example(obj: Any) -> str | None:
    """The code of the docstring's ``Example:`` section, dedented, or None without one."""
    lines = inspect.cleandoc(obj.__doc__ or "").splitlines()
    starts = [i for i, line in enumerate(lines) if line in SECTIONS]
    if not starts:
        return None
    body = []
    for line in lines[starts[0] + 1 :]:
        if line.strip() and not line.startswith(" "):
            break  # the next section
        body.append(line)
    return textwrap.dedent("\n".join(body)).strip("\n")


def namespace() -> dict[str, Any]:
    """The names an example may use unimported: every public name of the documented modules."""
    names: dict[str, Any] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names.update((name, getattr(module, name)) for name in module.__all__)
    return names


def test_the_public_api_is_found() -> None:
    names = [name for name, _ in PUBLIC]
    assert "shardstream.StreamingDataset" in names
    assert "shardstream.converters.dataframe_to_mds" in names
    assert "shardstream.loader.SparkDatasetConverter" in names
    assert "shardstream.loader.petastorm.make_batch_reader" in names
    assert set(RUNNABLE) <= set(names)


@pytest.mark.parametrize(("name", "obj"), PUBLIC, ids=[name for name, _ in PUBLIC])
def test_docstring_has_an_example_that_parses(name: str, obj: Any) -> None:
    code = example(obj)
    assert code, f"{name}'s docstring has no Example: section"
    assert ">>>" not in code, f"{name}'s example has >>> prompts; write plain code"
    ast.parse(code, filename=f"<example of {name}>")


def test_the_local_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("pandas")
    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "raw"
    raw.mkdir()
    for part in range(2):
        rows = [{"text": f"row {part}.{i}", "label": i} for i in range(3)]
        (raw / f"part-{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    objects = dict(PUBLIC)
    for name in RUNNABLE:
        code = example(objects[name])
        assert code is not None
        code = code.replace("/tmp/", f"{tmp_path}/")  # noqa: S108 (the examples' paths)
        scratch = tmp_path / "my-ds"
        if name != "shardstream.LocalDataset" and scratch.exists():
            scratch.rename(tmp_path / f"done-{name}")  # each writer starts from nothing
        exec(compile(code, f"<example of {name}>", "exec"), namespace())  # noqa: S102
