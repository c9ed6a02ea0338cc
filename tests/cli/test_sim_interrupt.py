"""Ctrl-C in ``datasched sim``: the run stops between two slices and prints its figures so
far, marked partial, then exits 130 (docs/performance.md, "Long runs: progress and early
stops"). A second Ctrl-C quits at once."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from datasched.cli.tables import summary_detail
from datasched.sim.experiment import SimConfig, simulate

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads a process's signal handlers in /proc"
)

# Far longer than the test waits (about 20 s of CPU uninterrupted), quick to set up.
JOBS = 3000
LONG = ["sim", "--policy", "splitting", "--nodes", "100", "--load", "8", "--jobs", str(JOBS)]


def _catches_sigterm(pid: int) -> bool:
    """Whether ``pid`` has a handler for SIGTERM: ``sim`` sets one (beside SIGINT's) while
    the run goes on, so the signal is sent once the run, not Python's start, will get it."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("SigCgt:"):
            return bool(int(row.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def _start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "datasched", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not _catches_sigterm(proc.pid):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "sim never began its run"
        time.sleep(0.05)
    time.sleep(0.5)  # let a few jobs end
    return proc


def test_ctrl_c_prints_partial_figures_as_json_and_exits_130() -> None:
    proc = _start([*LONG, "--json"])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert data["partial"] is True
    assert data["stopped_by"] == "interrupt"
    assert data["overloaded"] is False  # unfinished jobs are the interrupt's doing
    assert data["jobs_completed"] < JOBS
    assert "interrupted: stopping the run" in err
    assert "Traceback" not in err


def test_an_interrupted_run_is_marked_partial_in_the_table() -> None:
    config = SimConfig(policy="splitting", n_jobs=200, load_jobs_per_h=0.8)
    asked = 0

    def stop() -> bool:
        nonlocal asked
        asked += 1
        return asked > 1  # after the first slice

    summary, run = simulate(config, stop=stop)
    assert summary.partial
    assert summary.stopped_by == "interrupt"
    assert 0 < run.jobs_completed < config.n_jobs
    assert not summary.overloaded
    buf = io.StringIO()
    Console(file=buf, width=200).print(summary_detail(summary))
    text = buf.getvalue()
    assert "PARTIAL (stopped by interrupt)" in text
    assert f"stopped by interrupt: {run.jobs_completed} jobs ended" in text


def test_a_second_ctrl_c_quits_at_once() -> None:
    """A run that does not come back from the first signal (here: the second comes before
    the run looks at the first) still stops, without figures."""
    proc = _start([*LONG, "--json"])
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    # Either the run saw the first signal in time (figures, 130) or the second stopped it
    # (no figures): never a run that went on to its end.
    if out.strip():
        assert json.loads(out)["stopped_by"] == "interrupt"
        assert proc.returncode == 130


def test_a_stop_that_never_says_yes_changes_nothing() -> None:
    config = SimConfig(policy="splitting", n_jobs=100, load_jobs_per_h=0.8)
    plain, _ = simulate(config)
    watched, _ = simulate(config, stop=lambda: False)
    assert not watched.partial
    assert watched.jobs_completed == config.n_jobs
    a, b = plain.to_dict(), watched.to_dict()
    a.pop("wall_s")
    b.pop("wall_s")
    assert a == b
