"""``datasched scale`` takes every registered policy, the cluster policies' registry and the
grid's schedulers alike, and measures the master's work on each (a tiny configuration:
whether it runs and what it reports, not how fast)."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.policies import available
from datasched.policies.grid.schedulers import grid_schedulers
from datasched.studies.ponce.scale import ScalePoint, nodes_per_core

runner = CliRunner()


@pytest.mark.parametrize("policy", list(available()))
def test_scale_takes_every_cluster_policy(policy: str) -> None:
    result = runner.invoke(
        app, ["scale", "--policy", policy, "--nodes", "4,8", "--jobs", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)
    assert [(p["policy"], p["n_nodes"]) for p in points] == [(policy, 4), (policy, 8)]
    for p in points:
        assert p["n_jobs"] == 3
        assert p["decisions"] >= 2 * 3  # an arrival and an end a job at least
        assert p["scheduler_s"] > 0
        assert p["us_per_decision"] == pytest.approx(1e6 * p["scheduler_s"] / p["decisions"])
        served = p["nodes_per_core"]
        assert served == "any" or served > 0


@pytest.mark.parametrize("scheduler", list(grid_schedulers()))
def test_scale_takes_every_grid_scheduler(scheduler: str) -> None:
    result = runner.invoke(
        app, ["scale", "--policy", scheduler, "--nodes", "6,12", "--jobs", "24", "--json"]
    )
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)
    assert [p["n_nodes"] for p in points] == [6, 12]
    for p in points:
        assert p["n_jobs"] >= 24
        assert p["decisions"] > 0  # each job's site chosen, or each access answered
        assert p["simulated_s"] > 0


def test_scale_table_says_what_one_core_serves() -> None:
    result = runner.invoke(app, ["scale", "--policy", "JobRandom", "--nodes", "6,12"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    # The unit follows the number, before any aside ("far beyond 10 million (the master's
    # load barely grows) sites" read wrong).
    assert re.search(
        r"one core serves as master up to (far beyond 10 million|about [\d,]+) sites", said
    ), said
    bad = runner.invoke(app, ["scale", "--policy", "JobRandom", "--nodes", "1,6"])
    assert bad.exit_code == 2
    assert "--nodes: a grid needs at least 2 sites" in bad.output


def _point(n: int, load: float) -> ScalePoint:
    return ScalePoint("p", n, 10, 1.0, load, load, load, 1.0, 10)


def test_nodes_per_core_extrapolates_along_the_power_law() -> None:
    # Master load 1e-4 at 100 nodes, 1e-2 at 1,000: slope 2, so load 1 at 10,000 nodes.
    assert nodes_per_core([_point(10, 1e-6), _point(100, 1e-4), _point(1000, 1e-2)]) == (
        pytest.approx(10_000)
    )
    assert nodes_per_core([_point(100, 1e-3), _point(1000, 1e-3)]) == math.inf
    assert nodes_per_core([_point(100, 1e-3)]) is None
    # A load that barely grows (timing noise) is as good as unbounded, not an overflow.
    assert nodes_per_core([_point(6, 1e-3), _point(12, 1.0000001e-3)]) == math.inf
