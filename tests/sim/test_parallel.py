"""Simulations side by side in processes: the same results, in the same order, as one by one."""

from __future__ import annotations

import dataclasses
import math

import pytest

from datasched.sim.experiment import SimConfig, sweep
from datasched.sim.parallel import map_in_processes, usable_cores
from datasched.sim.perfmap import build_map


def test_results_come_back_in_the_order_of_the_items() -> None:
    # The first item takes longest, so the other worker's results usually arrive first.
    items = [range(20_000_000), range(4), range(10), range(3)]
    seen: list[tuple[int, int]] = []
    out = map_in_processes(sum, items, processes=2, on_done=lambda i, r: seen.append((i, r)))
    expected = [sum(r) for r in items]
    assert out == expected
    assert sorted(seen) == list(enumerate(expected))


def test_one_process_runs_in_this_one_in_order() -> None:
    seen: list[int] = []
    out = map_in_processes(abs, [-2, 3, -1], on_done=lambda i, _: seen.append(i))
    assert out == [2, 3, 1] and seen == [0, 1, 2]


def test_a_failure_in_a_worker_is_raised_here() -> None:
    with pytest.raises(ValueError, match="math domain error"):
        map_in_processes(math.sqrt, [1.0, -1.0, 4.0], processes=2)


def test_processes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="processes: must be at least 1"):
        map_in_processes(abs, [1], processes=0)


def test_usable_cores_is_positive() -> None:
    assert usable_cores() >= 1


def _without_wall(summary: object) -> dict[str, object]:
    fields = dataclasses.asdict(summary)  # type: ignore[call-overload]
    del fields["wall_s"]  # time taken, not a result
    return fields


def test_a_sweep_in_two_processes_equals_one_in_one() -> None:
    configs = [
        SimConfig(policy=p, load_jobs_per_h=load, n_jobs=80)
        for p in ("splitting", "cache-splitting", "out-of-order")
        for load in (0.3, 0.9)
    ]
    arrived: list[str] = []
    serial = sweep(configs)
    parallel = sweep(configs, processes=2, on_result=lambda s: arrived.append(s.policy))
    assert [_without_wall(s) for s in parallel] == [_without_wall(s) for s in serial]
    assert [(s.policy, s.load_jobs_per_h) for s in parallel] == [
        (c.policy, c.load_jobs_per_h) for c in configs
    ]
    assert sorted(arrived) == sorted(c.policy for c in configs)


def test_a_performance_map_in_two_processes_equals_one_in_one() -> None:
    base = SimConfig(policy="delayed", n_jobs=60)
    grid = {"periods_h": [0.0], "stripes": [200, 5000], "caches_gb": [50.0]}
    serial = build_map(base, **grid)  # type: ignore[arg-type]
    points: list[int] = []
    parallel = build_map(
        base,
        **grid,  # type: ignore[arg-type]
        processes=2,
        on_point=lambda p: points.append(p.stripe_events),
    )
    assert parallel == serial
    assert [p.stripe_events for p in parallel.points] == [200, 5000]
    assert sorted(points) == [200, 5000]
