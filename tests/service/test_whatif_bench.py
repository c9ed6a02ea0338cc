"""benchmarks/whatif.py end to end on a small snapshot (its timings are not checked here),
and its refusal of bad options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "whatif.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_whatif_benchmark_reports_each_policy() -> None:
    done = _run(
        "--jobs", "20", "--nodes", "4", "--repeat", "1", "--policies", "farm,splitting", "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["jobs"], report["nodes"]) == (20, 4)
    assert [r["policy"] for r in report["runs"]] == ["farm", "splitting"]
    assert all(r["makespan_s"] > 0 for r in report["runs"])
    bad = _run("--jobs", "0")
    assert bad.returncode == 2
    assert "--jobs" in bad.stderr
