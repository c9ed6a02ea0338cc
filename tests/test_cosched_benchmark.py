"""benchmarks/cosched_solver.py: a small run end to end (its timings are not checked here:
they live in the benchmark), and its refusal of bad options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "cosched_solver.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_a_small_run_solves_every_size_with_every_solver() -> None:
    done = _run("--files", "64,256", "--servers", "4,16", "--repeat", "1", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert [(r["files"], r["servers"]) for r in rows] == [(64, 4), (256, 4), (64, 16), (256, 16)]
    for r in rows:
        assert r["edges"] == r["files"] * r["servers"]
        assert r["grouped_s"] > 0
        assert r["full_s"] > 0
        assert r["highs_s"] > 0
        assert r["full_vs_grouped"] == r["full_s"] / r["grouped_s"]


def test_limits_leave_the_slow_solvers_out_and_the_table_says_so() -> None:
    done = _run("--files", "128", "--servers", "8", "--repeat", "1", "--highs-max-edges", "10")
    assert done.returncode == 0, done.stderr
    assert "grouped s" in done.stdout
    assert "HiGHS" in done.stdout
    line = done.stdout.splitlines()[1]
    assert line.split()[0] == "128"
    assert " - " in line


def test_bad_options_are_refused_naming_them() -> None:
    for args, option in ((["--files", "ten"], "--files"), (["--servers", "0"], "--servers")):
        done = _run(*args)
        assert done.returncode == 2
        assert option in done.stderr.splitlines()[-1]
    done = _run("--repeat", "0")
    assert done.returncode == 2
    assert "--repeat" in done.stderr
