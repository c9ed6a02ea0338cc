"""The simulator against queueing theory: the processing farm with exponential job sizes is
M/M/1 on one node and M/M/c on c nodes (ponce-hersch §3.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clusters import scheduler
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job
from datasched.sim.engine import SimEngine
from datasched.sim.experiment import SimConfig
from datasched.sim.queueing import erlang_c, mm1_mean_wait, mmc_mean_wait

MEAN_EVENTS = 1000
S_PER_EVENT = SimConfig().reference_s_per_event  # 0.8 s: farm reads all from tertiary


def poisson_exponential_jobs(n: int, rate_per_s: float, seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_per_s, n))
    sizes = np.maximum(1, np.rint(rng.exponential(MEAN_EVENTS, n))).astype(int)
    return [
        Job(job_id=i, submit_s=float(t), data=IntervalSet.range(0, int(s)))
        for i, (t, s) in enumerate(zip(arrivals, sizes, strict=True))
    ]


def farm_mean_wait(n_nodes: int, rho: float, n_jobs: int, seed: int) -> tuple[float, float]:
    """Simulated mean wait and the service rate actually realised by the rounded sizes."""
    mean_service = MEAN_EVENTS * S_PER_EVENT
    rate = rho * n_nodes / mean_service
    jobs = poisson_exponential_jobs(n_jobs, rate, seed)
    engine = SimEngine(scheduler("farm", n_nodes))
    run = engine.run(jobs, measure=(n_jobs // 10, n_jobs))
    waits = [r.first_start_s - r.submit_s for r in run.jobs[n_jobs // 10 :]]
    assert all(r.end_s >= 0 for r in run.jobs)
    return float(np.mean(waits)), rate


def test_erlang_c_known_values() -> None:
    assert math.isclose(erlang_c(1, 0.5), 0.5)  # M/M/1: P(wait) = rho
    # Textbook value: c=2, a=1 -> C = 1/3.
    assert math.isclose(erlang_c(2, 1.0), 1 / 3)
    assert math.isclose(mmc_mean_wait(1, 0.5, 1.0), mm1_mean_wait(0.5, 1.0))


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_farm_on_one_node_is_mm1(rho: float) -> None:
    # Mean of 8 independent replications; their spread gives the tolerance (4 standard
    # errors), so the check is honest about the simulation's own noise.
    means = [farm_mean_wait(1, rho, 6000, seed)[0] for seed in range(8)]
    mu = 1 / (MEAN_EVENTS * S_PER_EVENT)
    expected = mm1_mean_wait(rho * mu, mu)
    got = float(np.mean(means))
    stderr = float(np.std(means, ddof=1) / math.sqrt(len(means)))
    assert abs(got - expected) < 4 * stderr + 0.02 * expected, (got, expected, stderr)


@pytest.mark.parametrize("nodes", [4, 10])
def test_farm_on_c_nodes_is_mmc(nodes: int) -> None:
    rho = 0.75
    means = [farm_mean_wait(nodes, rho, 6000, 100 + seed)[0] for seed in range(8)]
    mu = 1 / (MEAN_EVENTS * S_PER_EVENT)
    expected = mmc_mean_wait(nodes, rho * nodes * mu, mu)
    got = float(np.mean(means))
    stderr = float(np.std(means, ddof=1) / math.sqrt(len(means)))
    assert abs(got - expected) < 4 * stderr + 0.02 * expected, (got, expected, stderr)


def test_single_job_single_node_takes_32000_s() -> None:
    """ponce-hersch §3.4: 40,000 events at 0.2 s CPU + 0.6 s tertiary I/O = 32,000 s."""
    engine = SimEngine(scheduler("farm", 1))
    run = engine.run([Job(0, 0.0, IntervalSet.range(0, 40_000))])
    assert run.jobs[0].end_s == pytest.approx(32_000.0)
    assert run.jobs[0].busy_s == pytest.approx(32_000.0)  # one node all along
