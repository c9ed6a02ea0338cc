"""The hot path compiled from its sources (datasched/_compiled.py, setup.py): the compiled build
gives every registered policy's runs exactly as the sources do, a set pickled by one build
loads in the other, and an edited source is imported as it is, never its stale build.

The suite as a whole runs on both builds (``make test`` compiled, ``make coverage`` from the
sources); these tests compare the two within one run. Where the build is not compiled they
compare the sources with themselves, so CI requires the compiled build
(``DATASCHED_REQUIRE_COMPILED=1``)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from datasched import _compiled
from datasched.policies import available

REQUIRE_ENV = "DATASCHED_REQUIRE_COMPILED"

RUNS = r"""
import dataclasses, json, sys
from datasched import _compiled
from datasched.sim.experiment import SimConfig, simulate

small = {
    "delayed": {"period_h": 0.5, "stripe_events": 500},
    "basic-packetizer": {"fraction": 1},
    "adaptive-packetizer": {"min_packet_s": 600.0, "max_packet_s": 1200.0},
}
out = {"compiled": _compiled.compiled_names(), "runs": {}}
for policy in sys.argv[1].split(","):
    for files in (0.0, 5.0):
        config = SimConfig(
            policy=policy,
            policy_params=small.get(policy, {}),
            n_jobs=40,
            n_nodes=4,
            slots=2,
            file_gb=files,
            node_mtbf_h=300.0,
            max_backlog=10**6,
        )
        summary, run = simulate(config, check_conservation=True)
        figures = dataclasses.replace(summary, wall_s=0.0).to_dict()
        assert run.processed is not None
        figures["processed"] = sorted(
            (job, [list(r) for piece in pieces for r in piece])
            for job, pieces in run.processed.items()
        )
        out["runs"][f"{policy} files={files}"] = figures
