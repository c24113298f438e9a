"""The package as users get it: the wheel and sdist build, install offline, and keep promises.

One wheel and one sdist are built for the module (``python -m build --no-isolation``: the
backend comes from the dev group, and no test reaches PyPI). The wheel is installed with
``--no-index --no-deps`` into a new venv that borrows this environment's packages through a
``.pth`` line, so its ``import shardstream`` and ``shardstream --help`` run the wheel's files
and entry point, not the checkout. Each extra in the wheel's METADATA must install what the
docs' extras table says, and every lazy import's error must name an extra that brings the
module it failed to import.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
# The installed wheel must not see the checkout (tests may run with PYTHONPATH=src).
CLEAN_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
TABLES = (REPO / "README.md", REPO / "docs" / "installation.md")


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheels = list(out.glob("shardstream-*.whl"))
    sdists = list(out.glob("shardstream-*.tar.gz"))
    assert len(wheels) == 1, sorted(p.name for p in out.iterdir())
    assert len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return Built(wheels[0], sdists[0])


def wheel_metadata(wheel: Path) -> metadata.PackageMetadata:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    from email.parser import Parser

    return Parser().parsestr(text)  # type: ignore[return-value]


def extras_of(wheel: Path) -> dict[str, set[str]]:
    """Each extra of the wheel's METADATA and the requirements it adds, as written."""
    found: dict[str, set[str]] = {
        extra: set() for extra in wheel_metadata(wheel).get_all("Provides-Extra") or []
    }
    for line in wheel_metadata(wheel).get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        for extra in found:
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                found[extra].add(requirement_name(requirement))
    return found


def requirement_name(requirement: Requirement) -> str:
    """``s3fs[boto3]`` for ``s3fs[boto3]>=1``: the name and its extras, without the version."""
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{canonicalize_name(requirement.name)}{extras}"


def docs_table(path: Path) -> dict[str, tuple[set[str], str]]:
    """``extra -> (packages named in the "installs" cell, the cell)`` of a page's extras table."""
    rows: dict[str, tuple[set[str], str]] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index("| extra | installs | for |")
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        extra, installs = (cell.strip() for cell in line.strip("|").split("|")[:2])
        names = set(re.findall(r"`([^`]+)`", installs))
        rows[extra.strip("`")] = (
            {canonicalize_name(n.split("[")[0]) + n[len(n.split("[")[0]) :] for n in names},
            installs,
        )
    return rows


