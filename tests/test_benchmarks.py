"""benchmarks/run.py: a small run end to end (its figures are not checked here: timings live in
the benchmark, not in tests), and its refusal of bad options; the same for
benchmarks/instructions.py (its run needs valgrind, and is slow under it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "run.py"
INSTRUCTIONS = BENCHMARKS / "instructions.py"


def _run(*args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=300
    )


def test_repeated_runs_report_median_and_fastest() -> None:
    done = _run("--jobs", "40", "--nodes", "10", "--policies", "farm", "--no-sweep")
    assert done.returncode == 0, done.stderr
    assert "x heapq" in done.stdout
    assert "farm" in done.stdout
    done = _run(
        "--jobs", "40", "--nodes", "10", "--policies", "farm,splitting", "--repeat", "2",
        "--no-sweep", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sweep_s"] is None
    assert [(r["policy"], r["nodes"], r["jobs"]) for r in report["runs"]] == [
        ("farm", 10, 40),
        ("splitting", 10, 40),
    ]
    for row in report["runs"]:
        assert 0 < row["fastest_wall_s"] <= row["wall_s"]
        assert row["events_per_job"] >= 2  # an arrival and an end at least
        assert row["cost_vs_bare_heapq"] > 0


def test_bad_options_are_refused_naming_them() -> None:
    for args, field in (
        (["--policies", "nope"], "--policies"),
        (["--nodes", "ten"], "--nodes"),
        (["--nodes", "0"], "--nodes"),
        (["--repeat", "0"], "--repeat"),
    ):
        done = _run(*args)
        assert done.returncode == 2
        assert field in done.stderr.splitlines()[-1]


def test_instruction_count_refuses_bad_options_naming_them() -> None:
    for args, field in (
        (["--policy", "nope"], "--policy"),
        (["--jobs", "0"], "--jobs"),
        (["--nodes", "-1"], "--nodes"),
    ):
        done = _run(*args, script=INSTRUCTIONS)
        assert done.returncode == 2
        assert field in done.stderr.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_instruction_count_grows_with_the_jobs() -> None:
    counts = []
    for jobs in ("50", "400"):
        done = _run("--policy", "splitting", "--jobs", jobs, script=INSTRUCTIONS)
        assert done.returncode == 0, done.stderr
        match = re.search(r"([\d,]+) M instructions", done.stdout)
        assert match is not None, done.stdout
        counts.append(int(match.group(1).replace(",", "")))
    assert 0 < counts[0] < counts[1]
    # --net: the jobs after the first, apart from the run's fixed part, which a one-job run
    # holds nearly all of (50 jobs of job splitting at 10 nodes are far cheaper than it).
    done = _run("--policy", "splitting", "--jobs", "50", "--net", script=INSTRUCTIONS)
    assert done.returncode == 0, done.stderr
    net = re.search(r"one-job run \(([\d,]+) M\): ([\d,]+) M for the other 49 jobs", done.stdout)
    assert net is not None, done.stdout
    first, rest = (int(g.replace(",", "")) for g in net.groups())
    assert 0 < rest < first


def test_the_sandbox_benchmark_runs_the_same_packets_both_ways() -> None:
    from sandbox_support import require_sandbox

    require_sandbox()
    done = _run("--events", "100,300", "--repeat", "1", "--json", script=BENCHMARKS / "sandbox.py")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [r["events"] for r in result["packets"]] == [100, 300]
    assert all(r["sandbox_s"] > 0 and r["here_s"] > 0 for r in result["packets"])
    assert result["child_start_s"] > 0


@pytest.mark.slow  # seven child processes: about 10 s on a quiet machine, 40 s loaded
def test_scale_events_pairs_two_builds_and_refuses_bad_options() -> None:
    """benchmarks/scale_events.py: per-event cost at two sizes, with a baseline build run in
    the same rounds; a build paired with itself gives identical summaries."""
    script = BENCHMARKS / "scale_events.py"
    src = str(BENCHMARKS.parent / "src")
    done = _run(
        "--policies", "splitting", "--small", "2", "--large", "4", "--jobs-small", "6",
        "--jobs-large", "6", "--baseline", src, "--clock", "cpu", "--json", script=script,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["runs"]
    assert row["policy"] == "splitting"
    for build in ("this", "baseline"):
        assert row[f"{build}_ratio"] > 0
        assert row[f"{build}_4_events"] > row[f"{build}_2_events"] > 0
        assert row[f"{build}_4_peak_rss_mb"] > 0
    assert row["this_4_fingerprint"] == row["baseline_4_fingerprint"]
    for args, field in (
        (["--policies", "nope"], "--policies"),
        (["--baseline", "/nonexistent"], "--baseline"),
        (["--large", "0"], "--large"),
    ):
        done = _run(*args, script=script)
        assert done.returncode == 2
        assert field in done.stderr.splitlines()[-1]


def test_memory_growth_samples_a_run_and_refuses_bad_options() -> None:
    """benchmarks/memory_growth.py: one JSON line per sample, jobs rising, the caches'
    extents and fill and the directory's segments counted; bad options named."""
    script = BENCHMARKS / "memory_growth.py"
    done = _run(
        "--nodes", "20", "--cache-gb", "2", "--jobs", "12", "--every", "2",
        "--workload-jobs", "40", "--json", script=script,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) >= 2
    assert [r["jobs"] for r in rows] == sorted({r["jobs"] for r in rows})
    assert rows[-1]["jobs"] >= 12
    for row in rows:
        assert row["rss_mb"] > 0
        assert row["blocks"] > 0
        assert 0 < row["fill"] <= 1
        assert row["extents"] > 0
        assert row["heap"] >= row["extents"]
        assert row["scheduler_directory"]["segments"] >= 1
    for args, field in (
        (["--policy", "nope"], "--policy"),
        (["--every", "0"], "--every"),
        (["--cache-gb", "-1"], "--cache-gb"),
    ):
        done = _run(*args, script=script)
        assert done.returncode == 2
        assert field in done.stderr.splitlines()[-1]
