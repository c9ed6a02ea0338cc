"""The performance map of delayed scheduling (ponce-hersch Figure 9), computed by simulation,
saved as JSON, and handed to the adaptive-delay policy (§6).

``datasched perf-map`` builds one; a map built with the paper's parameters ships with the
adaptive-delay policy (:func:`datasched.policies.ponce.adaptive.default_map`) and is what it uses
unless told otherwise, in every engine.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from datasched._files import atomic_write_text
from datasched.policies.ponce.adaptive import MapPoint, PerformanceMap, load_map
from datasched.sim.experiment import SimConfig, find_max_load
from datasched.sim.parallel import SchedulerRef, map_in_processes

__all__ = [
    "DEFAULT_CACHES_GB",
    "DEFAULT_PERIODS_H",
    "DEFAULT_STRIPES",
    "build_map",
    "jobs_for_period",
    "load_map",
    "save_map",
]

DEFAULT_PERIODS_H = (0.0, 24.0, 48.0, 168.0)
DEFAULT_STRIPES = (200, 1000, 5000)
DEFAULT_CACHES_GB = (50.0, 100.0, 200.0)
PERIODS_PER_RUN = 16
"""A run must span many periods for overload to show: a delaying policy is judged on what
each period end finds undone (:func:`datasched.sim.metrics.periodic_overload`), which tells
an overload of ``rho - 1`` from noise only beyond about ``1 / (2 K)`` for ``K`` period ends
in the measured window (70 % of the jobs). Sixteen periods at the theoretical maximal load
hold eleven of them: overloads over 5 % show. A week-long period costs 9,300 jobs a run."""
THEORETICAL_MAX_LOAD = 3.46
"""Jobs per hour (ponce-hersch §3.4): no probe of the search goes much beyond it."""


def jobs_for_period(n_jobs: int, period_h: float, *, periods: int = PERIODS_PER_RUN) -> int:
    """Jobs a run needs so that, near the maximal load, it spans ``periods`` periods."""
    return max(n_jobs, math.ceil(periods * period_h * THEORETICAL_MAX_LOAD))


def build_map(
    base: SimConfig,
    *,
    periods_h: Sequence[float] = DEFAULT_PERIODS_H,
    stripes: Sequence[int] = DEFAULT_STRIPES,
    caches_gb: Sequence[float] = DEFAULT_CACHES_GB,
    on_point: Callable[[MapPoint], None] | None = None,
    processes: int = 1,
    scheduler: SchedulerRef | None = None,
) -> PerformanceMap:
    """Maximal sustainable load of delayed scheduling at every grid point (``base`` gives the
    cluster, workload size and seed; its policy and cache size are replaced). The searches
    run in up to ``processes`` worker processes, or on the Dask cluster whose scheduler is at
    ``scheduler``; ``on_point`` sees each point as it is found.
    """
    grid = [
        (period, stripe, cache) for cache in caches_gb for stripe in stripes for period in periods_h
    ]
    configs = [
        replace(
            base,
            policy="delayed",
            n_jobs=jobs_for_period(base.n_jobs, period),
            cache_gb=cache,
            policy_params={"period_h": period, "stripe_events": stripe},
        )
        for period, stripe, cache in grid
    ]

    def point(i: int, max_load: float) -> MapPoint:
        period, stripe, cache = grid[i]
        return MapPoint(period, stripe, cache, round(max_load, 4))

    def done(i: int, max_load: float) -> None:
        if on_point is not None:
            on_point(point(i, max_load))

    # Unconfirmed (one run length): the runs already span PERIODS_PER_RUN periods, the
    # shipped map was found this way, and confirming runs 8 times as long would take 8 times
    # as many jobs, 75,000 for the one-week period.
    search = functools.partial(find_max_load, confirm_factor=1)
    loads = map_in_processes(
        search, configs, processes=processes, scheduler=scheduler, on_done=done
    )
    return PerformanceMap(tuple(point(i, load) for i, load in enumerate(loads)))


def save_map(pmap: PerformanceMap, path: Path, *, meta: Mapping[str, Any] | None = None) -> None:
    doc = {**pmap.to_dict(), "meta": dict(meta or {})}
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
