"""Parquet is read by the tables' stages only: pyarrow's Parquet readers appear nowhere else.

The import-linter contract "Shards and row groups are opened and decoded by the read
pipeline's stages only" (pyproject.toml) holds shardstream's own decoding modules to the
pipeline; pyarrow's ``parquet`` and ``dataset`` modules are imported lazily (``require``), by
name, which import-linter cannot see, so this test reads the source for them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "shardstream"

#: pyarrow's readers of Parquet files and datasets.
READERS = ("pyarrow.parquet", "pyarrow.dataset")

#: Where they may be used, and why.
ALLOWED = {
    "tables/layout.py": "parses a footer (the layout of a file's row groups)",
    "tables/footers.py": "the footer stage: footers and metadata files, read and written",
    "tables/row_group_files.py": "the row-group read stage",
}


def uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Each line that imports or names one of :data:`READERS`, and how."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if reads(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            if reads(node.module) or any(reads(name) for name in names):
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Call):  # require("pyarrow.parquet"), import_module(...)
            found += [
                (node.lineno, f"a call with {argument.value!r}")
                for argument in node.args
                if isinstance(argument, ast.Constant)
                and isinstance(argument.value, str)
                and reads(argument.value)
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("parquet", "dataset")
            and isinstance(node.value, ast.Name)
            and node.value.id in ("pa", "pyarrow")
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def reads(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in READERS)


def test_pyarrow_reads_parquet_only_in_the_tables_stages():
    outside = []
    for path in sorted(SOURCE.rglob("*.py")):
        where = path.relative_to(SOURCE).as_posix()
        if where in ALLOWED:
            continue
        for line, how in uses(ast.parse(path.read_text(encoding="utf-8"))):
            outside.append(f"{where}:{line}: {how}")
    assert not outside, (
        "Parquet is read outside the tables' stages; read through ParquetDataset or "
        "shardstream.tables.footers instead:\n" + "\n".join(outside)
    )


def test_every_allowed_module_exists_and_still_reads():
    for where in ALLOWED:
        path = SOURCE / where
        assert path.is_file(), where
        assert uses(ast.parse(path.read_text(encoding="utf-8"))), f"{where} no longer reads"


@pytest.mark.parametrize(
    "code",
    [
        "import pyarrow.parquet as pq",
        "from pyarrow import parquet",
        "from pyarrow.dataset import dataset",
        "pq = require('pyarrow.parquet', extra='arrow', purpose='x')",
        "importlib.import_module('pyarrow.dataset')",
        "pa.parquet.ParquetFile(path)",
    ],
)
def test_the_check_sees_each_way_in(code: str):
    assert uses(ast.parse(code))


def test_the_check_leaves_other_pyarrow_modules_alone():
    code = "import pyarrow.compute\nrequire('pyarrow.csv')\npa.table({})\n'pyarrow.parquet docs'"
    assert not uses(ast.parse(code))
