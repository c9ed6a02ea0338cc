"""The experiments of romosan (co-scheduling data movement with computation) on the simulator.

The paper gives no cluster parameters beyond 20 GB of disk cache per node: every value we
chose is in :class:`RomosanCluster`, in one place, and the report prints it. The experiments'
sizes are a :class:`RomosanStudy` (:data:`FULL` as the paper ran them; :data:`QUICK` and
:data:`SMOKE` smaller). Four experiments, as the paper's figures:

* ``servers``: 10,000 jobs over 100 files on 1 to 32 servers, each policy: local and remote
  copies, server utilisation, makespan, scheduler time;
* ``edges``: 10,000 queued jobs needing every one of 2 K to 64 K files, 32 servers: the time of
  one batch of the min-cost flow against the number of file-to-server edges (the paper's LP
  could not run at 8 K x 32);
* ``zipf``: 1,000 jobs, files chosen by Zipf's law, a small and an infinite cache;
* ``delays``: the min-cost flow solved every 0 s to several minutes: scheduler time, local
  copies.

All jobs of a run are submitted together, at time 0: the paper schedules "a collection of
jobs" and measures its makespan. Each job needs one file, drawn uniformly (or by Zipf's law)
with a fixed seed; the edges experiment's jobs need several (see :func:`edge_point`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from datasched.core.data import DataSpace, FileSpec
from datasched.core.events import JobArrived, Tick
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Link, Node, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy, get_policy
from datasched.policies.cosched.flow import MinCostFlow
from datasched.policies.cosched.mincostflow import solve
from datasched.sim.engine import SimEngine

__all__ = [
    "CLUSTER",
    "FIFO",
    "FULL",
    "LP",
    "POLICIES",
    "QUICK",
    "SJF",
    "SMOKE",
    "CoschedRun",
    "EdgePoint",
    "RomosanCluster",
    "RomosanStudy",
    "RunResult",
    "edge_point",
    "run_one",
    "study_runs",
]

FIFO, SJF, LP = "fifo-roundrobin", "sjf-data", "mincostflow"
POLICIES = (FIFO, SJF, LP)
"""The paper's three policies by their registered names; the delays experiment spaces out
the batches of the last (LP)."""


@dataclass(frozen=True)
class RomosanCluster:
    """The cluster of the reproduction: every parameter the paper leaves open, chosen here."""

    slots: int = 2
    """Compute slots a server ("one or more compute slots")."""
    cache_gb: float = 20.0
    """The paper's one number: "20GB disk cache ... per node"."""
    file_gb: float = 1.0
    """Every file's size: 100 files are 100 GB, five times one server's cache."""
    events_per_file: int = 1000
    cpu_s_per_event: float = 0.1
    """A job (one file) computes 100 s on average..."""
    cpu_spread: float = 0.5
    """...each between 50 % and 150 % of that (uniformly)."""
    disk_mb_s: float = 100.0
    """...and reads its file from the local cache in 10 s."""
    archive_mb_s: float = 100.0
    """The archive's bandwidth, shared by every remote copy at once: 10 s a file alone."""
    network_mb_s: float = 125.0
    """Each server's link to the local network (1 Gb/s), shared by its copies in and out."""
    local_cost: float = 1.0
    """l: the cost of a local copy per byte (the paper's example)."""
    remote_cost: float = 10.0
    """r: the cost of a remote copy per byte (the paper's example)."""

    def describe(self) -> list[tuple[str, str]]:
        """(parameter, value) rows for the report."""
        return [
            ("compute slots a server", f"{self.slots}"),
            ("disk cache a server", f"{self.cache_gb:g} GB (the paper's)"),
            ("file size", f"{self.file_gb:g} GB ({self.events_per_file} events)"),
            (
                "computation a job",
                f"{self.cpu_s_per_event * self.events_per_file:g} s on average, uniform "
                f"within ±{self.cpu_spread:.0%}",
            ),
            ("reading a cached file", f"{self.file_gb * 1e3 / self.disk_mb_s:g} s"),
            ("archive bandwidth, shared by all remote copies", f"{self.archive_mb_s:g} MB/s"),
            ("each server's network link, shared by its copies", f"{self.network_mb_s:g} MB/s"),
            (
                "cost of a local copy l, of a remote copy r",
                f"{self.local_cost:g}, {self.remote_cost:g}",
            ),
            ("cache replacement", "least recently used unpinned file"),
            ("submission", "every job at time 0 (a collection of jobs)"),
        ]


CLUSTER = RomosanCluster()


@dataclass(frozen=True)
class RomosanStudy:
    """The sizes of the reproduction's experiments."""

    jobs: int = 10_000
    files: int = 100
    servers: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    claims_servers: int = 8
    """Where the claims comparing the policies are read (the issue's choice: 8 servers)."""
    zipf_jobs: int = 1_000
    zipf_exponent: float = 1.0
    small_cache_gb: float = 4.0
    infinite_cache_gb: float = 1e6
    """Larger than all the data: nothing is ever evicted."""
    edge_files: tuple[int, ...] = (2048, 4096, 8192, 16384, 32768, 65536)
    edge_servers: int = 32
    edge_jobs: int = 10_000
    periods_s: tuple[float, ...] = (0.0, 30.0, 60.0, 120.0, 300.0, 600.0)
    delay_servers: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    seed: int = 0


