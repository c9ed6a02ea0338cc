"""``sweep`` and ``scale`` interrupted (Ctrl-C, SIGTERM) keep what finished: printed and
written marked partial, the worker processes stopped, exit status 130 (as ``reproduce``
and ``sim`` do)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.cli import sim as cli_sim
from datasched.sim.experiment import SimConfig, summary_of
from datasched.sim.metrics import Summary
from datasched.studies.ponce import scale as ponce_scale
from proc_support import alive, children, describe

runner = CliRunner()
SWEEP = ["sweep", "--policies", "farm", "--loads", "0.2,0.4,0.6", "--jobs", "20", "-j", "1"]


def _stopped_after(k: int) -> Callable[..., list[Summary]]:
    """A stand-in for the sweep's runs: the first ``k`` configs simulated and handed back as
    they finish, then KeyboardInterrupt, as Ctrl-C or SIGTERM raises it in the command."""

    def runs(
        configs: Sequence[SimConfig],
        *,
        on_result: Callable[[Summary], None] | None = None,
        on_done: Callable[[int, Summary], None] | None = None,
        **_: Any,
    ) -> list[Summary]:
        for i, config in enumerate(configs[:k]):
            summary = summary_of(config)
            if on_done is not None:
                on_done(i, summary)
            if on_result is not None:
                on_result(summary)
        raise KeyboardInterrupt

    return runs


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_an_interrupted_sweep_writes_the_runs_that_finished_marked_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_sim, "run_sweep", _stopped_after(2))
    out = tmp_path / "sweep"
    result = runner.invoke(app, [*SWEEP, "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "interrupted after 2 of 3 runs" in result.stderr
    assert "PARTIAL (interrupted after 2 of 3 runs)" in result.stdout
    assert "partial: interrupted after 2 of 3 runs" in result.stdout
    assert "Traceback" not in result.output
    assert sorted(p.name for p in out.iterdir()) == ["sweep.partial.csv", "sweep.partial.png"]
    rows = _rows(out / "sweep.partial.csv")
    assert [float(r["load_jobs_per_h"]) for r in rows] == [0.2, 0.4]
    assert (out / "sweep.partial.png").read_bytes()[:4] == b"\x89PNG"


def test_a_partial_sweep_leaves_a_whole_one_alone_and_a_whole_one_replaces_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sweep"
    small = ["sweep", "--policies", "farm", "--loads", "0.2,0.4", "--jobs", "20", "-j", "1"]
    whole = runner.invoke(app, [*small, "--out", str(out)])
    assert whole.exit_code == 0, whole.output
    before = (out / "sweep.csv").read_text()
    with monkeypatch.context() as patch:
        patch.setattr(cli_sim, "run_sweep", _stopped_after(1))
        result = runner.invoke(app, [*small, "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert (out / "sweep.csv").read_text() == before
    assert len(_rows(out / "sweep.partial.csv")) == 1
    again = runner.invoke(app, [*small, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.png"]


def test_a_sweep_interrupted_before_any_run_finished_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_sim, "run_sweep", _stopped_after(0))
    out = tmp_path / "sweep"
    result = runner.invoke(app, [*SWEEP, "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "interrupted after 0 of 3 runs: nothing written" in result.stderr
    assert result.stdout == ""
    assert not out.exists()


def test_an_interrupted_scale_prints_the_sizes_that_finished_marked_partial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = ponce_scale.scale_point
    seen: list[int] = []

    def point(base: SimConfig, n: int) -> Any:
        seen.append(n)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return real(base, n)

    monkeypatch.setattr(ponce_scale, "scale_point", point)
    args = ["scale", "--policy", "farm", "--nodes", "10,20,40", "--jobs", "30"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 130, result.output
    points = json.loads(result.stdout)
    assert [p["n_nodes"] for p in points] == [10, 20]
    assert all(p["partial"] is True for p in points)
    assert "interrupted after 2 of 3 sizes" in result.stderr
    seen.clear()
    table = runner.invoke(app, args)
    assert table.exit_code == 130, table.output
    assert "PARTIAL (interrupted after 2 of 3 sizes)" in table.stdout
    assert "partial: interrupted after 2 of 3 sizes" in table.stdout
    assert "largest sizes measured" in table.stdout


def test_a_whole_scale_is_not_partial() -> None:
    args = ["scale", "--policy", "farm", "--nodes", "10,20", "--jobs", "30", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [p["partial"] for p in json.loads(result.stdout)] == [False, False]


# -- real signals, in a process of its own ---------------------------------------------------

_SWEEP_SCRIPT = """
import sys, time
from pathlib import Path
import datasched.cli.sim as cli_sim
import datasched.sim.experiment as experiment

real_summary, real_sweep = experiment.summary_of, cli_sim.run_sweep
marks = Path(sys.argv[1])

def slow(config):
    if config.load_jobs_per_h > 0.5:
        time.sleep(60)  # far longer than the test waits: stopped by the signal
    return real_summary(config)

def noted(configs, *, on_done, **kw):
    def done(i, summary):
        on_done(i, summary)  # kept by the command first, then the test is told
        with marks.open("a") as fh:
            fh.write(f"{i}\\n")
    return real_sweep(configs, on_done=done, **kw)

