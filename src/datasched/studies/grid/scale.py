"""The grid schedulers' own work as the grid grows (``datasched scale --policy JobLeastLoaded``):
the counterpart, for ranganathan-foster's schedulers, of the cluster policies' master load
(:mod:`datasched.studies.ponce.scale`, docs/scale.md).

A grid of ``n`` sites keeps the paper's proportions (Table 1: 30 sites, 120 users, 200
datasets): four users a site, about 6.7 datasets a site, one tier-1 site in six. Each user
submits jobs one after another, so the load grows with the sites too. Timed are the
decisions alone: the external scheduler's choice of a site for each job, the dataset
scheduler's answer to each access. The other of the pair is the cheapest (an external
scheduler runs beside DataDoNothing, a dataset scheduler beside JobDataPresent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from datasched.gridsim.engine import GridSim
from datasched.gridsim.model import GridConfig
from datasched.policies.grid.schedulers import (
    DATA_DO_NOTHING,
    JOB_DATA_PRESENT,
    DatasetScheduler,
    ExternalScheduler,
    build_grid_scheduler,
)
from datasched.studies.ponce.scale import ScalePoint

__all__ = ["grid_config", "grid_scale_point"]

USERS_PER_SITE = 4
DATASETS_PER_SITE = 200 / 30


def grid_config(n_sites: int, jobs: int) -> GridConfig:
    """A grid of ``n_sites`` sites in Table 1's proportions, running about ``jobs`` jobs
    (rounded up to a whole number a user)."""
    if n_sites < 2:
        raise ValueError(f"a grid needs at least 2 sites, got {n_sites}")
    users = USERS_PER_SITE * n_sites
    per_user = max(-(-jobs // users), 1)
    return GridConfig(
        users=users,
        sites=n_sites,
        datasets=max(round(DATASETS_PER_SITE * n_sites), 1),
        jobs=users * per_user,
        tier1=max(min(n_sites // 6, n_sites - 1), 1),
    )


def _timed(fn: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1

    return call


def grid_scale_point(name: str, n_sites: int, jobs: int) -> ScalePoint:
    """The decisions' cost of grid scheduler ``name`` on a grid of ``n_sites`` sites."""
    scheduler = build_grid_scheduler(name)
    cfg = grid_config(n_sites, jobs)
    spent = [0.0, 0.0]
    external: ExternalScheduler | DatasetScheduler
    data: ExternalScheduler | DatasetScheduler
    if isinstance(scheduler, ExternalScheduler):
        external, data = scheduler, build_grid_scheduler(DATA_DO_NOTHING)
        scheduler.choose = _timed(scheduler.choose, spent)  # type: ignore[method-assign]
    else:
        external, data = build_grid_scheduler(JOB_DATA_PRESENT), scheduler
        scheduler.on_access = _timed(scheduler.on_access, spent)  # type: ignore[method-assign]
    assert isinstance(external, ExternalScheduler)
    assert isinstance(data, DatasetScheduler)
    result = GridSim(cfg, external, data).run()
    simulated = max(result.makespan_s, 1e-9)
    return ScalePoint(
        policy=name,
        n_nodes=n_sites,
        n_jobs=result.jobs,
        load_jobs_per_h=result.jobs / simulated * 3600,
        scheduler_s=spent[0],
        scheduler_s_per_job=spent[0] / max(result.jobs, 1),
        master_load=spent[0] / simulated,
        simulated_s=simulated,
        decisions=int(spent[1]),
    )
