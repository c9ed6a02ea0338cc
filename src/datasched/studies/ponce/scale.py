"""The master's scalability (ponce-hersch §8): scheduler time per job as the cluster grows.

As in the paper's Figure 16, the load and the data space grow in proportion to the number of
nodes, and for a policy with a period (delayed scheduling) the period shrinks in proportion
(one month for one node), so the number of jobs per period stays the same. The master's
load is the scheduler's own time per simulated second: 1.0 means one core fully busy
scheduling.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace

from datasched.policies import get_policy
from datasched.sim.experiment import SimConfig, simulate

__all__ = ["ScalePoint", "nodes_per_core", "scale_config", "scale_point"]

MONTH_H = 30 * 24.0


@dataclass(frozen=True, slots=True)
class ScalePoint:
    """Scheduler cost of one policy on one cluster size."""

    policy: str
    n_nodes: int
    n_jobs: int
    load_jobs_per_h: float
    scheduler_s: float
    scheduler_s_per_job: float
    master_load: float
    """Scheduler seconds per simulated second (the paper's "load of the master node")."""
    simulated_s: float
    decisions: int = 0
    """Events the scheduler handled (a grid's: choices of a site, answers to accesses)."""

    @property
    def us_per_decision(self) -> float:
        """Microseconds of the master's time per event it handled."""
        return 1e6 * self.scheduler_s / self.decisions if self.decisions else float("nan")


def scale_config(base: SimConfig, n_nodes: int) -> SimConfig:
    """``base`` (a 10-node configuration) grown to ``n_nodes`` the way §8 grows it."""
    factor = n_nodes / 10
    params = dict(base.policy_params)
    if any(p.name == "period_h" for p in get_policy(base.policy).params):
        params["period_h"] = MONTH_H / n_nodes
    return replace(
        base,
        n_nodes=n_nodes,
        load_jobs_per_h=base.load_jobs_per_h * factor,
        data_space_bytes=base.data_space_bytes * factor,
        policy_params=params,
        max_backlog=10**9,
    )


def scale_point(base: SimConfig, n_nodes: int) -> ScalePoint:
    config = scale_config(base, n_nodes)
    _summary, run = simulate(config)
    simulated = max(run.end_s - min((j.submit_s for j in run.jobs), default=0.0), 1e-9)
    return ScalePoint(
        policy=config.policy,
        n_nodes=n_nodes,
        n_jobs=len(run.jobs),
        load_jobs_per_h=config.load_jobs_per_h,
        scheduler_s=run.scheduler_s,
        scheduler_s_per_job=run.scheduler_s / max(len(run.jobs), 1),
        master_load=run.scheduler_s / simulated,
        simulated_s=simulated,
        decisions=run.n_events_handled,
    )


def nodes_per_core(points: list[ScalePoint]) -> float | None:
    """The cluster size at which the master would keep one core busy (master load 1),
    extrapolated from the two largest of ``points`` along the power law through them
    (docs/scale.md); inf when the master load does not grow, None with fewer than two
    sizes or no time measured."""
    sized = sorted(points, key=lambda p: p.n_nodes)
    if len(sized) < 2:
        return None
    a, b = sized[-2], sized[-1]
    if a.n_nodes == b.n_nodes or a.master_load <= 0 or b.master_load <= 0:
        return None
    slope = math.log(b.master_load / a.master_load) / math.log(b.n_nodes / a.n_nodes)
    if slope <= 0:
        return math.inf
    # In logarithms: a load that barely grows (a slope near 0, as timing noise gives) puts the
    # answer past what a float holds; it is then as good as unbounded.
    log_nodes = math.log(b.n_nodes) - math.log(b.master_load) / slope
    if log_nodes >= math.log(sys.float_info.max):
        return math.inf
    return math.exp(log_nodes)