experiment.summary_of = slow  # the workers are forked: they run it too
cli_sim.run_sweep = noted
from datasched.cli import app
app(sys.argv[2:], prog_name="datasched")
"""

_SCALE_SCRIPT = """
import sys, time
from pathlib import Path
import datasched.studies.ponce.scale as scale

real, marks = scale.scale_point, Path(sys.argv[1])

def point(base, n):
    if n > 10:
        marks.write_text("10 done\\n")
        time.sleep(60)
    return real(base, n)

scale.scale_point = point
from datasched.cli import app
app(sys.argv[2:], prog_name="datasched")
"""


def _run_until(script: str, tmp_path: Path, args: list[str], marks_wanted: int) -> Any:
    """Start ``script`` with ``args`` in a session of its own; return it once the marks
    file holds ``marks_wanted`` lines (what it finished, as the command has it)."""
    path = tmp_path / "run.py"
    path.write_text(script)
    marks = tmp_path / "marks"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(path), str(marks), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not (marks.exists() and len(marks.read_text().split()) >= marks_wanted):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first runs never finished"
        time.sleep(0.05)
    return proc


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds the worker processes in /proc"
)


@needs_proc
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_stopped_sweep_keeps_its_finished_runs_and_stops_its_workers(
    tmp_path: Path, how: str
) -> None:
    """SIGTERM to the command, or Ctrl-C as a terminal sends it (SIGINT to the whole
    process group, workers included): the two runs that finished are written marked
    partial, the two under way are abandoned, their workers end, no traceback."""
    out = tmp_path / "sweep"
    args = ["sweep", "--policies", "farm", "--loads", "0.2,0.3,0.6,0.7", "--jobs", "20"]
    proc = _run_until(_SWEEP_SCRIPT, tmp_path, [*args, "-j", "2", "--out", str(out)], 2)
    workers = children(proc.pid)
    assert workers
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    said = f"stdout:\n{stdout}\nstderr:\n{stderr}"  # what a failure here shows
    assert proc.returncode == 130, said
    assert "interrupted after 2 of 4 runs" in stderr, said
    assert "Traceback" not in stderr, said
    assert "PARTIAL" in stdout, said
    rows = _rows(out / "sweep.partial.csv")
    assert sorted(float(r["load_jobs_per_h"]) for r in rows) == [0.2, 0.3], said
    assert not (out / "sweep.csv").exists()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: describe(pid) for pid in workers if alive(pid)}
    assert not left, f"workers still alive 10 s after the command ended: {left}; {said}"


def test_scale_stopped_by_sigterm_prints_what_finished(tmp_path: Path) -> None:
    args = ["scale", "--policy", "farm", "--nodes", "10,20", "--jobs", "30", "--json"]
    proc = _run_until(_SCALE_SCRIPT, tmp_path, args, 1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    points = json.loads(stdout)
    assert [(p["n_nodes"], p["partial"]) for p in points] == [(10, True)]


# -- demo-sim and perf-map, as sweep ---------------------------------------------------------


def test_an_interrupted_demo_sim_keeps_its_finished_runs_beside_a_whole_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "demo"
    out.mkdir()
    (out / "sweep.csv").write_text("a whole sweep's\n")
    monkeypatch.setattr(cli_sim, "run_sweep", _stopped_after(2))
    result = runner.invoke(app, ["demo-sim", "-j", "1", "--out", str(out), "--json"])
    assert result.exit_code == 130, result.output
    doc = json.loads(result.stdout)
    assert doc["partial"] is True
    assert [(r["policy"], r["load_jobs_per_h"]) for r in doc["runs"]] == [
        ("farm", 0.2),
        ("farm", 0.5),
    ]
    assert doc["csv"] == str(out / "sweep.partial.csv")
    assert len(_rows(out / "sweep.partial.csv")) == 2
    assert (out / "sweep.csv").read_text() == "a whole sweep's\n"
    assert "interrupted after 2 of 12 runs" in result.stderr
    table = runner.invoke(app, ["demo-sim", "-j", "1", "--out", str(out)])
    assert table.exit_code == 130, table.output
    assert "PARTIAL (interrupted after 2 of 12 runs)" in table.stdout
    assert "Traceback" not in table.output


def test_a_demo_sim_interrupted_before_any_run_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_sim, "run_sweep", _stopped_after(0))
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo-sim", "-j", "1", "--out", str(out), "--json"])
    assert result.exit_code == 130, result.output
    doc = json.loads(result.stdout)
    assert (doc["runs"], doc["csv"], doc["partial"]) == ([], None, True)
    assert not out.exists()


PERF_MAP = ["perf-map", "--periods-h", "0,24", "--stripes", "5000", "--caches-gb", "50,100"]
PERF_MAP += ["--nodes", "3", "--jobs", "30", "-j", "1"]


def _map_stopped_after(k: int) -> Callable[..., list[Any]]:
    """A stand-in for the map's searches: the first ``k`` done, then Ctrl-C."""

    def searches(
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        *,
        on_done: Callable[[int, Any], None] | None = None,
        **_: Any,
    ) -> list[Any]:
        for i, item in enumerate(items[:k]):
            if on_done is not None:
                on_done(i, fn(item))
        raise KeyboardInterrupt

    return searches


