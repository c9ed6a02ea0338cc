"""Golden traces: a small scenario per policy, events in and actions out, compared line by
line with the stored trace in ``tests/golden/`` (SimPy's habit of asserting exact sequences).

After a deliberate change of behaviour, regenerate with ``DATASCHED_REGEN_GOLDEN=1 pytest
tests/core/test_golden.py`` and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from clusters import scheduler
from datasched.core.actions import Action, Assign, JobCompleted, Preempt, Shrink, Start, WakeAt
from datasched.core.events import (
    Event,
    JobArrived,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.policies import available
from datasched.policies.ponce.adaptive import MapPoint, PerformanceMap
from datasched.sim.engine import SimEngine

GOLDEN = Path(__file__).parent.parent / "golden"
# Parameters scaled to the small scenario, where a policy's defaults would hide its logic.
# Adaptive delay: no delay at the first arrival's measured load, then a short one.
SMALL_MAP = PerformanceMap.of(
    MapPoint(period_h, 100, 0.3, load) for period_h, load in ((0.0, 50.0), (0.25, 200.0))
)
PARAMS: dict[str, dict[str, Any]] = {
    "delayed": {"period_h": 0.25, "stripe_events": 100},
    "adaptive-delay": {"performance_map": SMALL_MAP, "stripe_events": 100, "window_h": 0.1},
    # Packetizers: packets of tens of events, so that the three slots share the jobs.
    "basic-packetizer": {"fraction": 2},
    "adaptive-packetizer": {"calibration_events": 20, "min_packet_s": 5.0, "max_packet_s": 40.0},
}


def ranges(data: IntervalSet) -> str:
    return " ".join(f"[{a},{b})" for a, b in data) or "-"


def fmt_event(ev: Event) -> str:
    t = f"{ev.time:10.1f}"
    if isinstance(ev, JobArrived):
        return f"{t} arrive job {ev.job.job_id} {ranges(ev.job.data)}"
    if isinstance(ev, SubjobFinished):
        return f"{t} finish subjob {ev.subjob_id} on {ev.slot} +cache {ranges(ev.cache_added)}"
    if isinstance(ev, SubjobStopped):
        return f"{t} stopped subjob {ev.subjob_id} on {ev.slot} left {ranges(ev.remaining)}"
    if isinstance(ev, SubjobShrunk):
        return f"{t} shrunk subjob {ev.subjob_id} on {ev.slot} released {ranges(ev.released)}"
    if isinstance(ev, Tick):
        return f"{t} tick"
    return f"{t} {ev!r}"


def fmt_action(a: Action) -> str:
    if isinstance(a, Start):
        sj = a.subjob
        return (
            f"    -> start subjob {sj.subjob_id} of job {sj.job_id} on {a.slot}: "
            f"{ranges(sj.data)} cached_on={sj.cached_on}"
        )
    if isinstance(a, Assign):
        sj = a.subjob
        return (
            f"    -> assign subjob {sj.subjob_id} of job {sj.job_id} to {a.slot}: {ranges(sj.data)}"
        )
    if isinstance(a, Preempt):
        return f"    -> preempt subjob {a.subjob_id} on {a.slot}"
    if isinstance(a, Shrink):
        return f"    -> shrink subjob {a.subjob_id} on {a.slot}: release {ranges(a.release)}"
    if isinstance(a, JobCompleted):
        return f"    -> job {a.job_id} completed"
    if isinstance(a, WakeAt):
        return f"    -> wake at {a.time:.1f}"
    return f"    -> {a!r}"


def scenario_trace(policy: str) -> str:
    """Three nodes, caches of 500 events, five overlapping jobs arriving close together."""
    sched = scheduler(policy, 3, 500, min_subjob=10, params=PARAMS.get(policy, {}))
    lines: list[str] = []
    handle = sched.handle

    def traced(event: Event) -> list[Action]:
        actions = handle(event)
        sched.validate()  # the whole books, after every event (validation must not change them)
        lines.append(fmt_event(event))
        lines.extend(fmt_action(a) for a in actions)
        return actions

    sched.handle = traced  # type: ignore[method-assign]  # wrapped: the test watches each event
    jobs = [
        Job(0, 0.0, IntervalSet.range(0, 300)),
        Job(1, 30.0, IntervalSet.range(200, 400)),
        Job(2, 60.0, IntervalSet.range(1000, 1100)),
        Job(3, 400.0, IntervalSet.range(0, 250)),
        Job(4, 2000.0, IntervalSet.range(150, 350)),
    ]
    SimEngine(sched).run(jobs)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("policy", sorted(available()))
def test_golden_trace(policy: str) -> None:
    path = GOLDEN / f"{policy}.txt"
    got = scenario_trace(policy)
    if os.environ.get("DATASCHED_REGEN_GOLDEN"):
        path.write_text(got)
    assert path.exists(), f"no golden trace for {policy}: regenerate (see module docstring)"
    assert got == path.read_text()