json.dump(out, sys.stdout)
"""


def _run(script: str, *args: str, pure: bool, stdin: str | None = None) -> str:
    """``script``'s output, run in a fresh process on the sources (``pure``) or the build."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop(_compiled.PURE_ENV, None)
    if pure:
        env[_compiled.PURE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_ci_runs_the_compiled_build() -> None:
    """CI sets DATASCHED_REQUIRE_COMPILED=1: there the hot path must be built, and used where
    DATASCHED_PURE is not set, or the comparisons below would compare the sources with
    themselves (CI's coverage run sets DATASCHED_PURE: its processes use the sources, the
    build is still there for the comparisons' compiled side)."""
    built = _compiled.build_available()
    if os.environ.get(REQUIRE_ENV, "") in ("", "0"):
        pytest.skip(f"{REQUIRE_ENV} not set (the hot path {'is' if built else 'is not'} built)")
    assert built, "the hot path is not compiled, or not from the sources as they are"
    assert _compiled.build_is_current() == (not _compiled.pure_requested())


def test_every_policy_runs_the_same_compiled_and_from_its_sources() -> None:
    """Every registered policy, with whole files and without, two slots a node and nodes
    failing: the summary's every figure (its wall time aside) and every event each job
    processed, the same in both builds."""
    policies = ",".join(sorted(available()))
    compiled = json.loads(_run(RUNS, policies, pure=False))
    pure = json.loads(_run(RUNS, policies, pure=True))
    assert pure["compiled"] == []
    assert compiled["compiled"] == (list(_compiled.HOT) if _compiled.build_available() else [])
    assert compiled["runs"].keys() == pure["runs"].keys()
    assert len(pure["runs"]) == 2 * len(available())
    for key, figures in pure["runs"].items():
        assert figures["jobs_completed"] == 40, key
        assert compiled["runs"][key] == figures, key


NO_CYTHON = r"""
import dataclasses, json, sys
if sys.argv[1] == "hidden":
    sys.modules["cython"] = None  # ``import cython`` raises ImportError: not installed
from datasched.core import cache, directory, intervals, uncompiled
from datasched.sim.experiment import SimConfig, simulate
for module in (cache, directory, intervals):
    assert (module.cython is uncompiled) == (sys.argv[1] == "hidden"), module
config = SimConfig(policy="cache-splitting", n_jobs=30, n_nodes=4, slots=2, max_backlog=10**6)
summary, _ = simulate(config, check_conservation=True)
json.dump(dataclasses.replace(summary, wall_s=0.0).to_dict(), sys.stdout)
"""


def test_the_sources_run_without_cython_installed() -> None:
    """Cython is a build tool: where it is not installed the hot path's modules that ask
    ``cython.compiled`` take the stand-in (core/uncompiled.py) and search with the standard
    library, with the same results as with Cython importable."""
    hidden = json.loads(_run(NO_CYTHON, "hidden", pure=True))
    importable = json.loads(_run(NO_CYTHON, "importable", pure=True))
    assert hidden["jobs_completed"] == 30
    assert hidden == importable


PICKLES = r"""
import pickle, sys
from datasched import _compiled
from datasched.core.intervals import IntervalSet
if sys.argv[1] == "dump":
    sets = [IntervalSet(), IntervalSet.range(3, 9), IntervalSet([(0, 2), (5, 7), (10, 40)])]
    sys.stdout.write(pickle.dumps(sets).hex())
else:
    sets = pickle.loads(bytes.fromhex(sys.stdin.read()))
    print(repr(sets))
    print(sum(s.length for s in sets), [s.n_ranges for s in sets])
    print(_compiled.build_is_current())
"""


@pytest.mark.parametrize("dumped_pure", [False, True])
def test_a_set_pickled_by_one_build_loads_in_the_other(dumped_pure: bool) -> None:
    dumped = _run(PICKLES, "dump", pure=dumped_pure)
    loaded = _run(PICKLES, "load", pure=not dumped_pure, stdin=dumped)
    shown, lengths, loader_compiled = loaded.splitlines()
    assert shown == (
        "[IntervalSet([]), IntervalSet([(3, 9)]), IntervalSet([(0, 2), (5, 7), (10, 40)])]"
    )
    assert lengths == "40 [0, 1, 3]"
    # The loading process is the other build: from the sources, or as this process is.
    expected = _compiled.build_available() if dumped_pure else False
    assert loader_compiled == str(expected)


def _fake_build(root: Path) -> dict[str, str]:
    """A package directory holding every module of HOT with an extension file beside it and
    the manifest of a build of it; returns that manifest."""
    manifest = {}
    for name in _compiled.HOT:
        *packages, leaf = name.split(".")
        directory = root.joinpath(*packages)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{leaf}.py").write_text(f"NAME = {name!r}\n")
        (directory / (leaf + EXTENSION_SUFFIXES[0])).write_bytes(b"not loaded here")
        manifest[name] = _compiled.source_digest(directory / f"{leaf}.py")
    (root / _compiled.MANIFEST).write_text(json.dumps(manifest))
    return manifest


def _origin(root: Path, fullname: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Where the finder sends ``fullname`` (None: left to the path, which takes the
    extension), with a fresh decision for ``root``."""
    monkeypatch.setattr(_compiled, "_current", {})
    name = fullname.removeprefix("datasched.")
    directory = root.joinpath(*name.split(".")[:-1])
    spec = _compiled._SourceUnlessBuilt.find_spec(fullname, [str(directory)])
    return None if spec is None else spec.origin


def test_a_current_build_is_left_to_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _fake_build(tmp_path)
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    assert _compiled.check_build(tmp_path, manifest)
    assert _origin(tmp_path, "datasched.core.intervals", monkeypatch) is None
    assert _origin(tmp_path, "datasched.policies.ponce.fcfs", monkeypatch) is None


def test_one_edited_source_sends_the_whole_hot_path_to_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiled module reads the compiled classes of the others directly: one module from
    its source among compiled ones would be read wrongly, so one stale extension makes every
    module of HOT come from its source, the ones not edited too."""
    manifest = _fake_build(tmp_path)
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    (tmp_path / "core" / "cache.py").write_text("NAME = 'edited since the build'\n")
    assert not _compiled.check_build(tmp_path, manifest)
    for fullname, file in [
        ("datasched.core.cache", "core/cache.py"),
        ("datasched.core.intervals", "core/intervals.py"),
        ("datasched.sim.engine", "sim/engine.py"),
    ]:
        assert _origin(tmp_path, fullname, monkeypatch) == str(tmp_path / file)


def test_the_sources_are_imported_when_asked_or_not_all_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _fake_build(tmp_path)
    source = str(tmp_path / "core" / "intervals.py")
    monkeypatch.setenv(_compiled.PURE_ENV, "1")
    assert _origin(tmp_path, "datasched.core.intervals", monkeypatch) == source
    monkeypatch.delenv(_compiled.PURE_ENV)
    # A module the build could not compile (no entry), or whose extension is gone.
    (tmp_path / _compiled.MANIFEST).write_text(
        json.dumps({k: v for k, v in manifest.items() if k != "sim.engine"})
    )
    assert _origin(tmp_path, "datasched.core.intervals", monkeypatch) == source
    (tmp_path / _compiled.MANIFEST).write_text(json.dumps(manifest))
    assert _origin(tmp_path, "datasched.core.intervals", monkeypatch) is None
    (tmp_path / "sim" / ("engine" + EXTENSION_SUFFIXES[0])).unlink()
    assert _origin(tmp_path, "datasched.core.intervals", monkeypatch) == source
    # Modules the build does not compile are left to the path, whatever is beside them.
    assert _origin(tmp_path, "datasched.cli.app", monkeypatch) is None
    assert _compiled._SourceUnlessBuilt.find_spec("json", None) is None


def test_the_finder_module_imports_nothing_of_the_package() -> None:
    """``datasched/__init__`` imports it before anything else, in every process, a
    sandbox's too: it may import the standard library alone."""
    tree = ast.parse(Path(_compiled.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported, "no imports found: the check reads nothing"
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, sorted(imported)