def test_an_interrupted_perf_map_writes_the_points_found_beside_a_whole_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasched.policies.ponce.adaptive import load_map
    from datasched.sim.experiment import find_max_load as real
    from datasched.studies.ponce import perfmap

    # The three maps below search the same points: each is searched once and its result
    # given again (what is tested is which points are written where, not the search).
    found: dict[str, Any] = {}

    def once(config: Any, **kw: Any) -> Any:
        key = repr((config, sorted(kw.items())))
        if key not in found:
            found[key] = real(config, **kw)
        return found[key]

    monkeypatch.setattr(perfmap, "find_max_load", once)
    path = tmp_path / "m.json"
    whole = runner.invoke(app, [*PERF_MAP, "--out", str(path)])
    assert whole.exit_code == 0, whole.output
    assert len(found) == 4  # the searches ran, one a point
    before = path.read_text()
    with monkeypatch.context() as patch:
        patch.setattr(perfmap, "map_in_processes", _map_stopped_after(3))
        result = runner.invoke(app, [*PERF_MAP, "--out", str(path)])
    assert result.exit_code == 130, result.output
    assert "interrupted after 3 of 4 points" in result.stderr
    assert "Traceback" not in result.output
    assert path.read_text() == before  # the whole map is left alone
    partial = tmp_path / "m.partial.json"
    doc = json.loads(partial.read_text())
    assert doc["meta"]["partial"] == "interrupted after 3 of 4 points"
    assert doc["points"] == json.loads(before)["points"][:3]
    assert len(load_map(partial).points) == 3  # adaptive delay can read it
    again = runner.invoke(app, [*PERF_MAP, "--out", str(path)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_a_perf_map_interrupted_before_any_point_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasched.studies.ponce import perfmap

    monkeypatch.setattr(perfmap, "map_in_processes", _map_stopped_after(0))
    result = runner.invoke(app, [*PERF_MAP, "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 130, result.output
    assert "interrupted after 0 of 4 points: nothing written" in result.stderr
    assert list(tmp_path.iterdir()) == []


_PERF_MAP_SCRIPT = """
import sys, time
from pathlib import Path
import datasched.studies.ponce.perfmap as perfmap

real_search, real_map = perfmap.find_max_load, perfmap.map_in_processes
marks = Path(sys.argv[1])

def slow(config, **kw):
    if config.policy_params["period_h"] > 0:
        time.sleep(60)  # far longer than the test waits: stopped by the signal
    return real_search(config, **kw)

def noted(fn, items, *, on_done, **kw):
    def done(i, result):
        on_done(i, result)
        with marks.open("a") as fh:
            fh.write(f"{i}\\n")
    return real_map(fn, items, on_done=done, **kw)

perfmap.find_max_load = slow  # the workers are forked: they run it too
perfmap.map_in_processes = noted
from datasched.cli import app
app(sys.argv[2:], prog_name="datasched")
"""


def _stop_and_check_workers(proc: Any, how: str) -> tuple[str, str]:
    """Stop ``proc`` (SIGTERM, or SIGINT to its group as a terminal's Ctrl-C); its output
    once it ended, after checking that its worker processes ended with it."""
    workers = children(proc.pid)
    assert workers
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    said = f"stdout:\n{stdout}\nstderr:\n{stderr}"
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: describe(pid) for pid in workers if alive(pid)}
    assert not left, f"workers still alive 10 s after the command ended: {left}; {said}"
    assert proc.returncode == 130, said
    assert "Traceback" not in stderr, said
    return stdout, stderr


@needs_proc
def test_a_demo_sim_stopped_by_sigterm_keeps_its_finished_runs_and_stops_its_workers(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    proc = _run_until(_SWEEP_SCRIPT, tmp_path, ["demo-sim", "-j", "2", "--out", str(out)], 2)
    stdout, stderr = _stop_and_check_workers(proc, "sigterm")
    assert "interrupted after 2 of 12 runs" in stderr, stderr
    assert "PARTIAL" in stdout
    rows = _rows(out / "sweep.partial.csv")
    assert sorted(float(r["load_jobs_per_h"]) for r in rows) == [0.2, 0.5]
    assert not (out / "sweep.csv").exists()


@needs_proc
def test_a_perf_map_stopped_by_ctrl_c_keeps_its_points_and_stops_its_workers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.json"
    args = [*PERF_MAP[:-2], "-j", "2", "--out", str(path)]
    args[args.index("50,100")] = "50,100,200"
    proc = _run_until(_PERF_MAP_SCRIPT, tmp_path, args, 1)
    _, stderr = _stop_and_check_workers(proc, "ctrl-c")
    doc = json.loads((tmp_path / "m.partial.json").read_text())
    assert "of 6 points" in doc["meta"]["partial"], stderr
    assert {p["period_h"] for p in doc["points"]} == {0.0}
    assert not path.exists()
