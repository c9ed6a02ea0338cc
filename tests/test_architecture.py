"""DESIGN.md's rule: core and policies import no engine, no Dask, no clock, no I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import datasched

PACKAGE = Path(datasched.__file__).parent
FORBIDDEN = (
    "datasched.sim",
    "datasched.runtime",
    "datasched.service",
    "datasched.cli",
    "dask",
    "distributed",
    "time",
    "datetime",
    "asyncio",
    "threading",
    "random",
    "os",
    "socket",
)
PURE_FILES = sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "policies").glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pure_layers_import_nothing_forbidden(path: Path) -> None:
    bad = {
        name
        for name in imported_modules(path)
        for prefix in FORBIDDEN
        if name == prefix or name.startswith(prefix + ".")
    }
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_rule_is_checked_on_real_files() -> None:
    assert len(PURE_FILES) >= 8


def test_test_modules_have_unique_basenames() -> None:
    """The test folders are not packages, so pytest imports each test module by its basename:
    two files of one name in different folders stop the whole run at collection."""
    tests = Path(__file__).parent
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test modules with the same name: " + "; ".join(clashes)
