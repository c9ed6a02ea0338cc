"""Long simulations: a run driven in slices (progress, ``--until``, ``--max-jobs``) is the run
an uninterrupted loop makes, and a run stopped early says it is partial."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from datasched.cli import app
from datasched.cli.simprogress import SimProgressView, parse_sim_time
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.sim import experiment
from datasched.sim.engine import SimEngine
from datasched.sim.experiment import ConfigError, SimConfig, SimProgress, simulate
from datasched.sim.recorder import PacketRecord

runner = CliRunner()
CONFIG = SimConfig(policy="splitting", n_jobs=200, load_jobs_per_h=0.8)


def _figures(summary: Any) -> dict[str, Any]:
    d = dict(summary.to_dict())
    d.pop("wall_s")
    return d


def test_slices_of_a_run_are_the_whole_run() -> None:
    """begin + proceed(max_steps) in slices + close ends every job when run() does, with
    the same number of scheduler events."""
    from clusters import scheduler as small_cluster

    jobs = [Job(i, 250.0 * i, IntervalSet.range(90 * i, 90 * i + 500)) for i in range(12)]
    whole = SimEngine(small_cluster("out-of-order", 3, 800))
    run = whole.run(jobs)
    sliced = SimEngine(small_cluster("out-of-order", 3, 800))
    sliced.begin(jobs)
    slices = 0
    while not sliced.proceed(max_steps=3):
        slices += 1
    part = sliced.close()
    assert slices > 5
    assert {j.job_id: j.end_s for j in part.jobs} == {j.job_id: j.end_s for j in run.jobs}
    assert part.n_events_handled == run.n_events_handled
    assert sliced.jobs_ended == len(jobs)


def test_progress_changes_nothing_and_sees_the_run_advance() -> None:
    plain, _ = simulate(CONFIG)
    seen: list[SimProgress] = []
    watched, _ = simulate(CONFIG, on_progress=seen.append, progress_every_s=0.0)
    assert _figures(watched) == _figures(plain)
    assert not watched.partial
    assert len(seen) >= 2
    ended = [p.jobs_ended for p in seen]
    assert ended == sorted(ended)
    assert seen[-1].jobs_ended == CONFIG.n_jobs
    assert seen[-1].fraction == 1.0
    assert seen[-1].eta_s == 0.0
    assert [p.sim_s for p in seen] == sorted(p.sim_s for p in seen)


def test_max_jobs_stops_at_that_many_jobs_and_says_partial() -> None:
    summary, run = simulate(CONFIG, max_jobs=60)
    assert summary.partial
    assert summary.stopped_by == "max_jobs"
    assert run.jobs_completed == 60  # exactly: never a step past the 60th
    assert summary.jobs_completed == 60
    # Measured as a 60-job run would be: jobs 12 to 53, those that ended.
    assert 0 < summary.jobs_measured <= 42
    assert not summary.overloaded  # unfinished jobs are the bound's doing
    assert not math.isnan(summary.mean_speedup)


def test_until_stops_at_that_simulated_time() -> None:
    full, full_run = simulate(CONFIG)
    until = full_run.end_s / 3
    summary, run = simulate(CONFIG, until=until)
    assert summary.partial
    assert summary.stopped_by == "until"
    assert run.end_s <= until
    assert summary.end_s == run.end_s
    assert 0 < run.jobs_completed < CONFIG.n_jobs
    # A bound past the end changes nothing.
    late, _ = simulate(CONFIG, until=10 * full_run.end_s)
    assert not late.partial
    assert _figures(late) == _figures(full)


def test_an_overloaded_partial_run_still_says_overloaded() -> None:
    heavy = replace(CONFIG, policy="farm", load_jobs_per_h=1.35, n_jobs=700)
    summary, run = simulate(heavy, max_jobs=500)
    assert summary.partial
    assert not run.stopped_early  # not the backlog's bound: judged on its trend
    assert summary.overloaded


@pytest.mark.parametrize(("until", "max_jobs"), [(0.0, None), (-5.0, None), (None, 0)])
def test_bounds_must_be_positive(until: float | None, max_jobs: int | None) -> None:
    with pytest.raises(ConfigError):
        simulate(CONFIG, until=until, max_jobs=max_jobs)


def test_sim_times_parse() -> None:
    assert parse_sim_time("36h") == 36 * 3600
    assert parse_sim_time("90d") == 90 * 86400
    assert parse_sim_time("2w") == 14 * 86400
    assert parse_sim_time("5000s") == 5000
    assert parse_sim_time("1.5") == 5400  # hours
    for bad in ("", "h", "3 days", "-2h", "0d", "1e400h", "nan"):
        with pytest.raises(ValueError, match=r"expected a time like|must be a positive time"):
            parse_sim_time(bad)


def test_without_a_terminal_progress_is_plain_lines() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    view = SimProgressView("x", console=console, every_s=0.0)
    with view:
        simulate(CONFIG, on_progress=view, progress_every_s=0.0)
    lines = buf.getvalue().splitlines()
    assert view.lines == len(lines) >= 2
    assert lines[-1].startswith("sim: ")
    assert f"{CONFIG.n_jobs} of {CONFIG.n_jobs} jobs ended" in lines[-1]
    assert "\x1b" not in buf.getvalue()  # no bar, no escape codes in a log


def test_sim_cli_marks_partial_runs() -> None:
    args = ["sim", "--policy", "splitting", "--jobs", "200", "--max-jobs", "50", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["partial"] is True
    assert data["stopped_by"] == "max_jobs"
    assert data["jobs_completed"] == 50
    table = runner.invoke(app, ["sim", "--policy", "splitting", "--jobs", "200", "--until", "2d"])
    assert table.exit_code == 0, table.output
    assert "PARTIAL (stopped by --until)" in table.stdout
    whole = runner.invoke(app, ["sim", "--policy", "splitting", "--jobs", "50", "--json"])
    assert json.loads(whole.stdout)["partial"] is False


MEASURED_FIGURES = (
    "mean_wait_s",
    "median_wait_s",
    "mean_processing_s",
    "mean_speedup",
    "cache_hit_ratio",
    "peer_read_ratio",
    "tertiary_bytes",
    "utilization",
    "mean_backlog",
)


def test_a_partial_run_with_nothing_measured_says_so() -> None:
    """Stopped before a measured job read anything, the figures of the measured jobs are
    null in --json and "not measured" in the table: not 0 %, which reads as measured."""
    args = ["sim", "--policy", "farm", "--jobs", "100", "--until", "1s"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["partial"] is True
    assert data["jobs_measured"] == 0
    nulls = {"cache_hit_ratio", "peer_read_ratio", "mean_speedup", "utilization"}
    assert {k for k in MEASURED_FIGURES if data[k] is None} >= nulls
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    rows = {line.split("  ")[0].strip(): line for line in table.stdout.splitlines()}
    for row in ("mean speedup", "cache hits", "peer reads", "utilization"):
        assert "not measured" in rows[row], rows[row]
    assert "nan" not in table.stdout
    assert "0.0%" not in table.stdout


def test_a_partial_run_counts_the_work_under_way_at_the_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stopped at T, a run's utilisation is its slots' busy time in the measured window up
    to T, the subjobs running at T included up to T, as the same run's subjobs (it run to
    its end) give it; its events read count the work under way too. Counting only the
    subjobs that had left their slots, both read low."""
    monkeypatch.setattr(experiment, "SimEngine", partial(SimEngine, record_packets=True))
    _, whole = simulate(CONFIG)
    summary, run = simulate(CONFIG, until=whole.end_s / 3)
    assert whole.packets is not None
    t = run.end_s
    w0, w1 = run.window
    assert w0 < w1 <= t

    def busy(packets: list[PacketRecord]) -> float:
        return sum(max(0.0, min(p.end_s, w1) - max(p.start_s, w0)) for p in packets)

    ended = [p for p in whole.packets if p.end_s <= t]
    under_way = [p for p in whole.packets if p.start_s < t < p.end_s]
    assert under_way  # the stop found subjobs in their slots
    span = (w1 - w0) * run.n_slots
    assert summary.utilization == pytest.approx(busy([*ended, *under_way]) / span, rel=1e-9)
    assert summary.utilization > busy(ended) / span
    done = sum(p.events for p in ended)
    assert done < run.events_processed < done + sum(p.events for p in under_way)
    assert summary.events_processed == run.events_processed
    # The reads of the measured jobs, by source: the ratios' terms, the work under way in.
    assert sum(run.measured_events_by_source) > 0
    assert summary.cache_hit_ratio == pytest.approx(
        run.measured_events_by_source[0] / sum(run.measured_events_by_source)
    )


