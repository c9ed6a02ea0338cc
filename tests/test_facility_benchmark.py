"""benchmarks/facility.py: a small facility end to end (its figures are not checked here:
timings live in the benchmark, not in tests), and its refusal of bad options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "facility.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_a_small_facility_reports_its_pace_per_policy() -> None:
    done = _run(
        "--nodes", "20", "--days", "4", "--limit-s", "1", "--policies", "farm,cache-splitting",
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["policy"] for r in rows] == ["farm", "cache-splitting"]
    for row in rows:
        assert {"policy", "sim_days_per_wall_min", "projected_year_wall_min"} <= set(row)
        assert row["nodes"] == 20
        assert row["load_jobs_per_h"] == 1.0  # 0.5 jobs/h per 10 nodes
        assert row["jobs_in_workload"] == 96  # four days of arrivals
        assert row["sim_days"] > 0
        assert row["sim_days_per_wall_min"] > 0
        # The projection is the pace extrapolated to a year.
        year = row["projected_year_wall_min"] * row["sim_days_per_wall_min"]
        assert year == pytest.approx(365, rel=0.01)
    farm, cache = rows
    assert farm["finished"]  # four farm days take well under a second
    assert farm["jobs_ended"] == 96
    if not cache["finished"]:
        assert cache["wall_s"] >= 1.0  # stopped by the limit, not before it
        assert cache["jobs_ended"] < 96


def test_bad_options_are_refused_naming_them() -> None:
    for args, field in (
        (["--policies", "nope"], "--policies"),
        (["--limit-s", "0"], "--limit-s"),
    ):
        done = _run(*args)
        assert done.returncode == 2
        assert field in done.stderr.splitlines()[-1]
