"""Experiments: one simulation from a config, the maximal sustainable load, load sweeps.

This is the layer the CLI and the reproduction checks call; it wires a workload, a cluster, a
policy and the engine together and summarises the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, CostModel, Job, Pipelining, Source
from datasched.core.scheduler import Scheduler
from datasched.policies import make_policy
from datasched.sim.engine import SimEngine, SimRun
from datasched.sim.metrics import Summary, summarise
from datasched.sim.parallel import map_in_processes
from datasched.sim.perfmap import with_default_map
from datasched.sim.workload import JobRecord, WorkloadSpec, generate, load_trace

__all__ = [
    "ConfigError",
    "SimConfig",
    "find_max_load",
    "jobs_from_records",
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
    """One simulation: policy, cluster, cost model and workload (ponce-hersch §2.4 defaults)."""

    policy: str = "farm"
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    n_nodes: int = 10
    cache_gb: float = 100.0
    load_jobs_per_h: float = 1.0
    n_jobs: int = 2000
    seed: int = 0
    pipelining: Pipelining = Pipelining.NONE
    cost: CostModel = field(default_factory=CostModel)
    data_space_bytes: float = 2e12
    mean_job_events: float = 40_000
    warmup_fraction: float = 0.2
    cooldown_fraction: float = 0.1
    min_subjob_events: int = 10
    max_backlog: int | None = None
    """Stop early, as overloaded, past this many jobs in the system (default: 20 per node,
    plus twice what a delaying policy releases at once)."""
    trace: Path | None = None
    """Replay this trace CSV instead of generating a workload (load and n_jobs then unused)."""

    def __post_init__(self) -> None:
        positive = {
            "n_nodes": self.n_nodes,
            "load_jobs_per_h": self.load_jobs_per_h,
            "n_jobs": self.n_jobs,
            "data_space_bytes": self.data_space_bytes,
            "mean_job_events": self.mean_job_events,
            "min_subjob_events": self.min_subjob_events,
        }
        for name, value in positive.items():
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a positive number, got {value!r}")
        if not (math.isfinite(self.cache_gb) and self.cache_gb >= 0):
            raise ConfigError("cache_gb", f"must be zero or positive, got {self.cache_gb!r}")
        for name in ("warmup_fraction", "cooldown_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ConfigError(name, f"must be in [0, 1), got {value!r}")
        if self.warmup_fraction + self.cooldown_fraction >= 1:
            raise ConfigError("warmup_fraction", "warm-up and cool-down leave no job to measure")
        if self.max_backlog is not None and self.max_backlog < 1:
            raise ConfigError("max_backlog", f"must be positive, got {self.max_backlog!r}")

    @property
    def cost_model(self) -> CostModel:
        return replace(self.cost, pipelining=self.pipelining)

    def cluster(self) -> ClusterSpec:
        return ClusterSpec.uniform(self.n_nodes, self.cache_gb * GB, self.cost_model)

    def workload(self) -> WorkloadSpec:
        return WorkloadSpec(
            data_space_bytes=self.data_space_bytes,
            bytes_per_event=self.cost.bytes_per_event,
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


def simulate(
    config: SimConfig,
    records: Sequence[JobRecord] | None = None,
    *,
    check_conservation: bool = False,
) -> tuple[Summary, SimRun]:
    """Run one simulation and summarise it."""
    if records is None:
        records = config.records()
    jobs = jobs_from_records(records)
    cluster = config.cluster()
    policy = make_policy(config.policy, **with_default_map(config.policy, config.policy_params))
    sched = Scheduler(cluster, policy, min_subjob_events=config.min_subjob_events)
    engine = SimEngine(cluster, sched, check_conservation=check_conservation)
    measure = config.measure(len(jobs))
    max_backlog = config.max_backlog
    if max_backlog is None:
        # 20 jobs per node, plus what a period releases at once (twice the mean, for
        # Poisson arrivals): delayed scheduling holds a period's jobs and lets them go
        # together.
        batch = 2 * config.load_jobs_per_h * policy.max_delay_s() / 3600
        max_backlog = 20 * config.n_nodes + math.ceil(batch)
    t0 = time.perf_counter()
    run = engine.run(jobs, measure=measure, max_backlog=max_backlog)
    wall = time.perf_counter() - t0
    summary = summarise(
        run,
        cluster.cost,
        policy=config.policy,
        load_jobs_per_h=config.load_jobs_per_h,
        cache_gb=config.cache_gb,
        measure=measure,
        wall_s=wall,
    )
    return summary, run


def find_max_load(
    config: SimConfig,
    *,
    lo: float = 0.05,
    hi: float | None = None,
    rel_tol: float = 0.02,
    on_step: Callable[[float, bool], None] | None = None,
) -> float:
    """The largest load (jobs/h) the policy sustains without overload, by bisection.

    Every probe uses the same seed, so loads are compared on common random numbers (the
    same job sizes and start points, arrivals scaled). ``hi`` defaults to twice the
    theoretical maximal load of the cluster (ponce-hersch §3.4), which no policy sustains.
    """
    cost = config.cost_model
    if hi is None:
        best_s = min(cost.s_per_event(src) for src in Source)
        hi = 2 * 3600 * config.n_nodes / (config.mean_job_events * best_s)

    def overloaded(load: float) -> bool:
        summary, _ = simulate(replace(config, load_jobs_per_h=load))
        if on_step is not None:
            on_step(load, summary.overloaded)
        return summary.overloaded

    if overloaded(lo):
        return 0.0
    while hi - lo > rel_tol * lo:
        mid = math.sqrt(lo * hi) if hi / lo > 4 else (lo + hi) / 2
        if overloaded(mid):
            hi = mid
        else:
            lo = mid
    return lo


def summary_of(config: SimConfig) -> Summary:
    """:func:`simulate`'s summary alone (what a worker process sends back)."""
    return simulate(config)[0]


def sweep(
    configs: Sequence[SimConfig],
    *,
    on_result: Callable[[Summary], None] | None = None,
    processes: int = 1,
    scheduler: str | None = None,
) -> list[Summary]:
    """Simulate each config, in up to ``processes`` worker processes or on the Dask cluster
    whose scheduler is at ``scheduler`` (see :func:`map_in_processes`); the summaries come back
    in the order of ``configs`` and are the same for any number of processes and on any
    cluster (``on_result`` sees each as it arrives and drives the CLI's progress bar)."""

    def done(_: int, summary: Summary) -> None:
        if on_result is not None:
            on_result(summary)

    return map_in_processes(
        summary_of, configs, processes=processes, scheduler=scheduler, on_done=done
    )
