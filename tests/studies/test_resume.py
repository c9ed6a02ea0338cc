"""A reproduction keeps its runs as they finish: a re-run with --resume reads them back, an
interrupted one (Ctrl-C, SIGTERM) keeps what finished and leaves no worker behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.studies.ponce import reproduce
from datasched.studies.ponce.figures import Unit, figure_specs, figure_units
from datasched.studies.ponce.reproduce import ponce_units
from datasched.studies.resume import MISSING, RunStore, run_units
from proc_support import alive, children

runner = CliRunner()
TAG = {"study": "t", "quick": True, "version": "1"}


def _square(x: int, calls: str | None = None) -> dict[str, Any]:
    if calls is not None:
        with Path(calls).open("a") as fh:
            fh.write(f"{x}\n")
    return {"x": x, "square": x * x, "pair": (x, -x)}


def _units(calls: Path | None = None) -> list[Unit]:
    where = None if calls is None else str(calls)
    return [Unit(f"sq/{x}", f"square {x}", partial(_square, x, where), cost=x) for x in range(6)]


def test_a_resumed_run_reads_back_what_finished(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    store = RunStore(tmp_path / "runs", TAG)
    lines: list[str] = []
    first = run_units(_units(calls), store=store, say=lines.append)
    assert [r["square"] for r in first] == [x * x for x in range(6)]
    assert first[2]["pair"] == [2, -2]  # as JSON reads it back, whether stored or not
    assert len(store) == 6
    assert lines[0].startswith("[1/6] square 5")  # the largest first
    assert lines[-1].startswith("[6/6] square 0")
    # Lose two runs (as if interrupted before them); a resumed run runs only those.
    store.path("sq/1").unlink()
    store.path("sq/4").write_text("{not json")  # a torn file counts as missing
    calls.unlink()
    lines.clear()
    again = run_units(_units(calls), store=store, say=lines.append)
    assert again == first
    assert sorted(calls.read_text().split()) == ["1", "4"]
    assert lines[0] == f"4 of 6 runs read back from {store.root}"


def test_runs_of_another_tag_or_key_are_not_read_back(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs", TAG)
    store.put("sq/1", {"square": 99})
    assert store.get("sq/1") == {"square": 99}
    other = RunStore(tmp_path / "runs", {**TAG, "quick": False})
    assert other.get("sq/1") is MISSING
    assert store.get("sq/2") is MISSING
    # A file moved under another key's name does not answer for it.
    store.path("sq/1").rename(store.path("sq/2"))
    assert store.get("sq/2") is MISSING
    assert store.path("a/b") != store.path("a_b")  # unsafe characters do not collide
    store.clear()
    assert len(store) == 0


def test_units_results_do_not_depend_on_processes(tmp_path: Path) -> None:
    one = run_units(_units(), processes=1)
    two = run_units(_units(), processes=2, store=RunStore(tmp_path / "r", TAG))
    assert one == two


def test_the_reproduction_is_units_with_stable_distinct_keys() -> None:
    shared, timed = ponce_units(quick=True)
    keys = [u.key for u in [*shared, *timed]]
    assert len(keys) == len(set(keys))
    again, later = ponce_units(quick=True)
    assert keys == [u.key for u in [*again, *later]]
    assert [u.key for u in timed] == [u.key for u in figure_units(figure_specs(quick=True)[-1])]
    assert all(u.cost > 0 for u in shared if not u.key.startswith("fig09"))


def test_small_stripes_are_costed_as_the_costly_runs_they_are() -> None:
    """Measured, a stripe-200 adaptive-delay run of Figure 10 costs about 14 times a
    stripe-5000 one and 4 times an out-of-order one: costed as the cheapest, they went last
    and left one process busy alone at the end."""
    shared, _ = ponce_units(quick=True)
    cost = {u.key: u.cost for u in shared}
    small = cost["fig10/adaptive delay, stripe 200@0.6"]
    assert small > 10 * cost["fig10/adaptive delay, stripe 5000@0.6"]
    assert small > 2 * cost["fig10/out-of-order@0.6"]


_SCRIPT = """
import sys, time
from functools import partial
from pathlib import Path
from datasched.cli.study import sigterm_interrupts
from datasched.studies.ponce.figures import Unit
from datasched.studies.resume import RunStore, run_units

def nap(x):
    time.sleep(0.2 if x < 2 else 60)
    return x

store = RunStore(Path(sys.argv[1]), {"t": 1})
units = [Unit(f"u{x}", f"unit {x}", partial(nap, x), cost=-x) for x in range(5)]
try:
    with sigterm_interrupts():
        run_units(units, processes=2, store=store, say=lambda m: print(m, flush=True))
except KeyboardInterrupt:
    print("interrupted", len(store), flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_stop_keeps_finished_runs_and_stops_the_workers(tmp_path: Path, how: str) -> None:
    """SIGTERM to the command, or Ctrl-C as a terminal sends it: SIGINT to the whole process
    group, workers included. Either way the finished runs are kept, the workers end, and no
    worker prints a traceback of its own."""
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "runs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen = [proc.stdout.readline(), proc.stdout.readline()]
    assert all(line.startswith(("[1/5]", "[2/5]")) for line in seen), seen
    workers = children(proc.pid)
    assert workers  # the two still asleep
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert "interrupted 2" in out
    assert "Traceback" not in err, err
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "runs").glob("*.json")) == [
        "u0",
        "u1",
    ]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if alive(pid)]


def test_an_interrupted_reproduction_says_what_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(**kw: Any) -> Any:
        store: RunStore = kw["store"]
        store.put("fig03/x", {"ok": True})
        raise KeyboardInterrupt

    monkeypatch.setattr(reproduce, "run_ponce", interrupted)
    out = tmp_path / "repro"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "stale-0.json").write_text(json.dumps({"key": "old"}))
    result = runner.invoke(app, ["reproduce", "ponce", "--quick", "-j", "1", "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "interrupted: 1 finished runs are kept in" in result.output
    assert "--resume" in result.output
    # Without --resume the old runs were dropped first; with it they stay.
    assert [p.name for p in (out / "runs").iterdir()] == [
        RunStore(out / "runs", {}).path("fig03/x").name
    ]
    result = runner.invoke(
        app, ["reproduce", "ponce", "--quick", "--resume", "-j", "1", "--out", str(out)]
    )
    assert result.exit_code == 130
    assert "interrupted: 1 finished runs" in result.output
