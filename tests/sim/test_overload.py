"""Overload of policies that release held jobs in batches: the engine records what each
release finds undone, and ``is_overloaded`` judges such runs on it (the floor of the
residual), other runs on the jobs seen by arrivals, as before."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from datasched.sim.experiment import SimConfig, simulate
from datasched.sim.metrics import is_overloaded, periodic_overload
from datasched.sim.recorder import Release, SimRun

WEEK = 168 * 3600.0
NODES = 10


def periodic_run(
    residuals: list[int],
    batches: list[int] | int = 500,
    *,
    backlog: list[int] | None = None,
    busy: float = 0.9,
) -> tuple[SimRun, tuple[int, int]]:
    """A run of week-long periods, one release a week from the first week on, whose window
    holds every release; arrivals saw ``backlog`` (default: flat, 100 jobs)."""
    n = len(residuals)
    sizes = [batches] * n if isinstance(batches, int) else batches
    releases = [
        Release((k + 1) * WEEK, r, b) for k, (r, b) in enumerate(zip(residuals, sizes, strict=True))
    ]
    seen = backlog if backlog is not None else [100] * sum(sizes)
    run = SimRun(n_nodes=NODES, jobs=[], releases=releases, backlog=seen)
    run.window = (WEEK / 2, (n + 0.5) * WEEK)
    run.busy_s = busy * (run.window[1] - run.window[0]) * NODES
    return run, (0, len(seen))


def rising(n: int) -> list[int]:
    """A backlog seen by arrivals that the arrival-sampled tests call overloaded."""
    return [k // 10 for k in range(n)]


def test_rising_arrivals_alone_are_overloaded() -> None:
    # The premise of the tests below: without releases, this backlog is judged overloaded.
    run, measure = periodic_run([0] * 8, backlog=rising(4000))
    assert is_overloaded(replace(run, releases=[]), measure)


def test_a_bounded_sawtooth_is_not_overloaded() -> None:
    # Batches of 500 jobs; up to a third of a batch left at some period ends, cleared at
    # others: a stable system, even though the arrivals saw a rising, saturated queue.
    residuals = [0, 120, 160, 0, 90, 0, 130, 40, 0, 170, 60, 0]
    run, measure = periodic_run(residuals, backlog=rising(6000), busy=1.0)
    assert not is_overloaded(run, measure)


def test_a_growing_residual_is_overloaded() -> None:
    # 8 % over capacity: 40 more jobs of a 500-job batch left undone every period, with
    # noise; the arrivals saw a flat queue.
    residuals = [100, 170, 160, 250, 240, 330, 310, 420, 390, 500]
    run, measure = periodic_run(residuals)
    assert not is_overloaded(replace(run, releases=[]), measure)
    assert is_overloaded(run, measure)


def test_a_slowly_growing_residual_is_within_the_noise() -> None:
    # 5 jobs a period (1 % of a batch): a few jobs over ten periods, not told from noise.
    residuals = [100 + 5 * k + (15 if k % 2 else 0) for k in range(10)]
    run, measure = periodic_run(residuals)
    assert not is_overloaded(run, measure)


def test_a_late_excursion_that_clears_is_not_overloaded() -> None:
    run, measure = periodic_run([0, 0, 30, 0, 0, 0, 250, 400, 300, 20])
    assert not is_overloaded(run, measure)
    # ... but one that did not clear in the whole last half of the window is.
    run, measure = periodic_run([0, 0, 30, 0, 0, 250, 400, 300, 350, 420])
    assert is_overloaded(run, measure)


def test_unequal_batches_of_adaptive_delay_are_not_overloaded() -> None:
    # Adaptive delay: a long period (big batch), then short ones (small batches) while the
    # big batch is processed; the residual is high at the short ones and empty again at the
    # next long one. The last half ends high, but its floor is zero.
    residuals = [0, 350, 340, 360, 0, 330, 410, 400, 390, 0, 350, 350, 340, 350, 330]
    batches = [390, 40, 45, 50, 370, 80, 10, 30, 50, 340, 5, 6, 20, 30, 60]
    run, measure = periodic_run(residuals, batches)
    assert not is_overloaded(run, measure)
    # The same with 30 more jobs left undone every period: the floor climbs.
    run, measure = periodic_run([r + 100 + 30 * k for k, r in enumerate(residuals)], batches)
    assert is_overloaded(run, measure)


def test_small_batches_need_a_couple_of_jobs_per_node() -> None:
    # Batches of 40 jobs: a quarter batch is 10 jobs, below the floor of 2 per node.
    assert not periodic_overload(
        [Release(k * WEEK, r, 40) for k, r in enumerate([0, 5, 3, 15, 18, 16])], NODES
    )
    assert periodic_overload(
        [Release(k * WEEK, r, 40) for k, r in enumerate([0, 5, 3, 25, 28, 26])], NODES
    )


def test_too_few_releases_fall_back_to_the_arrivals() -> None:
    # Two releases in the window (a third one after it): judged as before, on arrivals.
    residuals = [0, 300, 900]
    run, measure = periodic_run(residuals, backlog=[100] * 1500)
    run.window = (WEEK / 2, 2.5 * WEEK)
    assert not is_overloaded(run, measure)
    run.backlog = rising(1500)
    assert is_overloaded(run, measure)
    # With the third release inside the window, the releases decide.
    run.window = (WEEK / 2, 3.5 * WEEK)
    run.backlog = [100] * 1500
    assert is_overloaded(run, measure)


def test_releases_of_a_few_jobs_fall_back_to_the_arrivals() -> None:
    # Adaptive delay at a period of zero most of the time: its few releases let go under
    # half of the measured jobs, which are judged on arrivals.
    run, measure = periodic_run([0, 0, 0, 0, 0, 0], 50, backlog=rising(1000))
    assert is_overloaded(run, measure)
    run, measure = periodic_run([0, 10, 40, 80, 160, 320], 50, backlog=[30] * 1000)
    assert not is_overloaded(run, measure)


def test_a_runaway_backlog_is_overloaded_whatever_the_releases() -> None:
    run, measure = periodic_run([0] * 8)
    assert not is_overloaded(run, measure)
    run.stopped_early = True
    assert is_overloaded(run, measure)


# -- the engine's records, and whole simulations ----------------------------------------------


def delayed(load: float, period_h: float, n_jobs: int, **kw: Any) -> SimConfig:
    params = {"period_h": period_h, "stripe_events": 5000}
    return SimConfig(
        policy="delayed", policy_params=params, load_jobs_per_h=load, n_jobs=n_jobs, **kw
    )


def test_engine_records_each_release_and_what_it_found_undone() -> None:
    _, run = simulate(delayed(1.8, 24, 400))  # about nine days of arrivals
    assert len(run.releases) >= 8
    assert sum(r.released for r in run.releases) == 400
    assert any(r.residual > 0 for r in run.releases)
    for r in run.releases:
        assert r.time_s % (24 * 3600) == 0
        assert r.released == sum(j.released_s == r.time_s for j in run.jobs)
        undone = [j for j in run.jobs if 0 <= j.released_s < r.time_s < j.end_s]
        assert r.residual == len(undone)


def test_policies_that_hold_nothing_record_no_release() -> None:
    _, run = simulate(SimConfig(policy="out-of-order", load_jobs_per_h=1.5, n_jobs=200))
    assert run.releases == []
    _, run = simulate(delayed(1.0, 0, 200))
    assert run.releases == []


@pytest.mark.parametrize(
    ("load", "overloaded"),
    [
        pytest.param(1.6, False, id="well-below"),
        pytest.param(2.8, True, id="well-above"),
    ],
)
def test_delayed_runs_are_judged_on_their_releases(load: float, overloaded: bool) -> None:
    # Day-long periods, 100 GB, stripe 5000: the maximal load is near 2.2 jobs/h.
    config = delayed(load, 24, 1000)
    summary, run = simulate(config)
    w0, w1 = run.window
    assert len([r for r in run.releases if w0 <= r.time_s <= w1]) >= 10
    assert not run.stopped_early  # judged on the residual, not cut for a runaway queue
    assert summary.overloaded is overloaded


def test_week_long_periods_below_capacity_are_not_overloaded() -> None:
    # 100 GB, stripe 5000, a week: the maximal load is near 3 jobs/h; at 2.6 the batches
    # (440 jobs) are done within their week once the caches are warm (the sawtooth seen by
    # arrivals made the arrival-sampled tests call this run overloaded).
    summary, run = simulate(delayed(2.6, 168, 4000))
    w0, w1 = run.window
    assert len([r for r in run.releases if w0 <= r.time_s <= w1]) >= 6
    assert not summary.overloaded
    summary, run = simulate(delayed(3.3, 168, 4000))
    assert summary.overloaded