def test_the_wheel_installs_offline_and_runs(built: Built, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         "--no-deps", "--no-compile", "-q", str(built.wheel)],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    # The dependencies come from this environment, after the venv's own site-packages.
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (site / "zz-test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    found = subprocess.run(
        [str(python), "-c", "import shardstream as s; print(s.__file__, s.__version__)"],
        capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path, env=CLEAN_ENV,
    )  # fmt: skip
    where, version = found.stdout.split()
    assert Path(where).is_relative_to(site), f"imported {where}, not the wheel's copy"
    assert version in built.wheel.name
    assert (Path(where).parent / "py.typed").exists()
    helped = subprocess.run(
        [str(venv / "bin" / "shardstream"), "--help"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path, env=CLEAN_ENV,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    for command in ("convert", "inspect", "validate", "simulate"):
        assert command in helped.stdout


def test_the_sdist_holds_what_a_build_needs(built: Built) -> None:
    with tarfile.open(built.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("pyproject.toml", "README.md", "src/shardstream/__init__.py",
                   "src/shardstream/py.typed", "src/shardstream/cli/__init__.py"):  # fmt: skip
        assert needed in names
    assert not [name for name in names if name.startswith((".venv", "build/", ".tools"))]


def test_the_wheel_holds_the_package_only(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    assert tops == {"shardstream", next(t for t in tops if t.endswith(".dist-info"))}


@pytest.mark.parametrize("page", TABLES, ids=[p.name for p in TABLES])
def test_each_extra_installs_what_the_docs_say(built: Built, page: Path) -> None:
    promised = docs_table(page)
    extras = extras_of(built.wheel)
    assert set(promised) == set(extras), f"{page.name}'s table and the package's extras differ"
    for extra, (names, cell) in promised.items():
        if extra == "all":
            continue
        if cell == "nothing":
            assert extras[extra] == set(), f"[{extra}] installs {extras[extra]}"
            continue
        assert names == extras[extra], (
            f"[{extra}]: {page.name} says {names}, the package {extras[extra]}"
        )


def test_all_brings_every_extra_but_those_the_docs_leave_out(built: Built) -> None:
    left_out, cell = docs_table(REPO / "docs" / "installation.md")["all"]
    assert left_out == {"tf"}, cell  # "every extra above except `tf`"
    extras = extras_of(built.wheel)
    others = set(extras) - left_out - {"all"}
    # The build backend flattens shardstream[...] into the packages themselves.
    assert extras["all"] == set().union(*(extras[name] for name in others))
    assert not extras["tf"] <= extras["all"]


def lazy_imports() -> Iterator[tuple[str, str, str]]:
    """``(module, extra, where)`` for each ``require(module, extra=...)`` call in src/."""
    for path in sorted((REPO / "src" / "shardstream").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require"):
                continue
            module = node.args[0] if node.args else None
            extra = next((k.value for k in node.keywords if k.arg == "extra"), None)
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if isinstance(module, ast.Constant) and isinstance(extra, ast.Constant):
                yield str(module.value), str(extra.value), where
            elif module is not None:  # a computed name: check the extra at least
                assert isinstance(extra, ast.Constant), f"{where}: extra must be a literal"


def closure(requirements: set[str]) -> set[str]:
    """The installed distributions these requirements bring in, their dependencies included."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or name == "shardstream":
            continue
        seen.add(name)
        try:
            needs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in needs:
            needed = Requirement(line)
            markers = [{"extra": extra} for extra in ("", *requirement.extras)]
            if needed.marker is None or any(needed.marker.evaluate(m) for m in markers):
                todo.append(needed)
    return seen


def test_lazy_import_errors_name_an_extra_that_brings_the_module(built: Built) -> None:
    extras = extras_of(built.wheel)
    providers = metadata.packages_distributions()
    calls = list(lazy_imports())
    assert len(calls) > 30  # the scan found the calls (about 50 today)
    wrong = []
    for module, extra, where in calls:
        assert extra in extras, (
            f"{where}: the error names shardstream[{extra}], which does not exist"
        )
        top = module.split(".")[0]
        dists = {canonicalize_name(d) for d in providers.get(top, [])}
        assert dists, f"{where}: {top} is not installed here, so the check cannot run"
        if not dists & closure(extras[extra]):
            wrong.append(
                f"{where}: {module} comes from {sorted(dists)}, not from shardstream[{extra}]"
            )
    assert wrong == []


def test_the_extras_check_can_fail(built: Built) -> None:
    extras = extras_of(built.wheel)
    assert "pyspark" not in closure(extras["arrow"])
    assert "botocore" in closure(extras["s3"])  # through s3fs and aiobotocore


def declared_requirements() -> list[Requirement]:
    """Every requirement pyproject.toml declares: the extras' and the dev group's."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"]["optional-dependencies"].values()
    lines = [line for extra in extras for line in extra]
    lines += [line for line in project["dependency-groups"]["dev"] if isinstance(line, str)]
    return [Requirement(line) for line in lines]


def extras_not_provided(requirements: list[Requirement]) -> list[str]:
    """``name[extra]`` for each extra a requirement asks of an installed package that lacks it.

    pip installs such a package without the extra, and warns "does not provide the extra".
    """
    missing = []
    for requirement in requirements:
        if not requirement.extras or canonicalize_name(requirement.name) == "shardstream":
            continue
        provided = {
            canonicalize_name(extra)
            for extra in metadata.metadata(requirement.name).get_all("Provides-Extra") or []
        }
        missing += [
            f"{requirement.name}[{extra}]"
            for extra in sorted(requirement.extras)
            if canonicalize_name(extra) not in provided
        ]
    return missing


def test_every_extra_asked_of_a_dependency_exists() -> None:
    requirements = declared_requirements()
    assert "s3fs" in {canonicalize_name(r.name) for r in requirements}
    assert extras_not_provided(requirements) == []


def test_the_extra_check_can_fail() -> None:
    assert extras_not_provided([Requirement("s3fs[boto3]")]) == ["s3fs[boto3]"]
    assert extras_not_provided([Requirement("pyspark[connect,no-such-extra]")]) == [
        "pyspark[no-such-extra]"
    ]
