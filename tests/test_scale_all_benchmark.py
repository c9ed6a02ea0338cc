"""benchmarks/scale_all.py: a tiny run end to end (two sizes of one policy, its figures not
checked: timings live in the benchmark) and its refusal of bad options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "scale_all.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # three fresh processes: seconds of CPU, minutes on a loaded machine
def test_each_size_is_measured_and_extrapolated() -> None:
    done = _run("--policies", "farm", "--nodes", "10,20", "--jobs", "10", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["policy"] == "farm"
    assert [p["n_nodes"] for p in row["points"]] == [10, 20]
    for p in row["points"]:
        assert p["n_jobs"] == 10
        assert p["decisions"] >= 20  # an arrival and an end a job at least
        assert p["scheduler_s"] > 0
        assert p["load_avg"] >= 0
    assert row["nodes_per_core"] is not None


def test_bad_options_are_refused_naming_them() -> None:
    for args, field in (
        (["--policies", "nope"], "--policies"),
        (["--nodes", "1"], "--nodes"),
    ):
        done = _run(*args)
        assert done.returncode == 2
        assert field in done.stderr.splitlines()[-1]
