"""benchmarks/service_load.py end to end on a small load: every request accepted, stored
and completed (its timings are figures, not checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_load_benchmark_stores_and_completes_every_request() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "service_load.py"), "--users", "4",
         "--requests", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["accepted"] == report["stored"] == report["completed"] == 12
    assert report["refused"] == 0
    assert report["submit"]["p50_ms"] <= report["submit"]["max_ms"]


def test_the_load_benchmark_refuses_bad_options() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "service_load.py"), "--users", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 2
    assert "--users" in done.stderr.splitlines()[-1]
