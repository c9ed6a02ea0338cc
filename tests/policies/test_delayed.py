"""Delayed scheduling (ponce-hersch Table 4): stripe points, periods, meta-subjobs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusters import scheduler
from datasched.core.actions import JobHeld, JobReleased, Start, WakeAt
from datasched.core.events import (
    ArrivalsClosed,
    JobArrived,
    JobCancelled,
    NodeJoined,
    NodeLost,
    Tick,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.core.scheduler import SchedulerError
from datasched.policies.ponce.delayed import stripe_points


def test_stripe_points_drop_short_and_cut_long_stripes() -> None:
    # 10 makes a 10-event stripe (< 50) and goes; 0..300 is cut into 100-event stripes.
    assert stripe_points([0, 10, 300], 100) == [0, 100, 200, 300]
    assert stripe_points([0, 60, 120], 100) == [0, 60, 120]
    assert stripe_points([5], 100) == [5]


@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=30), st.integers(1, 3000))
def test_stripe_points_bound_every_stripe(points: list[int], stripe: int) -> None:
    out = stripe_points(points, stripe)
    assert out[0] == min(points)
    assert out[-1] == max(points)
    assert out == sorted(set(out))
    for a, b in itertools.pairwise(out):
        assert b - a <= stripe


def test_jobs_wait_for_the_end_of_the_period_then_share_a_stripe() -> None:
    s = scheduler("delayed", 2, params={"period_h": 1.0, "stripe_events": 100})
    actions = s.handle(JobArrived(10.0, Job(0, 10.0, IntervalSet.range(0, 100))))
    # The first event's stimulus id; the engine is told the job waits, and until when.
    assert actions == [WakeAt(3600.0, cause=1), JobHeld(0, 10.0, 3600.0, cause=1)]
    held = s.handle(JobArrived(20.0, Job(1, 20.0, IntervalSet.range(0, 100))))
    assert held == [JobHeld(1, 20.0, 3600.0, cause=2)]
    actions = s.handle(Tick(3600.0))
    assert [a for a in actions if isinstance(a, JobReleased)] == [
        JobReleased(0, 3600.0, cause=3),
        JobReleased(1, 3600.0, cause=3),
    ]
    started = [a for a in actions if isinstance(a, Start)]
    # One meta-subjob holds both jobs' subjobs over [0, 100): one node runs them in turn,
    # so the data is read from tertiary storage once.
    assert len(started) == 1
    assert started[0].subjob.job_id == 0
    assert WakeAt(7200.0, cause=3) in actions  # caused by the tick, the third event


def test_the_period_ends_when_no_more_jobs_can_arrive() -> None:
    """A finite jobs file: once its last job is in, the jobs held for the period go at once
    (nothing is left to gather); the period's wake-up, still due, finds nothing to do and
    arms no other."""
    s = scheduler("delayed", 2, params={"period_h": 48.0, "stripe_events": 100})
    s.handle(JobArrived(0.0, Job(0, 0.0, IntervalSet.range(0, 100))))
    s.handle(JobArrived(1.0, Job(1, 1.0, IntervalSet.range(50, 150))))
    actions = s.handle(ArrivalsClosed(1.0))
    assert [a for a in actions if isinstance(a, JobReleased)] == [
        JobReleased(0, 1.0, cause=3),
        JobReleased(1, 1.0, cause=3),
    ]
    assert len([a for a in actions if isinstance(a, Start)]) == 2  # both slots at work
    assert s.jobs[0].released_s == 1.0
    assert not any(isinstance(a, WakeAt) for a in s.handle(Tick(48 * 3600.0)))
    # A job after the close is the engine's error, not a job to hold for ever.
    with pytest.raises(SchedulerError, match="after arrivals were closed"):
        s.handle(JobArrived(2e5, Job(2, 2e5, IntervalSet.range(0, 10))))


def test_a_simulated_finite_workload_is_not_held_for_the_period() -> None:
    """The simulator closes arrivals when asked (as the runtime does): three jobs under a
    48-hour period end in seconds, not after two days; without it, the papers' open
    stream, they wait for the period's end."""
    from datasched.sim.engine import SimEngine

    jobs = [Job(i, float(i), IntervalSet.range(100 * i, 100 * i + 200)) for i in range(3)]
    ends = {}
    for close in (False, True):
        s = scheduler("delayed", 2, params={"period_h": 48.0, "stripe_events": 100})
        run = SimEngine(s).run(jobs, close_arrivals=close)
        ends[close] = max(r.end_s for r in run.jobs)
    assert ends[False] > 48 * 3600.0
    assert ends[True] < 3600.0


def test_waiting_time_is_reported_with_and_without_the_period_delay() -> None:
    from datasched.sim.experiment import SimConfig, simulate

    config = SimConfig(
        policy="delayed",
        policy_params={"period_h": 12.0, "stripe_events": 2000},
        load_jobs_per_h=0.3,
        n_jobs=150,
    )
    summary, run = simulate(config)
    assert summary.mean_wait_excl_delay_s < summary.mean_wait_s
    # Every job waits at least until the end of the period it arrived in.
    for r in run.jobs:
        assert r.released_s >= r.submit_s
        assert r.released_s % (12 * 3600) == 0
    farm, _ = simulate(SimConfig(policy="farm", load_jobs_per_h=0.3, n_jobs=150))
    assert farm.mean_wait_excl_delay_s == farm.mean_wait_s


def test_a_cancelled_jobs_empty_stripe_does_not_hold_up_the_next_job() -> None:
    """Found by the no-stranded-work machine: with every node lost, a job released at once
    (no delay) and then cancelled left an empty stripe at the head of the queue; the node
    that came back took it, ran nothing, and the next job waited for ever."""
    s = scheduler("delayed", 1, params={"period_h": 0.0, "stripe_events": 100})
    node = s.topology.nodes[0]
    s.handle(NodeLost(0.0, 0))
    s.handle(JobArrived(0.0, Job(0, 0.0, IntervalSet.range(0, 50))))
    s.handle(JobCancelled(0.0, 0))
    s.handle(JobArrived(0.0, Job(1, 0.0, IntervalSet.range(0, 50))))
    started = [a for a in s.handle(NodeJoined(1.0, node)) if isinstance(a, Start)]
    assert [a.subjob.job_id for a in started] == [1]
