"""Write docs/api.md: the public names of shardstream and their docstrings, read with inspect.

Run ``scripts/api-docs`` after changing a public name or its docstring; ``--check`` exits 1
(naming the file) when docs/api.md is not what the docstrings give.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

#: The modules whose ``__all__`` is the public API, in the order the page shows them.
MODULES = (
    "shardstream",
    "shardstream.converters",
    "shardstream.loader",
    "shardstream.loader.petastorm",
    "shardstream.errors",
)
OUT = Path(__file__).resolve().parents[1] / "docs" / "api.md"
_SECTIONS = ("Args", "Arguments", "Attributes", "Raises", "Returns", "Yields", "Example",
             "Examples", "Note", "Notes")  # fmt: skip
_LISTED = ("Args", "Arguments", "Attributes", "Raises")
_STARRED = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_POSITIONAL)
_ITEM = re.compile(r"^(\*{0,2}[\w.]+)( \([^)]*\))?: ?(.*)$")


def render_docstring(doc: str | None) -> list[str]:
    """A Google-style docstring as Markdown: sections in bold, arguments as bullets."""
    if not doc:
        return ["*(no docstring)*"]
    out: list[str] = []
    section: str | None = None
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        if not line.startswith(" ") and stripped.endswith(":") and stripped[:-1] in _SECTIONS:
            if section in ("Example", "Examples"):
                out.append("```")
            section = stripped[:-1]
            out.extend(["", f"**{section}:**", ""])
            if section in ("Example", "Examples"):
                out.append("```python")
            continue
        if section is not None and stripped and not line.startswith(" "):
            if section in ("Example", "Examples"):
                out.append("```")
            section = None
            out.append("")
        if section in ("Example", "Examples"):
            out.append(line[4:])
        elif section in _LISTED and line.startswith("    ") and not line.startswith("     "):
            match = _ITEM.match(stripped)
            out.append(f"- `{match[1]}`{match[2] or ''}: {match[3]}" if match else f"- {stripped}")
        elif section is not None:
            out.append(f"  {stripped}" if section in _LISTED and stripped else stripped)
        else:
            out.append(line)
    if section in ("Example", "Examples"):
        out.append("```")
    return out


def signature(name: str, obj: Any) -> str:
    """``name(parameters)``, one parameter a line when long."""
    try:
        described = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    found = list(described.parameters.values())
    returns = described.return_annotation
    arrow = "" if returns is inspect.Signature.empty or inspect.isclass(obj) else f" -> {returns}"
    if inspect.isclass(obj) and found[:1] and found[0].name == "self":
        found = found[1:]
    parameters = []
    for position, parameter in enumerate(found):
        before = found[position - 1].kind if position else None
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and before not in _STARRED:
            parameters.append("*")
        parameters.append(_parameter(parameter))
    one_line = f"{name}({', '.join(parameters)}){arrow}"
    if len(one_line) <= 96:
        return one_line
    return name + "(\n" + "".join(f"    {p},\n" for p in parameters) + ")" + arrow


def _parameter(parameter: inspect.Parameter) -> str:
    """One parameter as written in the source (string annotations shown without quotes)."""
    prefix: dict[inspect._ParameterKind, str] = {
        inspect.Parameter.VAR_POSITIONAL: "*",
        inspect.Parameter.VAR_KEYWORD: "**",
    }
    text: str = prefix.get(parameter.kind, "") + parameter.name
    annotated = parameter.annotation is not inspect.Parameter.empty
    if annotated:
        annotation = parameter.annotation
        if not isinstance(annotation, str):
            annotation = inspect.formatannotation(annotation)
        text += f": {annotation}"
    if parameter.default is not inspect.Parameter.empty:
        text += (" = " if annotated else "=") + repr(parameter.default)
    return text


def members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties ``cls`` defines or mixes in, with a docstring.

    Mixed in: from shardstream's own base classes (not torch's), after the class's own.
    """
    found = []
    seen: set[str] = set()
    own = [base for base in cls.__mro__ if base.__module__.startswith("shardstream")]
    for name, value in [item for base in own for item in vars(base).items()]:
        if name in seen or name.startswith("_"):
            continue
        seen.add(name)
        if not (callable(value) or isinstance(value, property)):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if getattr(value, "__doc__", None):
            found.append((name, value))
    return found


def page() -> str:
    """The whole of docs/api.md."""
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `scripts/api-docs`; do not edit by hand. The public",
        "names are those in each module's `__all__`.",
    ]
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        lines.extend(["", f"## `{module_name}`", ""])
        lines.extend(render_docstring(module.__doc__))
        for name in module.__all__:
            if name.startswith("_"):
                continue
            obj = getattr(module, name)
            qualified = f"{module_name}.{name}"
            lines.extend(["", f"### `{qualified}`", ""])
            if inspect.isclass(obj) or callable(obj):
                kind = "class " if inspect.isclass(obj) else ""
                lines.extend(["```python", kind + signature(name, obj), "```", ""])
                lines.extend(render_docstring(inspect.getdoc(obj)))
            else:
                lines.append(f"`{name} = {obj!r}`")
                continue
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for member, value in members(obj):
                    lines.extend(["", f"#### `{name}.{member}`", ""])
                    if not isinstance(value, property):
                        lines.extend(["```python", signature(member, value), "```", ""])
                    lines.extend(render_docstring(value.__doc__))
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main() -> int:
    """Write (or with ``--check`` compare) docs/api.md; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    text = page()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run scripts/api-docs", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
