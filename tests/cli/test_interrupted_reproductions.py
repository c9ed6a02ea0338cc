"""``reproduce romosan``, ``grid`` and ``proof`` keep their runs as they finish, as ``reproduce
ponce`` does: interrupted (Ctrl-C, SIGTERM), they keep what finished, say so and exit 130,
with no worker left; ``--resume`` reads those runs back and runs only the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.sim import parallel
from datasched.studies import resume
from datasched.studies.grid import runs as grid_runs
from datasched.studies.proof import reproduce as proof
from datasched.studies.proof.setup import QuotaSetup
from datasched.studies.romosan import runs as romosan
from proc_support import alive, children, describe

runner = CliRunner()

TINY_ROMOSAN = replace(romosan.SMOKE, jobs=60, zipf_jobs=40, edge_files=(256,), edge_jobs=100)
TINY_DAY = QuotaSetup(nodes=4, hours=0.25)
TINY_PROOF = proof.ProofStudy(files=12, seeds=1, quota=TINY_DAY, control=TINY_DAY)
TINY_PROOF_RUNS = 7  # one placement, uniform data, three other CPU times, two days of quotas


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reproduction's --quick at a few seconds' sizes."""
    monkeypatch.setattr(romosan, "QUICK", TINY_ROMOSAN)
    monkeypatch.setattr(grid_runs, "QUICK", replace(grid_runs.QUICK, jobs=240))
    monkeypatch.setattr(proof, "QUICK", TINY_PROOF)


COMMANDS = {
    "romosan": ["reproduce", "romosan", "--quick", "-j", "1"],
    "grid": ["reproduce", "grid", "--quick", "-j", "1"],
    "proof": ["reproduce", "proof", "--quick", "--no-runtime"],
}


def _stopped_after(k: int, ran: list[int]) -> Callable[..., list[Any]]:
    """A stand-in for the runs' map: ``k`` runs done (told to the caller, which keeps them),
    then Ctrl-C; ``ran`` gets the number of runs each call was asked for."""

    def runs(
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        *,
        on_done: Callable[[int, Any], None] | None = None,
        **_: Any,
    ) -> list[Any]:
        ran.append(len(items))
        for i, item in enumerate(items[:k]):
            if on_done is not None:
                on_done(i, fn(item))
        raise KeyboardInterrupt

    return runs


@pytest.mark.usefixtures("tiny")
@pytest.mark.parametrize("study", sorted(COMMANDS))
def test_an_interrupted_reproduction_keeps_its_runs_and_resume_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study: str
) -> None:
    out = tmp_path / "out"
    args = [*COMMANDS[study], "--out", str(out), "--json"]
    asked: list[int] = []
    with monkeypatch.context() as patch:
        patch.setattr(resume, "map_in_processes", _stopped_after(3, asked))
        result = runner.invoke(app, args)
    assert result.exit_code == 130, result.output
    assert f"interrupted: 3 finished runs are kept in {out / 'runs'}" in result.stderr
    assert "--resume" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert len(list((out / "runs").glob("*.json"))) == 3
    assert not (out / "report.md").exists()
    total = asked[0]
    # Resumed: the three are read back, the rest run, the report written.
    real = parallel.map_in_processes  # what run_units calls, under its name there
    ran: list[int] = []

    def counted(fn: Any, items: Sequence[Any], **kw: Any) -> list[Any]:
        ran.append(len(items))
        return real(fn, items, **kw)

    monkeypatch.setattr(resume, "map_in_processes", counted)
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert f"3 of {total} runs read back from {out / 'runs'}" in again.stderr
    assert ran[0] == total - 3
    assert Path(json.loads(again.stdout)["report"]).exists()
    # Without --resume, the kept runs are cleared first: everything runs again.
    ran.clear()
    fresh = runner.invoke(app, args)
    assert fresh.exit_code == 0, fresh.output
    assert ran[0] == total
    assert "read back" not in fresh.stderr


@pytest.mark.usefixtures("tiny")
def test_runs_of_other_sizes_are_not_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run with other sizes (here: the tiny quick study changed) runs afresh."""
    out = tmp_path / "out"
    args = [*COMMANDS["romosan"], "--out", str(out), "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    monkeypatch.setattr(romosan, "QUICK", replace(TINY_ROMOSAN, jobs=61))
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert "read back" not in again.stderr


@pytest.mark.usefixtures("tiny")
def test_the_proof_reproduction_prints_a_line_a_finished_run_without_a_terminal(
    tmp_path: Path,
) -> None:
    args = [*COMMANDS["proof"], "--out", str(tmp_path / "out"), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    n = TINY_PROOF_RUNS
    assert lines[0] == f"{n} runs, one after the other"
    done = [line for line in lines if line.startswith("[")]
    assert [line.split("]")[0] for line in done] == [f"[{k}/{n}" for k in range(1, n + 1)]
    assert all(line.endswith(" s)") for line in done)
    assert "uneven data, placement 0: both packetizers" in done[0]
    assert json.loads(result.stdout)["quick"] is True


_ROMOSAN_SCRIPT = """
import sys, time
from dataclasses import replace
import datasched.studies.romosan.runs as romosan
import datasched.studies.romosan.reproduce as reproduce

romosan.QUICK = replace(romosan.SMOKE, jobs=60, zipf_jobs=40, edge_files=(256,), edge_jobs=100)
real = reproduce.run_one

def slow(run):
    if run.experiment != "servers":
        time.sleep(60)  # far longer than the test waits: stopped by the signal
    return real(run)

reproduce.run_one = slow  # the workers are forked: they run it too
from datasched.cli import app
app(sys.argv[1:], prog_name="datasched")
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_stopped_reproduction_keeps_its_runs_and_stops_its_workers(
    tmp_path: Path, how: str
) -> None:
    """The real command and signals: SIGTERM to it, or SIGINT to its whole process group as
    a terminal's Ctrl-C sends it. The servers experiment's runs finish, the others are under
    way when it stops."""
    script = tmp_path / "run.py"
    script.write_text(_ROMOSAN_SCRIPT)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), *COMMANDS["romosan"][:-1], "2", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(list((out / "runs").glob("*.json"))) < 3 if (out / "runs").is_dir() else True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first runs never finished"
        time.sleep(0.05)
    workers = children(proc.pid)
    assert workers
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    said = f"stdout:\n{stdout}\nstderr:\n{stderr}"
    assert proc.returncode == 130, said
    assert "Traceback" not in stderr, said
    kept = len(list((out / "runs").glob("*.json")))
    assert 3 <= kept <= 12, said  # the servers experiment's, not one of the others
    assert f"interrupted: {kept} finished runs are kept in" in stderr, said
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: describe(pid) for pid in workers if alive(pid)}
    assert not left, f"workers still alive 10 s after the command ended: {left}; {said}"
