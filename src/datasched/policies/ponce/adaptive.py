"""Adaptive delay scheduling (ponce-hersch §6): delayed scheduling whose period is the
shortest one that sustains the load measured now, read from a performance map.

The map (maximal sustainable load of delayed scheduling against period, stripe size and cache
size: the paper's Figure 9) is data that belongs to the policy: the simulator computes one
(:mod:`datasched.studies.ponce.perfmap`, ``datasched perf-map``), one computed with the
paper's cluster ships with the package and is the parameter's default, in every engine.
Reading a map file happens when the policy is built; the policy does no I/O while it
schedules.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from datasched.core.policy import DEFAULT, JobView, Param, SchedulerView
from datasched.policies.ponce.delayed import STRIPE_EVENTS, DelayedScheduling
from datasched.policies.registry import register

__all__ = ["AdaptiveDelay", "MapPoint", "PerformanceMap", "default_map", "load_map"]

GB = 1e9


@dataclass(frozen=True, slots=True)
class MapPoint:
    """Delayed scheduling with this period, stripe size and cache size sustains at most
    ``max_load_jobs_per_h``."""

    period_h: float
    stripe_events: int
    cache_gb: float
    max_load_jobs_per_h: float


@dataclass(frozen=True, slots=True)
class PerformanceMap:
    """Maximal sustainable load of delayed scheduling over a grid of (period, stripe, cache)."""

    points: tuple[MapPoint, ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("performance_map: has no points")
        for p in self.points:
            if p.period_h < 0 or p.stripe_events < 1 or p.cache_gb < 0:
                raise ValueError(f"performance_map: bad point {p}")
            if not p.max_load_jobs_per_h >= 0:
                raise ValueError(f"performance_map: bad maximal load in {p}")

    def curve(self, stripe_events: int, cache_gb: float) -> list[tuple[float, float]]:
        """(period_h, maximal load) by period, for the map's nearest stripe and cache sizes
        (nearest on a log scale, since both grids are roughly geometric)."""
        stripe = min(
            {p.stripe_events for p in self.points},
            key=lambda s: (abs(math.log(s / stripe_events)), s),
        )
        caches = {p.cache_gb for p in self.points if p.stripe_events == stripe}
        cache = min(caches, key=lambda c: (abs(math.log((c + 1) / (cache_gb + 1))), c))
        return sorted(
            (p.period_h, p.max_load_jobs_per_h)
            for p in self.points
            if p.stripe_events == stripe and p.cache_gb == cache
        )

    def min_period_h(self, load_jobs_per_h: float, *, stripe_events: int, cache_gb: float) -> float:
        """The shortest period sustaining ``load_jobs_per_h``: linear between grid periods,
        the longest period of the map when none does."""
        pts = self.curve(stripe_events, cache_gb)
        prev_period, prev_load = pts[0]
        if load_jobs_per_h <= prev_load:
            return prev_period
        for period, max_load in pts[1:]:
            if max_load >= load_jobs_per_h:
                if max_load == prev_load:
                    return period
                frac = (load_jobs_per_h - prev_load) / (max_load - prev_load)
                return prev_period + frac * (period - prev_period)
            if max_load > prev_load:
                prev_period, prev_load = period, max_load
        return pts[-1][0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "points": [
                {
                    "period_h": p.period_h,
                    "stripe_events": p.stripe_events,
                    "cache_gb": p.cache_gb,
                    "max_load_jobs_per_h": p.max_load_jobs_per_h,
                }
                for p in self.points
            ]
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PerformanceMap:
        """From :meth:`to_dict`'s form; ValueError naming the bad field."""
        raw = doc.get("points") if isinstance(doc, Mapping) else None
        if not isinstance(raw, list):
            raise ValueError("performance_map: 'points' must be a list")
        points = []
        for i, item in enumerate(raw):
            try:
                points.append(
                    MapPoint(
                        period_h=float(item["period_h"]),
                        stripe_events=int(item["stripe_events"]),
                        cache_gb=float(item["cache_gb"]),
                        max_load_jobs_per_h=float(item["max_load_jobs_per_h"]),
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"performance_map: point {i}: {exc!r}") from exc
        return cls(tuple(points))

    @classmethod
    def of(cls, points: Iterable[MapPoint]) -> PerformanceMap:
        return cls(tuple(points))


def load_map(path: str | Path) -> PerformanceMap:
    """A map saved as JSON (``datasched perf-map``); ValueError naming the file and the
    problem."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    try:
        return PerformanceMap.from_dict(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def default_map() -> PerformanceMap:
    """The map shipped with the package (ponce-hersch's cluster and workload)."""
    text = resources.files("datasched.policies").joinpath("data/perfmap-ponce.json").read_text()
    return PerformanceMap.from_dict(json.loads(text))


@register
class AdaptiveDelay(DelayedScheduling):
    """Delayed scheduling whose period follows the load (ponce-hersch §6).

    At the start of every period (and on the arrival that ends an idle spell) the policy
    measures the load, arrivals over the last ``window_h`` hours, and reads from the map the
    shortest period that sustains it. At low load that is 0: jobs are scheduled on arrival.
    Without a map (``performance_map=None``) it never delays.
    """

    name = "adaptive-delay"
    section = "ponce-hersch §6"
    summary = "adaptive delay: delayed scheduling, period from the measured load and a map"
    params: ClassVar[tuple[Param, ...]] = (
        Param(
            "performance_map",
            object,
            "the map shipped for ponce-hersch's cluster",
            "a performance map file (JSON, from `datasched perf-map`), or none: never delay",
            none_ok=True,
            parse=load_map,
            factory=default_map,
        ),
        STRIPE_EVENTS,
        Param(
            "window_h",
            float,
            48.0,
            "the load is measured over arrivals in this last window",
            low=0.0,
            low_open=True,
            unit="hours",
        ),
    )

    def __init__(
        self,
        *,
        performance_map: PerformanceMap | None = DEFAULT,
        stripe_events: int = DEFAULT,
        window_h: float = DEFAULT,
    ) -> None:
        super().__init__(period_h=0.0, stripe_events=stripe_events)
        self.performance_map = performance_map
        self.window_s = window_h * 3600.0
        self._arrivals: deque[float] = deque()
        self._first_arrival: float | None = None
        self._cache_gb = 0.0
        self.periods_h: list[tuple[float, float]] = []
        """(time, period chosen) each time a period was chosen, for reports."""

    def max_delay_s(self) -> float:
        if self.performance_map is None:
            return 0.0
        return 3600.0 * max(p.period_h for p in self.performance_map.points)

    def bind(self, sched: SchedulerView) -> None:
        super().bind(sched)
        self._cache_gb = sched.topology.nodes[0].cache_bytes / GB

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        self._arrivals.append(sched.now)
        if self._first_arrival is None:
            self._first_arrival = sched.now
        super().job_arrived(sched, js)

    def measured_load(self, now: float) -> float:
        """Arrivals per hour over the last window (over the time since the first arrival,
        but at least a quarter of the window, until a whole window has passed)."""
        while self._arrivals and self._arrivals[0] <= now - self.window_s:
            self._arrivals.popleft()
        first = self._first_arrival if self._first_arrival is not None else now
        span = min(self.window_s, max(now - first, self.window_s / 4))
        return 3600.0 * len(self._arrivals) / span

    def next_period_s(self, sched: SchedulerView) -> float:
        if self.performance_map is None:
            return 0.0
        load = self.measured_load(sched.now)
        period_h = self.performance_map.min_period_h(
            load, stripe_events=self.stripe_events, cache_gb=self._cache_gb
        )
        self.periods_h.append((sched.now, period_h))
        return period_h * 3600.0

    def first_period_end(self, sched: SchedulerView, period_s: float) -> float:
        return sched.now + period_s
