"""Sphinx configuration of the documentation site; ``scripts/docs`` builds it into build/docs.

Sphinx because the docstrings are written for it: Google sections (napoleon) with reST roles
(``:class:``, ``:func:``, ``:meth:``) that become links here. The guides are Markdown (MyST).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the checkout's code, installed or not

import shardstream  # noqa: E402 (after the path above)

project = "shardstream"
author = "shardstream developers"
copyright = "shardstream developers"
version = release = shardstream.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
root_doc = "index"

# MyST: GitHub-style anchors for the guides' "page.md#a-heading" links.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# The docstrings: Google style, types from the annotations.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "separated"
autodoc_default_options = {"members": True}
# Public names are documented where users import them (shardstream.X), not where they live.
add_module_names = False
python_use_unqualified_type_names = True

# Every reference to a documented name must resolve. Other libraries' names (no intersphinx:
# the build reads no network) and shardstream's internal modules are left as plain code.
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(builtins|collections|datetime|os|typing|types|mmap|_pickle|pathlib|concurrent)(\..*)?",
    ),
    (r"py:.*", r"(numpy|pyarrow|pandas|pyspark|torch|tensorflow|datasets|PIL)(\..*)?"),
    (r"py:.*", r"shardstream\.(cache|dataset|format|pipeline|sampling|storage|writer)\..*"),
    (r"py:.*", r"shardstream\.(converters|loader)\.[a-z_]+\..*"),
    (r"py:.*", r"shardstream\.dataset\.stream_registry\.F"),
    (r"py:mod", r"shardstream\..*"),  # modules are not pages: their names show as code
    (r"py:func", r"parent_cache_dir"),  # an internal helper, named as code
]

html_theme = "furo"
html_title = f"shardstream {release}"
html_static_path: list[str] = []

_EXAMPLE = re.compile(r"^(\s*)Examples?:\s*$")


def _examples_as_code(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Mark the body of each ``Example:`` section as a Python code block.

    The examples are plain code (no ``>>>``), which napoleon would render as prose.
    """
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _EXAMPLE.match(lines[i])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        indent = match.group(1)
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(indent + " ")):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        inner = min(
            (len(line) - len(line.lstrip()) for line in body if line.strip()),
            default=len(indent) + 4,
        )
        out.append(" " * inner + ".. code-block:: python")
        out.append("")
        out.extend("    " + line if line.strip() else "" for line in body)
        out.append("")
    lines[:] = out


def setup(app: Any) -> None:
    """Run the example hook before napoleon reads the sections."""
    app.connect("autodoc-process-docstring", _examples_as_code, priority=100)
