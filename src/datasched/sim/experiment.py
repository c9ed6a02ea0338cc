"""Experiments: one simulation from a config, the maximal sustainable load, load sweeps.

This is the layer the CLI and the reproduction checks call; it wires a workload, a cluster, a
policy and the engine together and summarises the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from datasched.core.data import DataSpace
from datasched.core.hot import HotReplicator
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Pipelining, Topology
from datasched.core.policy import ParamError, metrics_of
from datasched.core.scheduler import Scheduler
from datasched.core.trace import TraceSink
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine, SimRun
from datasched.sim.faults import NodeFaults
from datasched.sim.metrics import Summary, summarise
from datasched.sim.parallel import SchedulerRef, map_in_processes
from datasched.sim.sizes import size_problem
from datasched.sim.workload import JobRecord, WorkloadSpec, generate, load_trace

__all__ = [
    "CONFIRM_FACTOR",
    "ConfigError",
    "MaxLoadSearch",
    "Probe",
    "SimConfig",
    "SimProgress",
    "find_max_load",
    "jobs_from_records",
    "search_max_load",
    "simulate",
    "summary_of",
    "sweep",
]

GB = 1e9


class ConfigError(ValueError):
    """A simulation setting is out of range; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class SimConfig:
    """One simulation: policy, cluster, cost model and workload (ponce-hersch §2.4 defaults:
    10 single-CPU nodes, 600 KB and 0.2 s of CPU per event, tertiary storage at 1 MB/s per
    node, disks at 10 MB/s, a 2 TB data space)."""

    policy: str = "farm"
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    n_nodes: int = 10
    slots: int = 1
    """Processing slots per node (they share the node's cache and its link to storage)."""
    cache_gb: float = 100.0
    load_jobs_per_h: float = 1.0
    n_jobs: int = 2000
    seed: int = 0
    pipelining: Pipelining = Pipelining.NONE
    cost: CostModel = field(default_factory=CostModel)
    bytes_per_event: float = 600e3
    tertiary_bytes_per_s: float = 1e6
    """Each node's bandwidth to tertiary storage."""
    network_bytes_per_s: float = 125e6
    """Each node's link to the cluster network (reads from peers' caches)."""
    data_space_bytes: float = 2e12
    file_gb: float = 0.0
    """0: the data space is one range of events, cached at any grain (ponce-hersch); more:
    files of this size, cached whole."""
    mean_job_events: float = 40_000
    warmup_fraction: float = 0.2
    cooldown_fraction: float = 0.1
    min_subjob_events: int = 10
    max_backlog: int | None = None
    """Stop early, as overloaded, past this many jobs in the system (default: 20 per node,
    plus twice what a delaying policy releases at once)."""
    trace: Path | None = None
    """Replay this trace CSV instead of generating a workload (load and n_jobs then unused)."""
    node_mtbf_h: float | None = None
    """Nodes fail after an exponential time of this mean (None: never)."""
    node_repair_h: float = 1.0
    """A failed node is back, its cache empty, after this long."""
    replicate_hot: int | None = None
    """Replicate files read by this many jobs between node caches, beside the policy
    (:class:`~datasched.core.hot.HotReplicator`; None: off)."""

    def __post_init__(self) -> None:
        positive = {
            "n_nodes": self.n_nodes,
            "slots": self.slots,
            "bytes_per_event": self.bytes_per_event,
            "tertiary_bytes_per_s": self.tertiary_bytes_per_s,
            "network_bytes_per_s": self.network_bytes_per_s,
            "load_jobs_per_h": self.load_jobs_per_h,
            "n_jobs": self.n_jobs,
            "data_space_bytes": self.data_space_bytes,
            "mean_job_events": self.mean_job_events,
            "min_subjob_events": self.min_subjob_events,
        }
        for name, value in positive.items():
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a positive number, got {value!r}")
        for name in ("n_nodes", "slots"):
            if not isinstance(getattr(self, name), int):
                raise ConfigError(name, f"must be a whole number, got {getattr(self, name)!r}")
        too_large = size_problem(self.n_nodes, self.slots, self.n_jobs)
        if too_large is not None:
            raise ConfigError(*too_large)
        if not (math.isfinite(self.cache_gb) and self.cache_gb >= 0):
            raise ConfigError("cache_gb", f"must be zero or positive, got {self.cache_gb!r}")
        if not (math.isfinite(self.file_gb) and self.file_gb >= 0):
            raise ConfigError("file_gb", f"must be zero or positive, got {self.file_gb!r}")
        if self.file_gb and self.file_gb * GB < self.bytes_per_event:
            raise ConfigError("file_gb", "a file must hold at least one event")
        if self.node_mtbf_h is not None:
            self.faults()  # raises naming the field
        for name in ("warmup_fraction", "cooldown_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ConfigError(name, f"must be in [0, 1), got {value!r}")
        if self.warmup_fraction + self.cooldown_fraction >= 1:
            raise ConfigError("warmup_fraction", "warm-up and cool-down leave no job to measure")
        if self.max_backlog is not None and self.max_backlog < 1:
            raise ConfigError("max_backlog", f"must be positive, got {self.max_backlog!r}")
        if self.replicate_hot is not None:
            self.replicator()  # raises naming the field

    def replicator(self) -> HotReplicator | None:
        """The hot-file replicator the run uses beside its policy, if any."""
        if self.replicate_hot is None:
            return None
        try:
            return HotReplicator(self.replicate_hot)
        except ParamError as exc:
            raise ConfigError("replicate_hot", exc.reason) from None

    @property
    def cost_model(self) -> CostModel:
        return replace(self.cost, pipelining=self.pipelining)

    def topology(self) -> Topology:
        return Topology.uniform(
            self.n_nodes,
            self.cache_gb * GB,
            slots=self.slots,
            tertiary_bytes_per_s=self.tertiary_bytes_per_s,
            network_bytes_per_s=self.network_bytes_per_s,
        )

    def space(self, records: Sequence[JobRecord] = ()) -> DataSpace:
        """The data space of the workload (wide enough for every job of ``records``)."""
        n_events = int(self.data_space_bytes // self.bytes_per_event)
        n_events = max([n_events, *(r.stop_event for r in records)])
        file_events = max(int(self.file_gb * GB // self.bytes_per_event), 1) if self.file_gb else 0
        return DataSpace.uniform(n_events, self.bytes_per_event, file_events=file_events)

    def faults(self) -> NodeFaults | None:
        if self.node_mtbf_h is None:
            return None
        try:
            return NodeFaults(self.node_mtbf_h, self.node_repair_h, seed=self.seed)
        except ValueError as exc:
            field_name, _, reason = str(exc).partition(": ")
            raise ConfigError(field_name, reason) from None

    @property
    def reference_s_per_event(self) -> float:
        """A lone job's time per event on one node, no cache, no pipelining (the speedup's
        numerator, ponce-hersch §3.4)."""
        return self.cost.cpu_s_per_event + self.bytes_per_event / self.tertiary_bytes_per_s

    @property
    def fastest_s_per_event(self) -> float:
        """The least time per event any read can take on this cluster."""
        return min(self.topology().rates(0, self.cost_model, self.bytes_per_event))

    def workload(self) -> WorkloadSpec:
        return WorkloadSpec(
            data_space_bytes=self.data_space_bytes,
            bytes_per_event=self.bytes_per_event,
            mean_job_events=self.mean_job_events,
            load_jobs_per_h=self.load_jobs_per_h,
            n_jobs=self.n_jobs,
            seed=self.seed,
        )

    def records(self) -> list[JobRecord]:
        if self.trace is not None:
            return load_trace(self.trace)
        return generate(self.workload())

    def measure(self, n_jobs: int) -> tuple[int, int]:
        """Indices of the jobs whose statistics count (warm-up and cool-down left out)."""
        if n_jobs == 0:
            return (0, 0)
        lo = int(n_jobs * self.warmup_fraction)
        hi = n_jobs - int(n_jobs * self.cooldown_fraction)
        return lo, max(hi, lo + 1)


def jobs_from_records(records: Sequence[JobRecord]) -> list[Job]:
    """Jobs of the core model from workload records (one contiguous segment each)."""
    return [
        Job(
            job_id=r.job_id,
            submit_s=r.submit_s,
            data=IntervalSet.range(r.start_event, r.start_event + r.n_events),
            user=r.user,
        )
        for r in records
    ]


@dataclass(frozen=True, slots=True)
class SimProgress:
    """Where a running simulation stands (what ``datasched sim`` shows while it runs)."""

    sim_s: float
    """Simulated time now (seconds since the start)."""
    jobs_ended: int
    """Jobs completed or failed so far."""
    jobs_total: int
    """Jobs the run goes to: all of the workload's, or ``max_jobs``."""
    until_s: float | None
    """The simulated time the run stops at, if bounded."""
    wall_s: float
    """Wall-clock seconds since the run began."""

    @property
    def fraction(self) -> float:
        """The share of the run done, by whichever bound (jobs, simulated time) is nearer."""
        done = self.jobs_ended / self.jobs_total if self.jobs_total else 1.0
        if self.until_s is not None and self.until_s > 0:
            done = max(done, self.sim_s / self.until_s)
        return min(done, 1.0)

    @property
    def eta_s(self) -> float | None:
        """Wall-clock seconds left at the pace so far (None before anything is done)."""
        f = self.fraction
        if f <= 0:
            return None
        return self.wall_s * (1 - f) / f


PROGRESS_STEPS = 2000
"""Heap entries taken between two looks at the clock and the stopping bounds: a look costs
about what one entry does, so progress and bounds cost under a thousandth of a run."""


def simulate(
    config: SimConfig,
    records: Sequence[JobRecord] | None = None,
    *,
    check_conservation: bool = False,
    validate: bool | None = None,
    trace: TraceSink | None = None,
    until: float | None = None,
    max_jobs: int | None = None,
    on_progress: Callable[[SimProgress], None] | None = None,
    progress_every_s: float = 0.5,
    stop: Callable[[], bool] | None = None,
) -> tuple[Summary, SimRun]:
    """Run one simulation and summarise it. ``validate``: the scheduler checks its books
    after the events (None: as ``DATASCHED_VALIDATE`` says); ``trace`` receives its records
    (events, transitions, actions: :mod:`datasched.core.trace`).

    ``until`` (simulated seconds) and ``max_jobs`` (jobs ended) stop the run early; its
    summary is then ``partial`` (and says which bound stopped it), over the jobs a run of
    the jobs submitted before the bound (or of the first ``max_jobs``) measures, those that
    ended (utilisation and reads: with the work under way up to the stop); judged
    overloaded on its backlog only. ``on_progress`` sees where the run stands every
    ``progress_every_s`` of wall-clock time.

    ``stop`` is asked between two slices of the run (a few milliseconds apart): once it
    answers true, the run stops there as at a bound, ``stopped_by`` "interrupt" (Ctrl-C in
    ``datasched sim``). The scheduler is never cut in the middle of an event, so the partial
    figures are those of a consistent state.
    """
    if until is not None and not (until > 0):
        raise ConfigError("until", f"must be a positive number of seconds, got {until!r}")
    if max_jobs is not None and max_jobs < 1:
        raise ConfigError("max_jobs", f"must be at least 1, got {max_jobs!r}")
    if records is None:
        records = config.records()
    jobs = jobs_from_records(records)
    n_measured = len(jobs)
    if until is not None:
        n_measured = sum(1 for j in jobs if j.submit_s <= until)
    if max_jobs is not None:
        n_measured = min(n_measured, max_jobs)
    policy = build_policy(config.policy, **config.policy_params)
    sched = Scheduler(
        config.topology(),
        config.space(records),
        policy,
        cost=config.cost_model,
        min_subjob_events=config.min_subjob_events,
        replicator=config.replicator(),
        validate=validate,
        trace=trace,
    )
    engine = SimEngine(sched, check_conservation=check_conservation, faults=config.faults())
    measure = config.measure(n_measured)
    max_backlog = config.max_backlog
    if max_backlog is None:
        # 20 jobs per slot, plus what a period releases at once (twice the mean, for
        # Poisson arrivals): delayed scheduling holds a period's jobs and lets them go
        # together.
        batch = 2 * config.load_jobs_per_h * metrics_of(policy).max_delay_s() / 3600
        max_backlog = 20 * config.n_nodes * config.slots + math.ceil(batch)
    t0 = time.perf_counter()
    stopped_by = ""
    if until is None and max_jobs is None and on_progress is None and stop is None:
        run = engine.run(jobs, measure=measure, max_backlog=max_backlog)
    else:
        engine.begin(jobs, measure=measure, max_backlog=max_backlog)
        stopped_by = _advance(
            engine, until, max_jobs, len(jobs), on_progress, progress_every_s, t0, stop
        )
        run = engine.close(partial=bool(stopped_by))  # the work under way counts
    wall = time.perf_counter() - t0
    if sched.validating:
        sched.validate()  # the whole books once more, at the end
    summary = summarise(
        run,
        config.reference_s_per_event,
        pipeline=config.pipelining,
        policy=config.policy,
        load_jobs_per_h=config.load_jobs_per_h,
        cache_gb=config.cache_gb,
        measure=measure,
        wall_s=wall,
        file_gb=config.file_gb,
        stopped_by=stopped_by,
    )
    if sched.replicator is not None:
        summary = replace(summary, replications=sched.replicator.replications)
    return summary, run


def _advance(
    engine: SimEngine,
    until: float | None,
    max_jobs: int | None,
    n_jobs: int,
    on_progress: Callable[[SimProgress], None] | None,
    every_s: float,
    t0: float,
    stop: Callable[[], bool] | None = None,
) -> str:
    """Drive a begun run in slices of :data:`PROGRESS_STEPS` entries, reporting progress
    and stopping at the bounds or when ``stop`` says so; which bound stopped it ("" if it
    ran to its end, "interrupt" if ``stop`` did)."""
    bound = math.inf if until is None else until
    total = n_jobs if max_jobs is None else min(max_jobs, n_jobs)
    last = t0

    def report(now: float) -> None:
        if on_progress is not None:
            on_progress(SimProgress(engine.now, engine.jobs_ended, total, until, now - t0))

    while True:
        if stop is not None and stop():
            report(time.perf_counter())
            return "interrupt"
        steps = PROGRESS_STEPS
        if max_jobs is not None:
            # A heap entry ends at most one job: never step past the max_jobs-th.
            left = max_jobs - engine.jobs_ended
            if left <= 0:
                break
            steps = min(steps, left)
        if engine.proceed(bound, max_steps=steps):
            report(time.perf_counter())
            return ""
        if engine.peek() > bound:
            break
        now = time.perf_counter()
        if now - last >= every_s:
            last = now
            report(now)
    report(time.perf_counter())
    if engine.jobs_ended >= n_jobs:
        return ""  # every job ended; only wake-ups were left past the bound
    if max_jobs is not None and engine.jobs_ended >= max_jobs:
        return "max_jobs"
    return "until"


CONFIRM_FACTOR = 8
"""How many times the jobs of a bisection probe the run that confirms its answer holds: with
4, a farm of 2,000-job probes was reported 2 % above its capacity for one seed in nine;
with 8, for none (README, "What is measured")."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One run of a maximal-load search: its load, its length and the verdict."""

    load_jobs_per_h: float
    n_jobs: int
    overloaded: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class MaxLoadSearch:
    """What :func:`search_max_load` found: the bracket of the maximal load, and every probe.

    ``highest_sustained_jobs_per_h`` is the highest load judged sustained (by a run of
    ``confirm_jobs`` jobs when confirmation is on) and ``lowest_overloaded_jobs_per_h`` the
    lowest judged overloaded, by a run of either length; either is ``None`` when no probe
    found one. ``max_load_jobs_per_h`` is the answer: the highest sustained load, 0 if none.
    """

    max_load_jobs_per_h: float
    highest_sustained_jobs_per_h: float | None
    lowest_overloaded_jobs_per_h: float | None
    n_jobs: int
    confirm_jobs: int
    probes: tuple[Probe, ...]


def search_max_load(
    config: SimConfig,
    *,
    lo: float = 0.05,
    hi: float | None = None,
    first: float | None = None,
    rel_tol: float = 0.02,
    confirm_factor: int = CONFIRM_FACTOR,
    on_step: Callable[[Probe], None] | None = None,
) -> MaxLoadSearch:
    """The largest load (jobs/h) the policy sustains without overload: bisection with runs of
    ``config.n_jobs`` jobs, its answer confirmed by a run ``confirm_factor`` times as long.

    Every probe uses the same seed, so loads are compared on common random numbers (the
    same job sizes and start points, arrivals scaled; a longer run extends the sizes and
    arrivals of a shorter one). ``hi`` defaults to twice the theoretical maximal load of the
    cluster (ponce-hersch §3.4), which no policy sustains.

    Why confirm: a finite run cannot tell a load a few per cent above capacity from one just
    below. Its sample of jobs carries a few per cent more or less work than the nominal load
    (the measured 1,600 of 2,000 jobs: about 3 %, one standard deviation), and near capacity
    the queue is a random walk with almost no drift, which over a short window ends lower
    than it began about as often as higher. So bisection with short runs can settle on a
    load a few per cent above capacity (the farm's, 3 to 4 % above at seed 0: docs/metrics.md).
    A run
    ``confirm_factor`` times as long cuts both kinds of noise by ``sqrt(confirm_factor)``
    and lets a small overload build a queue ``confirm_factor`` times longer. If it finds the
    bisection's answer overloaded, the search goes on below it with long runs only, from the
    highest load a short run found sustained below it (confirmed in its turn before it is
    reported). ``confirm_factor=1`` reports the bisection's answer unconfirmed.
    ``on_step`` sees every probe as it finishes.

    ``lo`` is taken as sustained and run only if the search comes back down to it (no load
    above it sustained): it only ever told a search that sustains nothing to stop, so a
    search with an answer above it spares that run (a full-length one, as costly as any
    sustained probe) and gives the same answer. ``first``, between ``lo`` and ``hi``, is the
    load run first, where a caller knows roughly where the answer lies (default: the
    bisection's first midpoint): the bisection goes on above it if it is sustained, below it
    if not, to the same ``rel_tol``.
    """
    if confirm_factor < 1:
        raise ConfigError("confirm_factor", f"must be at least 1, got {confirm_factor!r}")
    if hi is None:
        best_s = config.fastest_s_per_event
        hi = 2 * 3600 * config.n_nodes * config.slots / (config.mean_job_events * best_s)
    if first is not None and not lo < first < hi:
        raise ConfigError("first", f"must lie between lo ({lo:g}) and hi ({hi:g}), got {first!r}")
    short = config.n_jobs
    long = short * confirm_factor
    probes: list[Probe] = []

    def overloaded(load: float, n_jobs: int) -> bool:
        summary, _ = simulate(replace(config, load_jobs_per_h=load, n_jobs=n_jobs))
        probe = Probe(load, n_jobs, summary.overloaded)
        probes.append(probe)
        if on_step is not None:
            on_step(probe)
        return probe.overloaded

    def result(best: float | None) -> MaxLoadSearch:
        over = [p.load_jobs_per_h for p in probes if p.overloaded]
        return MaxLoadSearch(
            max_load_jobs_per_h=0.0 if best is None else best,
            highest_sustained_jobs_per_h=best,
            lowest_overloaded_jobs_per_h=min(over) if over else None,
            n_jobs=short,
            confirm_jobs=long,
            probes=tuple(probes),
        )

    floor, floor_run = lo, False
    # Loads found sustained (``lo`` until run: see above), in the order found (each above the
    # last), and those a run of the long length found so.
    sustained: list[float] = [lo]
    confirmed: set[float] = set()
    n_jobs = short

    def narrow(load: float) -> None:
        """Run ``load`` at the current length and move the bracket's end it falls on."""
        nonlocal lo, hi
        if overloaded(load, n_jobs):
            hi = load
        else:
            lo = load
            sustained.append(load)
            if n_jobs == long:
                confirmed.add(load)

    if first is not None:
        narrow(first)
    while True:
        while hi - lo > rel_tol * lo:
            narrow(math.sqrt(lo * hi) if hi / lo > 4 else (lo + hi) / 2)
        if lo == floor and not floor_run:
            # Nothing above the lowest load sustained: only now does it need a run.
            floor_run = True
            if overloaded(lo, n_jobs):
                return result(None)
            if n_jobs == long:
                confirmed.add(lo)
        if lo in confirmed or not overloaded(lo, long):
            return result(lo)
        # The long run saw an overload: search below, from the next load found sustained.
        hi = lo
        below = [load for load in sustained if load < hi]
        if not below:
            return result(None)
        lo = below[-1]
        n_jobs = long


def find_max_load(
    config: SimConfig,
    *,
    lo: float = 0.05,
    hi: float | None = None,
    first: float | None = None,
    rel_tol: float = 0.02,
    confirm_factor: int = CONFIRM_FACTOR,
    on_step: Callable[[Probe], None] | None = None,
) -> float:
    """:func:`search_max_load`'s answer alone: the largest sustained load (jobs/h), 0 if none."""
    found = search_max_load(
        config,
        lo=lo,
        hi=hi,
        first=first,
        rel_tol=rel_tol,
        confirm_factor=confirm_factor,
        on_step=on_step,
    )
    return found.max_load_jobs_per_h


def summary_of(config: SimConfig) -> Summary:
    """:func:`simulate`'s summary alone (what a worker process sends back)."""
    return simulate(config)[0]


def sweep(
    configs: Sequence[SimConfig],
    *,
    on_result: Callable[[Summary], None] | None = None,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
    on_done: Callable[[int, Summary], None] | None = None,
) -> list[Summary]:
    """Simulate each config in up to ``processes`` processes or on the Dask cluster at
    ``scheduler`` (:func:`map_in_processes`): the summaries in ``configs``' order, the same
    however run, each seen by ``on_result(summary)`` and ``on_done(index, summary)`` on arrival."""

    def done(i: int, summary: Summary) -> None:
        if on_done is not None:
            on_done(i, summary)
        if on_result is not None:
            on_result(summary)

    return map_in_processes(
        summary_of, configs, processes=processes, scheduler=scheduler, on_done=done
    )