FULL = RomosanStudy()
QUICK = RomosanStudy(
    jobs=2_000,
    servers=(1, 2, 8, 32),
    edge_files=(2048, 8192, 65536),
    periods_s=(0.0, 60.0, 300.0),
    delay_servers=(2, 8, 32),
)
SMOKE = RomosanStudy(
    jobs=300,
    servers=(1, 2, 8, 32),
    zipf_jobs=150,
    edge_files=(2048, 65536),
    edge_jobs=2_000,
    periods_s=(0.0, 300.0),
    delay_servers=(8,),
)


@dataclass(frozen=True)
class CoschedRun:
    """One simulation of the reproduction."""

    experiment: str
    policy: str
    servers: int
    jobs: int
    files: int
    cache_gb: float
    popularity: str = "uniform"
    zipf_exponent: float = 1.0
    lp_period_s: float = 0.0
    seed: int = 0
    cluster: RomosanCluster = CLUSTER


@dataclass(frozen=True)
class RunResult:
    """What one run measured."""

    experiment: str
    policy: str
    servers: int
    files: int
    cache_gb: float
    lp_period_s: float
    jobs_completed: int
    local_copies: int
    remote_copies: int
    utilization: float
    makespan_h: float
    scheduler_s: float
    batches: int
    wall_s: float

    @property
    def copies(self) -> int:
        return self.local_copies + self.remote_copies

    def row(self) -> dict[str, Any]:
        return asdict(self)


def file_space(n_files: int, cluster: RomosanCluster) -> DataSpace:
    """``n_files`` files of the cluster's size, cached whole."""
    space = DataSpace()
    n_bytes = round(cluster.file_gb * 1e9)
    space.add_dataset(
        "romosan",
        [FileSpec(f"file{i:06d}", cluster.events_per_file, n_bytes) for i in range(n_files)],
    )
    return space


def scheduler_for(
    servers: int,
    space: DataSpace,
    policy: str,
    params: dict[str, Any],
    cluster: RomosanCluster,
    cache_gb: float,
) -> Scheduler:
    """The cluster's servers around one archive link, and the policy, built by name."""
    nodes = tuple(
        Node(
            i,
            cache_gb * 1e9,
            slots=cluster.slots,
            tertiary_bytes_per_s=None,
            network_bytes_per_s=cluster.network_mb_s * 1e6,
        )
        for i in range(servers)
    )
    topology = Topology(nodes, links=(Link("site:site0", "tertiary", cluster.archive_mb_s * 1e6),))
    cost = CostModel(
        cpu_s_per_event=cluster.cpu_s_per_event, disk_bytes_per_s=cluster.disk_mb_s * 1e6
    )
    return Scheduler(topology, space, build_policy(policy, **params), cost=cost)


def policy_params(policy: str, run: CoschedRun) -> dict[str, Any]:
    """The policy's parameters for ``run``: the cluster's costs, and the LP's period, for the
    policies that declare them."""
    declared = {p.name for p in get_policy(policy).params}
    values = {
        "local_cost": run.cluster.local_cost,
        "remote_cost": run.cluster.remote_cost,
        "lp_period_s": run.lp_period_s,
    }
    return {k: v for k, v in values.items() if k in declared}


def workload(run: CoschedRun, space: DataSpace) -> list[Job]:
    """``run.jobs`` jobs at time 0, each needing one file (uniform, or by Zipf's law) and
    computing for the cluster's mean time times a factor drawn uniformly from
    ``[1 - spread, 1 + spread]`` (jobs of one length would start and end in lockstep)."""
    rng = np.random.default_rng(run.seed)
    if run.popularity == "zipf":
        ranks = np.arange(1, run.files + 1, dtype=np.float64)
        weights = ranks**-run.zipf_exponent
        picks = rng.choice(run.files, size=run.jobs, p=weights / weights.sum())
    else:
        picks = rng.integers(0, run.files, run.jobs)
    spread = run.cluster.cpu_spread
    cpu = run.cluster.cpu_s_per_event * rng.uniform(1 - spread, 1 + spread, run.jobs)
    files = space.files
    return [
        Job(i, 0.0, files[int(f)].events, cpu_s_per_event=float(c), files_local=True)
        for i, (f, c) in enumerate(zip(picks, cpu, strict=True))
    ]


