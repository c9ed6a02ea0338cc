"""The rules on the shape of the code (docs/design.md, "Layers"): core and policies import no
engine, no Dask, no clock, no I/O; the two engines never import each other, nor what sits above
them (the grid simulator, the studies, compare, the service, the command line); no module
imports another that imports it back; a source file past ~600 lines says why in its docstring;
nothing outside ``policies/`` tests a policy's name; the service and the simulator import without
the runtime extra."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import datasched
from datasched.policies import available

PACKAGE = Path(datasched.__file__).parent
FORBIDDEN = (
    "datasched.sim",
    "datasched.gridsim",
    "datasched.studies",
    "datasched.runtime",
    "datasched.compare",
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
PURE_FILES = sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "policies").rglob("*.py"))
ABOVE_ENGINES = ("datasched.gridsim", "datasched.studies", "datasched.compare")
ABOVE_ALL = ("datasched.cli", "datasched.service")
ENGINE_RULES = {
    "sim": ("datasched.runtime", *ABOVE_ENGINES, *ABOVE_ALL),
    "runtime": ("datasched.sim", *ABOVE_ENGINES, *ABOVE_ALL),
    # The grid simulator is built on the simulator's engine, and on nothing above it.
    "gridsim": ("datasched.runtime", "datasched.studies", "datasched.compare", *ABOVE_ALL),
    # The studies and compare sit above both engines; the service and the command line above
    # them (the service runs jobs on the runtime and answers what-ifs with the simulator).
    "studies": ABOVE_ALL,
    "compare": ("datasched.studies", *ABOVE_ALL),
    # Where users' code runs, and how results are read: no Dask, no daemon, no engine.
    "sandbox": (
        *("dask", "distributed", "datasched.service", "datasched.sim", "datasched.cli"),
        "datasched.compare",
    ),
    "safepickle": (
        *("dask", "distributed", "datasched.service", "datasched.sim", "datasched.cli"),
        *("datasched.compare", "datasched.runtime", "datasched.sandbox"),
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            # ``from datasched.cli import sim`` imports the module datasched.cli.sim.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def matching(names: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {n for n in names for p in prefixes if n == p or n.startswith(p + ".")}


ALL_FILES = sorted(PACKAGE.rglob("*.py"))
MODULES = {module_name(p): p for p in ALL_FILES}


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pure_layers_import_nothing_forbidden(path: Path) -> None:
    bad = matching(imported_modules(path), FORBIDDEN)
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("package", sorted(ENGINE_RULES))
def test_the_engines_never_import_each_other(package: str) -> None:
    for path in sorted((PACKAGE / package).rglob("*.py")):
        bad = matching(imported_modules(path), ENGINE_RULES[package])
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


SHARED_MONITOR = ("monitoring.py", "monitoring_plots.py")
"""Top-level modules both engines import (PROOF's monitor): no engine, no Dask, no clock."""


@pytest.mark.parametrize("name", SHARED_MONITOR)
def test_the_shared_monitor_imports_no_engine(name: str) -> None:
    path = PACKAGE / name
    bad = matching(imported_modules(path), FORBIDDEN)
    assert not bad, f"{name} imports {sorted(bad)}"
    if name == "monitoring.py":  # plotting lives beside it, not in it
        assert not matching(imported_modules(path), ("matplotlib",))


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        graph[name] = {m for m in imported_modules(path) if m in MODULES and m != name}
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_long_source_files_say_why(path: Path) -> None:
    """Files are split by concept, not by size: length is a review signal. A file past ~600
    lines keeps a paragraph starting "Length:" in its docstring saying why it is one concept."""
    text = path.read_text()
    n = len(text.splitlines())
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert n <= 600 or "Length:" in doc, f"{path.name} has {n} lines: one concept? say why"


def test_no_policy_name_is_tested_outside_the_policies() -> None:
    names = set(available())
    found = []
    for path in ALL_FILES:
        if path.relative_to(PACKAGE).parts[0] == "policies":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            for operand in [node.left, *node.comparators]:
                if isinstance(operand, ast.Constant) and operand.value in names:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, "policy names compared outside policies/: " + ", ".join(found)


def test_the_rules_are_checked_on_real_files() -> None:
    assert len(PURE_FILES) >= 8
    assert {"datasched.sim.engine", "datasched.runtime.engine"} <= set(MODULES)


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


RUNTIME_EXTRA = (
    *("psutil", "dask", "distributed", "dask_jobqueue", "uproot", "awkward", "hist", "fsspec"),
    *("pyarrow", "XRootD", "fsspec_xrootd", "cloudpickle", "mplhep", "coffea"),
)
"""What only the ``runtime`` extra installs (pyproject.toml)."""
NEEDS_THE_RUNTIME = frozenset(
    {
        # Running requests' jobs on a Dask cluster, and checking a processor in a sandbox.
        "datasched.service.runner",
        "datasched.service.threaded",
        "datasched.service.command_jobs",
        "datasched.service.usercode",
    }
)
"""The service's modules that are allowed to need the runtime extra."""
WITHOUT_THE_RUNTIME = """
import importlib, json, pkgutil, sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (blocked)")

BLOCKED = set(sys.argv[1:])
sys.meta_path.insert(0, Blocked())
failed = {}
for top in ("datasched.core", "datasched.policies", "datasched.sim", "datasched.service",
            "datasched.cli"):
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            failed[info.name] = str(e)
print(json.dumps(failed))
"""


def test_the_service_and_the_simulator_import_without_the_runtime_extra() -> None:
    """``pip install datasched[service]`` gives the daemon, its store, its ETAs and dashboard,
    the simulator and the command line, without the runtime extra (the wheel's smoke test
    installs exactly that): none of their modules may import its packages at import time,
    but for the few that run jobs on the cluster."""
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_RUNTIME, *RUNTIME_EXTRA],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    failed = json.loads(out.stdout.splitlines()[-1])
    assert set(failed) <= NEEDS_THE_RUNTIME, {
        k: v for k, v in failed.items() if k not in NEEDS_THE_RUNTIME
    }
    assert failed, "the check blocks nothing: the runner needs Dask"


USER_CODE_LOADERS = ("datasched.runtime.processor", "datasched.sandbox.child", "cloudpickle")
"""Modules that load or run what a user wrote (or unpickle what it made)."""
LOADING_NAMES = frozenset(
    {"job_processor", "load_processor", "load_processor_source", "load_jobs", "unship"}
)
UNPICKLING = frozenset({"load", "loads", "Unpickler"})


def _unpickles(tree: ast.AST) -> list[str]:
    """Calls of ``pickle.load``/``loads``/``Unpickler`` (and the names imported from it)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in UNPICKLING
            and isinstance(node.value, ast.Name)
            and node.value.id in ("pickle", "cloudpickle")
        ):
            found.append(f"{node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "cloudpickle"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name in UNPICKLING]
    return found


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "service").rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_the_service_never_loads_user_code_nor_unpickles_results(path: Path) -> None:
    """The daemon treats users' processors and results as data (docs/security.md): it
    imports no module that loads user code, calls none of the functions that do, and never
    unpickles."""
    tree = ast.parse(path.read_text())
    bad = matching(imported_modules(path), USER_CODE_LOADERS)
    assert not bad, f"{path.name} imports {sorted(bad)}"
    names = {
        a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
        if a.name in LOADING_NAMES
    }
    assert not names, f"{path.name} imports {sorted(names)}"
    assert not _unpickles(tree), f"{path.name} unpickles: {_unpickles(tree)}"
