"""The PROOF experiments in the simulator: the uneven-data job under both packetizers
(ganis et al. §2.3, Figures 3-4) and the day of CPU quotas (§3.3, Figure 6).

Each run returns its packet log (:mod:`datasched.sim.monitor` reads it) and what the claims
need; :mod:`datasched.studies.proof.reproduce` assembles the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine
from datasched.sim.monitor import tail_fraction
from datasched.sim.recorder import PacketRecord
from datasched.studies.proof.setup import QuotaSetup, UnevenSetup

__all__ = [
    "ADAPTIVE",
    "BASIC",
    "QuotaRun",
    "UnevenRun",
    "run_quota",
    "run_uneven",
    "uneven_table",
]

BASIC = "basic-packetizer"
ADAPTIVE = "adaptive-packetizer"


@dataclass(frozen=True, slots=True)
class UnevenRun:
    """One packetizer on one placement of the uneven data set."""

    policy: str
    seed: int
    end_s: float
    packets: tuple[PacketRecord, ...]
    worker_nodes: frozenset[int]
    n_workers: int
    bound_s: float
    busiest_node: int
    busiest_files: int
    forced: int

    @property
    def tail_fraction(self) -> float:
        return tail_fraction(self.packets, self.n_workers, 0.0, self.end_s)

    @property
    def busiest_is_worker(self) -> bool:
        return self.busiest_node in self.worker_nodes


def run_uneven(
    setup: UnevenSetup, policy: str, seed: int, params: Mapping[str, Any] | None = None
) -> UnevenRun:
    """The whole data set as one query, processed by ``policy`` on the placement ``seed``."""
    space = setup.space(seed)
    built = build_policy(policy, **dict(params or {}))
    sched = Scheduler(setup.topology(), space, built, cost=setup.cost())
    engine = SimEngine(sched, record_packets=True, check_conservation=True)
    run = engine.run([setup.job(space)])
    if run.jobs_completed != 1 or run.events_processed != space.n_events:
        raise RuntimeError(f"{policy}: the uneven job did not complete")
    assert run.packets is not None
    placement = setup.placement(seed)
    counts = {n: placement.count(n) for n in set(placement)}
    busiest = max(sorted(counts), key=counts.__getitem__)
    forced = run.policy_counters.get("forced packets", 0)
    return UnevenRun(
        policy=policy,
        seed=seed,
        end_s=run.end_s,
        packets=tuple(run.packets),
        worker_nodes=frozenset(range(setup.workers)),
        n_workers=setup.workers,
        bound_s=setup.bound_s(seed),
        busiest_node=busiest,
        busiest_files=counts[busiest],
        forced=forced,
    )


def uneven_table(pairs: Sequence[tuple[UnevenRun, UnevenRun]]) -> list[dict[str, Any]]:
    """One row per placement: both packetizers' times and tails, and the bound."""
    rows = []
    for basic, adaptive in pairs:
        rows.append(
            {
                "seed": basic.seed,
                "busiest_node": basic.busiest_node,
                "busiest_is_worker": basic.busiest_is_worker,
                "busiest_files": basic.busiest_files,
                "bound_s": round(basic.bound_s, 1),
                "basic_s": round(basic.end_s, 1),
                "adaptive_s": round(adaptive.end_s, 1),
                "adaptive_over_basic": round(adaptive.end_s / basic.end_s, 4),
                "tail_basic": round(basic.tail_fraction, 4),
                "tail_adaptive": round(adaptive.tail_fraction, 4),
            }
        )
    return rows


@dataclass(slots=True)
class QuotaRun:
    """A day of quotas: every packet, and who owned which job."""

    setup: QuotaSetup
    packets: list[PacketRecord]
    group_of: dict[int, str]
    priorities: dict[str, float] = field(default_factory=dict)

    def cpu_by_group(self, start_s: float, end_s: float) -> dict[str, float]:
        """CPU seconds per group in ``[start_s, end_s)`` (a packet counted in proportion to
        its time inside)."""
        out = {g.name: 0.0 for g in self.setup.groups}
        for p in self.packets:
            span = p.end_s - p.start_s
            inside = min(p.end_s, end_s) - max(p.start_s, start_s)
            if inside > 0 and span > 0:
                out[self.group_of[p.job_id]] += p.cpu_s * inside / span
        return out

    def shares(self, start_s: float, end_s: float) -> dict[str, float]:
        cpu = self.cpu_by_group(start_s, end_s)
        total = sum(cpu.values())
        return {g: (c / total if total > 0 else 0.0) for g, c in cpu.items()}

    def day_shares(self) -> dict[str, float]:
        return self.shares(0.0, self.setup.horizon_s)

    def max_error_pp(self) -> float:
        """The largest gap between a group's share of the day's CPU and its target, in
        percentage points."""
        got = self.day_shares()
        total = sum(g.target_percent for g in self.setup.groups)
        return max(
            abs(100.0 * got[g.name] - 100.0 * g.target_percent / total) for g in self.setup.groups
        )

    def hourly(self, step_s: float = 3600.0) -> list[dict[str, float]]:
        """Shares per interval of ``step_s``, the paper's Figure 6 over time."""
        rows = []
        t = 0.0
        while t < self.setup.horizon_s:
            end = min(t + step_s, self.setup.horizon_s)
            rows.append({"start_h": t / 3600.0, **self.shares(t, end)})
            t = end
        return rows


def run_quota(
    setup: QuotaSetup,
    policy: str = ADAPTIVE,
    *,
    priorities: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> QuotaRun:
    """A closed workload of ``setup``'s users for ``setup.hours``, under ``policy`` with the
    groups' quotas (or fixed ``priorities``, for a control) and ``params``; each query gets
    every worker."""
    space = setup.space()
    first, follow_up = setup.workload(space)
    group_of = {j.job_id: j.group for j in first}

    def follow(done: Any, now: float) -> Any:
        job = follow_up(done, now)
        if job is not None:
            group_of[job.job_id] = job.group
        return job

    groups = {"quotas": setup.quotas()} if priorities is None else {"priorities": priorities}
    built = build_policy(policy, min_workers=setup.nodes, **groups, **dict(params or {}))
    sched = Scheduler(setup.topology(), space, built, cost=setup.cost())
    engine = SimEngine(sched, record_packets=True)
    run = engine.run(first, follow_up=follow)
    assert run.packets is not None
    prio = getattr(built, "priorities", None)
    return QuotaRun(setup, run.packets, group_of, dict(prio()) if callable(prio) else {})
