"""Adaptive delay (ponce-hersch §6): the period is the shortest one the map says sustains the
measured load; zero at low load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from datasched.core.policy import ParamError
from datasched.policies import build_policy, build_policy_from_text
from datasched.policies.ponce.adaptive import (
    AdaptiveDelay,
    MapPoint,
    PerformanceMap,
    default_map,
    load_map,
)
from datasched.sim.experiment import SimConfig, simulate
from datasched.studies.ponce.perfmap import save_map

MAP = PerformanceMap.of(
    [MapPoint(p, 5000, 100.0, load) for p, load in ((0, 1.0), (24, 2.0), (48, 2.5), (96, 2.5))]
    + [MapPoint(p, 200, 100.0, load) for p, load in ((0, 1.5), (48, 3.0))]
    + [MapPoint(p, 5000, 50.0, load) for p, load in ((0, 0.5), (48, 1.0))]
)


def test_min_period_interpolates_between_grid_periods() -> None:
    period = MAP.min_period_h
    assert period(0.5, stripe_events=5000, cache_gb=100) == 0
    assert period(1.0, stripe_events=5000, cache_gb=100) == 0
    assert period(1.5, stripe_events=5000, cache_gb=100) == pytest.approx(12.0)
    assert period(2.25, stripe_events=5000, cache_gb=100) == pytest.approx(36.0)
    # Beyond what any period sustains: the longest period of the map.
    assert period(9.0, stripe_events=5000, cache_gb=100) == 96
    # Nearest stripe and cache sizes of the grid.
    assert period(1.5, stripe_events=250, cache_gb=100) == 0
    assert period(0.75, stripe_events=5000, cache_gb=40) == pytest.approx(24.0)


def test_map_round_trips_and_rejects_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    save_map(MAP, path, meta={"why": "test"})
    assert load_map(path) == MAP
    path.write_text('{"points": [{"period_h": 1}]}')
    with pytest.raises(ValueError, match=r"map\.json: performance_map: point 0"):
        load_map(path)
    path.write_text("not json")
    with pytest.raises(ValueError, match="not JSON"):
        load_map(path)
    with pytest.raises(ValueError, match="has no points"):
        PerformanceMap(())


def test_shipped_map_covers_the_papers_grid() -> None:
    pmap = default_map()
    periods = {p.period_h for p in pmap.points}
    assert {0.0, 48.0, 168.0} <= periods
    assert {p.cache_gb for p in pmap.points} == {50.0, 100.0, 200.0}
    # Longer periods never sustain much less (Figure 9: nearly linear growth), up to noise.
    for stripe in (200, 5000):
        curve = pmap.curve(stripe, 100.0)
        assert curve[-1][1] >= curve[0][1] * 0.95


def _config(load: float, **kw: Any) -> SimConfig:
    return SimConfig(policy="adaptive-delay", load_jobs_per_h=load, n_jobs=300, **kw)


def test_no_delay_at_low_load() -> None:
    summary, run = simulate(_config(0.3, policy_params={"performance_map": MAP}))
    assert not summary.overloaded
    assert all(r.released_s in (-1.0, r.submit_s) for r in run.jobs)


def test_delays_at_high_load_and_matches_delayed_without_delay() -> None:
    policy = build_policy("adaptive-delay", performance_map=MAP)
    assert isinstance(policy, AdaptiveDelay)
    _, run = simulate(_config(2.2, policy_params={"performance_map": MAP}))
    delayed = [r for r in run.jobs if r.released_s > r.submit_s]
    assert delayed, "a load of 2.2 jobs/h needs a period under this map"
    # With no map the policy never delays: the same as delayed scheduling with period 0.
    a, _ = simulate(_config(0.5, policy_params={"performance_map": None}, seed=3))
    b, _ = simulate(
        SimConfig(
            policy="delayed",
            load_jobs_per_h=0.5,
            n_jobs=300,
            seed=3,
            policy_params={"period_h": 0.0},
        )
    )
    a_d, b_d = a.to_dict(), b.to_dict()
    for key in ("mean_speedup", "mean_wait_s", "cache_hit_ratio"):
        assert a_d[key] == b_d[key], key


def test_bad_parameters_name_the_field() -> None:
    with pytest.raises(ParamError, match="window_h: must be above 0"):
        build_policy("adaptive-delay", window_h=0)
    with pytest.raises(ParamError, match="stripe_events: must be at least 1"):
        build_policy("adaptive-delay", stripe_events=0)
    with pytest.raises(ParamError, match=r"performance_map: .*nope\.json"):
        build_policy_from_text("adaptive-delay", {"performance_map": "nope.json"})


def test_the_shipped_map_comes_with_the_policy_in_every_engine(tmp_path: Path) -> None:
    # The map belongs to the policy: built by name, with no parameter, it has the shipped
    # one (the simulator and the runtime both build policies this way).
    policy = build_policy("adaptive-delay")
    assert isinstance(policy, AdaptiveDelay)
    assert policy.performance_map == default_map()
    # "none" turns it off; a file replaces it.
    off = build_policy_from_text("adaptive-delay", {"performance_map": "none"})
    assert isinstance(off, AdaptiveDelay)
    assert off.performance_map is None
    path = tmp_path / "map.json"
    save_map(MAP, path)
    mine = build_policy_from_text("adaptive-delay", {"performance_map": str(path)})
    assert isinstance(mine, AdaptiveDelay)
    assert mine.performance_map == MAP