def run_one(run: CoschedRun) -> RunResult:
    """Simulate ``run`` to the end of its last job."""
    t0 = time.perf_counter()
    space = file_space(run.files, run.cluster)
    sched = scheduler_for(
        run.servers, space, run.policy, policy_params(run.policy, run), run.cluster, run.cache_gb
    )
    result = SimEngine(sched).run(workload(run, space))
    counters = result.policy_counters
    makespan = result.end_s
    return RunResult(
        experiment=run.experiment,
        policy=run.policy,
        servers=run.servers,
        files=run.files,
        cache_gb=run.cache_gb,
        lp_period_s=run.lp_period_s,
        jobs_completed=result.jobs_completed,
        local_copies=counters.get("local_copies", 0),
        remote_copies=counters.get("remote_copies", 0),
        utilization=result.busy_s / (result.n_slots * makespan) if makespan > 0 else 0.0,
        makespan_h=makespan / 3600,
        scheduler_s=result.scheduler_s,
        batches=counters.get("batches", 0),
        wall_s=time.perf_counter() - t0,
    )


def study_runs(study: RomosanStudy, cluster: RomosanCluster = CLUSTER) -> list[CoschedRun]:
    """Every simulation of the servers, zipf and delays experiments."""
    runs: list[CoschedRun] = []
    base = CoschedRun(
        "servers",
        "",
        1,
        study.jobs,
        study.files,
        cluster.cache_gb,
        seed=study.seed,
        cluster=cluster,
    )
    for servers in study.servers:
        for policy in POLICIES:
            runs.append(replace(base, policy=policy, servers=servers))
    zipf = replace(
        base,
        experiment="zipf",
        jobs=study.zipf_jobs,
        popularity="zipf",
        zipf_exponent=study.zipf_exponent,
    )
    for cache in (study.small_cache_gb, study.infinite_cache_gb):
        for servers in study.servers:
            for policy in POLICIES:
                runs.append(replace(zipf, policy=policy, servers=servers, cache_gb=cache))
    delays = replace(base, experiment="delays", policy=LP)
    for period in study.periods_s:
        if period == 0:
            continue  # the servers experiment's mincostflow runs
        for servers in study.delay_servers:
            runs.append(replace(delays, servers=servers, lp_period_s=period))
    return runs


@dataclass(frozen=True)
class EdgePoint:
    """One batch of the min-cost flow with every file of the data space wanted."""

    files: int
    servers: int
    edges: int
    """File-to-server edges of the paper's network (files x servers)."""
    jobs: int
    build_s: float
    """Building the network from the scheduler's state."""
    solve_s: float
    """Solving it (grouped network, the policy's default)."""
    solve_full_s: float
    """Solving the paper's full network (NaN where skipped)."""
    batch_s: float
    """The whole batch as the scheduler runs it: build, solve, place the jobs."""
    grouped_edges: int
    objective: float

    def row(self) -> dict[str, Any]:
        return asdict(self)


def edge_point(
    n_files: int,
    study: RomosanStudy,
    cluster: RomosanCluster = CLUSTER,
    *,
    full: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> EdgePoint:
    """Time one batch with ``study.edge_jobs`` queued jobs needing all ``n_files`` files on
    ``study.edge_servers`` empty servers. Job ``i`` needs files i, i + J, i + 2J, ... (J the
    number of jobs), so that every file is wanted (by J / n_files jobs each when there are
    fewer files than jobs); the paper's network then has n_files x servers edges."""
    space = file_space(n_files, cluster)
    n_jobs = study.edge_jobs
    sched = scheduler_for(
        study.edge_servers,
        space,
        LP,
        {"lp_period_s": 3600.0},
        cluster,
        cluster.cache_gb,
    )
    policy = sched.policy
    assert isinstance(policy, MinCostFlow)
    files = space.files
    for i in range(n_jobs):
        wanted = range(i % n_files, n_files, n_jobs) if n_files > n_jobs else [i % n_files]
        data = IntervalSet.from_sorted((files[f].start, files[f].stop) for f in wanted)
        sched.handle(JobArrived(0.0, Job(i, 0.0, data, files_local=True)))
    caps = policy.capacities(sched)
    t0 = clock()
    batch, _, _ = policy.batch(sched, caps)
    t1 = clock()
    result = solve(batch, "grouped")
    t2 = clock()
    solve_full = float("nan")
    if full:
        solve(batch, "full")
        solve_full = clock() - t2
    n_classes = len(set(batch.free.tolist()))
    t3 = clock()
    sched.handle(Tick(0.0))
    batch_s = clock() - t3
    return EdgePoint(
        files=n_files,
        servers=study.edge_servers,
        edges=batch.n_files * batch.n_servers,
        jobs=n_jobs,
        build_s=t1 - t0,
        solve_s=t2 - t1,
        solve_full_s=solve_full,
        batch_s=batch_s,
        grouped_edges=batch.n_files * n_classes + len(batch.zero_idx) + batch.n_servers,
        objective=result.objective,
    )


def by_key(results: Sequence[RunResult]) -> dict[tuple[str, str, int, float, float], RunResult]:
    """Results by (experiment, policy, servers, cache GB, period)."""
    return {(r.experiment, r.policy, r.servers, r.cache_gb, r.lp_period_s): r for r in results}