def test_a_run_stopped_while_its_measured_job_runs_measures_its_reads() -> None:
    """--max-jobs 1: the first job to end is not the measured one (the first submitted),
    which is still reading at the stop: its reads so far and the window's busy slots are
    measured (one job on one of ten nodes), where they read "not measured" before."""
    args = ["sim", "--policy", "farm", "--jobs", "100", "--max-jobs", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["partial"] is True
    assert data["jobs_measured"] == 0  # no measured job ended: no wait, no speedup
    assert data["mean_speedup"] is None
    assert data["utilization"] == pytest.approx(0.1)
    assert data["cache_hit_ratio"] == 0.0  # a cold cache: all read from tertiary storage
    assert data["tertiary_bytes"] > 0


def test_the_sweep_table_marks_what_was_not_measured() -> None:
    from datasched.cli.tables import summary_table

    stopped, _ = simulate(replace(CONFIG, policy="farm"), until=1.0)
    whole, _ = simulate(CONFIG)
    buf = io.StringIO()
    Console(file=buf, width=120).print(summary_table([whole, stopped]))
    text = buf.getvalue()
    assert "nan" not in text
    assert "-: not measured" in text
    buf = io.StringIO()
    Console(file=buf, width=120).print(summary_table([whole]))
    assert "not measured" not in buf.getvalue()


def test_a_whole_run_measures_every_figure() -> None:
    summary, _ = simulate(CONFIG)
    assert summary.jobs_measured > 0
    for name in MEASURED_FIGURES:
        assert not math.isnan(getattr(summary, name)), name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--until", "soon"], "--until: expected a time like 36h"),
        (["--until", "0h"], "--until: must be a positive time"),
        (["--max-jobs", "0"], "--max-jobs: must be at least 1, got 0"),
    ],
)
def test_sim_cli_refuses_bad_bounds(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["sim", "--jobs", "20", *args])
    assert result.exit_code == 2
    assert message in result.output
