"""The performance map of delayed scheduling (ponce-hersch Figure 9), computed by simulation,
saved as JSON, and handed to the adaptive-delay policy (§6).

``datasched perf-map`` builds one; a map built with the paper's parameters ships with the
package (``data/perfmap-ponce.json``) and is what adaptive delay uses unless told otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasched._files import atomic_write_text
from datasched.policies.adaptive import MapPoint, PerformanceMap
from datasched.sim.parallel import map_in_processes

if TYPE_CHECKING:
    from datasched.sim.experiment import SimConfig

__all__ = [
    "DEFAULT_CACHES_GB",
    "DEFAULT_PERIODS_H",
    "DEFAULT_STRIPES",
    "build_map",
    "default_map",
    "jobs_for_period",
    "load_map",
    "save_map",
    "with_default_map",
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
    scheduler: str | None = None,
) -> PerformanceMap:
    """Maximal sustainable load of delayed scheduling at every grid point (``base`` gives the
    cluster, workload size and seed; its policy and cache size are replaced). The searches
    run in up to ``processes`` worker processes, or on the Dask cluster whose scheduler is at
    ``scheduler``; ``on_point`` sees each point as it is found.
    """
    from datasched.sim.experiment import find_max_load

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

    loads = map_in_processes(
        find_max_load, configs, processes=processes, scheduler=scheduler, on_done=done
    )
    return PerformanceMap(tuple(point(i, load) for i, load in enumerate(loads)))


def save_map(pmap: PerformanceMap, path: Path, *, meta: Mapping[str, Any] | None = None) -> None:
    doc = {**pmap.to_dict(), "meta": dict(meta or {})}
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")


def load_map(path: Path) -> PerformanceMap:
    """A map saved by :func:`save_map`; ValueError naming the file and the problem."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    try:
        return PerformanceMap.from_dict(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def default_map() -> PerformanceMap:
    """The map shipped with the package (ponce-hersch's cluster and workload)."""
    text = resources.files("datasched.sim").joinpath("data/perfmap-ponce.json").read_text()
    return PerformanceMap.from_dict(json.loads(text))


def with_default_map(policy: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params``, with the shipped map added for adaptive delay when none is given (an
    explicit ``performance_map=None`` means no map: never delay)."""
    out = dict(params)
    if policy == "adaptive-delay" and "performance_map" not in out:
        out["performance_map"] = default_map()
    return out
