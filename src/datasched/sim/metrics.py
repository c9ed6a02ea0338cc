"""What a simulation run means: waiting time, processing time, speedup, cache use, overload.

Definitions are those of ponce-hersch §3.4: the *waiting time* runs from submission to the start
of the job's first part; the *processing time* from there to the end of its last part
(suspensions included); the *speedup* is the job's single-node, no-cache, no-pipelining time
over its processing time. Statistics are taken in steady state: jobs of the warm-up and
cool-down are not measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from datasched.core.model import Pipelining, Source
from datasched.sim.recorder import Release, SimRun

__all__ = ["Summary", "is_overloaded", "periodic_overload", "summarise"]


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of one run, as printed by ``datasched sim --json``.

    A figure with nothing to measure is NaN (null in JSON, "not measured" in the tables):
    the waits, processing time and speedup without a measured job that ended, the read
    ratios and tertiary bytes without an event of a measured job read, the utilisation
    without a measured window, the backlog without an arrival in it. A run stopped early
    (``--until``, ``--max-jobs``) may have none of these."""

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
    events_submitted: int = 0
    events_processed: int = 0
    jobs_completed: int = 0
    jobs_failed: int = 0
    node_failures: int = 0
    n_slots: int = 0
    """Processing slots in all (one a node in the paper's cluster)."""
    file_gb: float = 0.0
    """Size of the data space's files, cached whole; 0: any event range is cached."""
    replications: int = 0
    """Hot files copied between node caches beside the policy (``--replicate-hot``)."""
    partial: bool = False
    """The run was stopped before its jobs ended (``--until``, ``--max-jobs``, Ctrl-C): the
    waits, processing times and speedups are of the measured jobs that ended by then; the
    utilisation, read ratios, tertiary bytes and events processed count all work done up
    to the stop, the subjobs still running then included (up to the stop)."""
    stopped_by: str = ""
    """What stopped a partial run: ``until`` (simulated time), ``max_jobs`` or
    ``interrupt`` (Ctrl-C or SIGTERM in ``datasched sim``)."""
    end_s: float = 0.0
    """Simulated time at the end of the run."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SATURATED = 0.98
"""Node utilisation from which a run whose backlog rose counts as overloaded: below
capacity, nodes idle for a fraction 1 - load/capacity of the time, so a cluster busy 98 % of
the time with a rising queue is at its limit (short runs above capacity show it before their
queues have grown enough for the trend tests)."""


MIN_RELEASES = 3
"""Releases of held jobs inside the measured window from which a run is judged on them."""
RELEASE_COVERAGE = 0.5
"""...and the share of the measured jobs those releases must let go (so that adaptive delay,
releasing most jobs on arrival at a period of zero, is judged on its arrivals)."""
RESIDUAL_BATCH_FRACTION = 0.25
"""How far, in mean batches, the residual's floor must rise across the window for a
delaying policy to count as overloaded (see :func:`periodic_overload`)."""
RESIDUAL_JOBS_PER_NODE = 2.0
"""The least rise of that floor, in jobs per node, that counts (small batches)."""


def is_overloaded(run: SimRun, measure: tuple[int, int]) -> bool:
    """Whether the queues grew without bound (ponce-hersch §3.4: "curves are cut ... when
    queues start growing indefinitely").

    A run stopped for a runaway backlog is overloaded. A run that released held jobs at
    period ends (delayed scheduling, adaptive delay with a period) is judged on what each
    release found undone (:func:`periodic_overload`) when at least ``MIN_RELEASES`` releases
    fall in the measured window and let go at least ``RELEASE_COVERAGE`` of its jobs: the
    number of jobs seen by arrivals is then a sawtooth of period-long batches, whose trend
    over a few batches says little. Other runs are judged as follows.

    A run whose nodes were busy at least ``SATURATED`` of the measured time, and whose queue
    was longer in the last third of the window than in the first, is at its limit.
    Otherwise it is judged on the number of jobs in the system seen by each arrival in the
    measured window.
    A stable queue fluctuates around its mean; an unstable one climbs for the whole run. So a
    run is overloaded if the least-squares trend over the window adds more jobs than the
    window holds on average, or if the last third of the window holds 25 % more jobs than
    the middle third (and at least two per node more: small queues are noise). Loads within
    a few per cent of the true limit cannot be told apart in a finite run; the maximal loads
    found this way carry that uncertainty.
    """
    if run.stopped_early:
        return True
    lo, hi = measure
    w0, w1 = run.window
    releases = [r for r in run.releases if w0 <= r.time_s <= w1]
    released = sum(r.released for r in releases)
    if len(releases) >= MIN_RELEASES and released >= RELEASE_COVERAGE * (hi - lo):
        return periodic_overload(releases, run.n_slots or run.n_nodes)
    span = (w1 - w0) * (run.n_slots or run.n_nodes)
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
    nodes = run.n_slots or run.n_nodes  # processing slots: one job each at a time
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


def periodic_overload(releases: Sequence[Release], n_nodes: int) -> bool:
    """Whether a policy that lets held jobs go in batches fell behind, judged on the
    *residual*: the jobs earlier batches left unfinished, seen at each of ``releases`` (in
    time order).

    Counted in work, the residual follows Lindley's recursion ``R' = max(0, R + A - c)``,
    with ``A`` the work of the batch just released and ``c`` what the cluster does in a
    period: a random walk reflected at zero. For a mean batch of ``b`` jobs at utilisation
    ``rho`` its steps have a mean of about ``(rho - 1) b`` and, for a Poisson number of jobs
    of Erlang-4 sizes, a standard deviation ``s`` of about ``sqrt(1.25 b)`` jobs: 5 % of a
    batch of 500 jobs (a week at 3 jobs/h). Counted in jobs, as here, it also counts jobs
    with little left, which widens its swings (a stable run at 93 % utilisation left a fifth
    of a batch undone at one period end, none at the next) but not where it comes back to.

    * Below capacity the walk is recurrent: whatever it reaches in between, it keeps coming
      back to its floor near zero (a batch is done within about a period).
    * Above capacity it is transient: its floor climbs by about ``(rho - 1) b`` a period,
      for good.

    So floors are compared: the run is overloaded when the least residual of the last half
    of the releases exceeds the least of the first half by more than
    ``max(RESIDUAL_BATCH_FRACTION * b, RESIDUAL_JOBS_PER_NODE * nodes)`` (the last residual
    is then at least as high: the backlog did not clear). Floors rather than a least-squares
    trend, because neither a late excursion that clears again nor the sawtooth that batches
    of unequal sizes make (adaptive delay: the residual is high at the short periods after
    a long one, and back to zero at the next long one) is an overload.

    The thresholds. The two floors are about half the releases apart, so over ``K``
    releases an overload raises their difference by ``(rho - 1) b K / 2``: a quarter batch
    flags overloads beyond ``1 + 1 / (2 K)``, under 5 % with the eleven releases or more
    that the performance map's runs hold near the maximal load (``PERIODS_PER_RUN``), a
    little coarser than its bisection. The other way round, at exactly full load (no
    drift) the difference, for a walk started empty, has a standard deviation of 1.3 ``s``
    over twelve releases and exceeds 5 ``s``, a quarter of a 500-job batch, one time in
    eighty (simulated; an eighth of a batch, 2.5 ``s``, one time in nine); the negative
    drift of a stable system only pulls it further down. The floor in jobs per node: at
    any moment about one job per node is being worked on and striping spreads a job over
    several nodes, so a couple of jobs per node left at a release are the tail of a batch,
    not a queue (the arrival-sampled test's floor too); it governs the short periods, whose
    batches are a few tens of jobs.
    """
    if not releases:
        return False
    residual = [r.residual for r in releases]
    batch = sum(r.released for r in releases) / len(releases)
    limit = max(RESIDUAL_BATCH_FRACTION * batch, RESIDUAL_JOBS_PER_NODE * n_nodes)
    half = max(len(residual) // 2, 1)
    return min(residual[-half:]) - min(residual[:half]) > limit


def summarise(
    run: SimRun,
    reference_s_per_event: float,
    *,
    pipeline: Pipelining,
    policy: str,
    load_jobs_per_h: float,
    cache_gb: float,
    measure: tuple[int, int],
    wall_s: float = 0.0,
    file_gb: float = 0.0,
    stopped_by: str = "",
) -> Summary:
    """Steady-state figures of ``run`` over the jobs with index in ``measure``.

    ``stopped_by`` names the bound that stopped the run before its jobs ended ("": none):
    the summary is then partial, and overloaded only if its backlog says so (its unfinished
    jobs are the bound's doing)."""
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
            speedup = n_events * reference_s_per_event / np.maximum(processing, 1e-9)
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
    # A partial run's busy time includes the subjobs running at the stop, up to it
    # (SimEngine.book_running): its utilisation is that of the window up to the stop.
    span = (w1 - w0) * (run.n_slots or run.n_nodes) if lo < hi else 0.0
    backlog = run.backlog[lo:hi]
    return Summary(
        policy=policy,
        load_jobs_per_h=load_jobs_per_h,
        n_nodes=run.n_nodes,
        cache_gb=cache_gb,
        pipeline=pipeline.value,
        jobs_measured=len(done),
        mean_wait_s=mean_wait,
        mean_wait_excl_delay_s=mean_wait_excl,
        median_wait_s=median_wait,
        p95_wait_s=p95_wait,
        max_wait_s=max_wait,
        mean_processing_s=mean_proc,
        mean_speedup=mean_speedup,
        # NaN (null in JSON, "not measured" in tables) where there is nothing to measure:
        # no event of a measured job read, no measured window, no arrival seen in it (a run
        # stopped early, by --until or --max-jobs, before its measured jobs got going).
        cache_hit_ratio=counts[Source.CACHE] / total if total else nan,
        peer_read_ratio=counts[Source.PEER] / total if total else nan,
        tertiary_bytes=run.tertiary_bytes if total or run.tertiary_bytes else nan,
        utilization=run.busy_s / span if span > 0 else nan,
        mean_backlog=float(np.mean(backlog)) if backlog else nan,
        overloaded=is_overloaded(run, measure) or (not stopped_by and len(done) < len(recs)),
        events_handled=run.n_events_handled,
        wall_s=wall_s,
        events_submitted=run.events_submitted,
        events_processed=run.events_processed,
        jobs_completed=run.jobs_completed,
        jobs_failed=run.jobs_failed,
        node_failures=run.node_failures,
        n_slots=run.n_slots,
        file_gb=file_gb,
        partial=bool(stopped_by),
        stopped_by=stopped_by,
        end_s=run.end_s,
    )
