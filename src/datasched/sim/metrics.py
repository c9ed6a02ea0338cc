"""What a simulation run means: waiting time, processing time, speedup, cache use, overload.

Definitions are those of ponce-hersch §3.4: the *waiting time* runs from submission to the start
of the job's first part; the *processing time* from there to the end of its last part
(suspensions included); the *speedup* is the job's single-node, no-cache, no-pipelining time
over its processing time. Statistics are taken in steady state: jobs of the warm-up and
cool-down are not measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from datasched.core.model import CostModel, Source
from datasched.sim.engine import SimRun

__all__ = ["Summary", "is_overloaded", "summarise"]


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of one run, as printed by ``datasched sim --json``."""

    policy: str
    load_jobs_per_h: float
    n_nodes: int
    cache_gb: float
    pipeline: str
    jobs_measured: int
    mean_wait_s: float
    mean_wait_excl_delay_s: float
    """Mean wait from the end of the job's period, not its submission (delayed scheduling;
    the paper's figures 7-9 show this one). Equal to ``mean_wait_s`` for other policies."""
    median_wait_s: float
    p95_wait_s: float
    max_wait_s: float
    mean_processing_s: float
    mean_speedup: float
    cache_hit_ratio: float
    peer_read_ratio: float
    tertiary_bytes: float
    utilization: float
    mean_backlog: float
    overloaded: bool
    events_handled: int
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SATURATED = 0.98
"""Node utilisation from which a run whose backlog rose counts as overloaded: below
capacity, nodes idle for a fraction 1 - load/capacity of the time, so a cluster busy 98 % of
the time with a rising queue is at its limit (short runs above capacity show it before their
queues have grown enough for the trend tests)."""


def is_overloaded(run: SimRun, measure: tuple[int, int]) -> bool:
    """Whether the queues grew without bound (ponce-hersch §3.4: "curves are cut ... when
    queues start growing indefinitely").

    A run whose nodes were busy at least ``SATURATED`` of the measured time, and whose queue
    was longer in the last third of the window than in the first, is at its limit.
    Otherwise it is judged on the number of jobs in the system seen by each arrival in the
    measured window.
    A stable queue fluctuates around its mean; an unstable one climbs for the whole run. So a
    run is overloaded if it was stopped for a runaway backlog, if the least-squares trend over
    the window adds more jobs than the window holds on average, or if the last third of the
    window holds 25 % more jobs than the middle third (and at least two per node more: small
    queues are noise). Loads within a few per cent of the true limit cannot be told apart in
    a finite run; the maximal loads found this way carry that uncertainty.
    """
    if run.stopped_early:
        return True
    lo, hi = measure
    w0, w1 = run.window
    span = (w1 - w0) * run.n_nodes
    window = run.backlog[lo:hi]
    if span > 0 and run.busy_s / span >= SATURATED and len(window) >= 6:
        third = len(window) // 3
        if sum(window[-third:]) > sum(window[:third]):
            return True
    samples = np.asarray(run.backlog[lo:hi], dtype=float)
    if samples.size < 30:
        return False
    x = np.arange(samples.size, dtype=float)
    slope = float(np.polyfit(x, samples, 1)[0])
    nodes = run.n_nodes
    if slope * samples.size > max(float(samples.mean()), 3.0 * nodes):
        return True
    # From the empty start: an unstable queue climbs steadily, third after third.
    whole = np.asarray(run.backlog[:hi], dtype=float)
    third = whole.size // 3
    m1 = float(whole[:third].mean())
    m2 = float(whole[third : 2 * third].mean())
    m3 = float(whole[2 * third :].mean())
    step = max(2.0 * nodes, 0.02 * third)
    return m3 - m1 > 2 * step and m3 > m2 > m1


def summarise(
    run: SimRun,
    cost: CostModel,
    *,
    policy: str,
    load_jobs_per_h: float,
    cache_gb: float,
    measure: tuple[int, int],
    wall_s: float = 0.0,
) -> Summary:
    """Steady-state figures of ``run`` over the jobs with index in ``measure``."""
    lo, hi = measure
    recs = sorted(run.jobs, key=lambda r: (r.submit_s, r.job_id))[lo:hi]
    done = [r for r in recs if r.end_s >= 0]
    nan = float("nan")
    if done:
        submit = np.array([r.submit_s for r in done])
        first = np.array([r.first_start_s for r in done])
        end = np.array([r.end_s for r in done])
        n_events = np.array([r.n_events for r in done], dtype=float)
        wait = first - submit
        released = np.array([r.released_s if r.released_s >= 0 else r.submit_s for r in done])
        mean_wait_excl = float((first - released).mean())
        processing = end - first
        with np.errstate(divide="ignore"):
            speedup = n_events * cost.reference_s_per_event / np.maximum(processing, 1e-9)
        mean_wait = float(wait.mean())
        median_wait = float(np.median(wait))
        p95_wait = float(np.percentile(wait, 95))
        max_wait = float(wait.max())
        mean_proc = float(processing.mean())
        mean_speedup = float(speedup.mean())
    else:
        mean_wait = median_wait = p95_wait = max_wait = mean_proc = mean_speedup = nan
        mean_wait_excl = nan
    counts = run.measured_events_by_source
    total = sum(counts)
    w0, w1 = run.window
    span = (w1 - w0) * run.n_nodes
    backlog = run.backlog[lo:hi]
    return Summary(
        policy=policy,
        load_jobs_per_h=load_jobs_per_h,
        n_nodes=run.n_nodes,
        cache_gb=cache_gb,
        pipeline=cost.pipelining.value,
        jobs_measured=len(done),
        mean_wait_s=mean_wait,
        mean_wait_excl_delay_s=mean_wait_excl,
        median_wait_s=median_wait,
        p95_wait_s=p95_wait,
        max_wait_s=max_wait,
        mean_processing_s=mean_proc,
        mean_speedup=mean_speedup,
        cache_hit_ratio=counts[Source.CACHE] / total if total else 0.0,
        peer_read_ratio=counts[Source.PEER] / total if total else 0.0,
        tertiary_bytes=counts[Source.TERTIARY] * cost.bytes_per_event,
        utilization=run.busy_s / span if span > 0 else 0.0,
        mean_backlog=float(np.mean(backlog)) if backlog else 0.0,
        overloaded=is_overloaded(run, measure) or len(done) < len(recs),
        events_handled=run.n_events_handled,
        wall_s=wall_s,
    )
