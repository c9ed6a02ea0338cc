"""A setup per user and node (``CostModel.user_setup_s``): the service's sandbox, started
the first time a node runs a job of a user and kept for that user's later jobs there. Nil by
default, so every simulation is the one it was; worked out by hand on one node."""

from __future__ import annotations

from dataclasses import replace

import pytest

from datasched.core.data import DataSpace
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, ModelError, Pipelining, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine, SimRun

JOB_EVENTS = 1000
CPU_S = 0.001  # 1 s a job
COST = CostModel(cpu_s_per_event=CPU_S, disk_bytes_per_s=1e9, pipelining=Pipelining.TERTIARY)


def _run(
    cost: CostModel,
    users: list[str],
    *,
    nodes: int = 1,
    policy: str = "farm",
    warm_users: dict[int, list[str]] | None = None,
    file_grain: bool = False,
) -> SimRun:
    n = len(users) * JOB_EVENTS
    data = (
        DataSpace.uniform(n, 1000.0, file_events=JOB_EVENTS)
        if file_grain
        else DataSpace.uniform(n, 1000.0)
    )
    sched = Scheduler(Topology.uniform(nodes, 0.0), data, build_policy(policy), cost=cost)
    jobs = [
        Job(i, 0.0, IntervalSet.range(i * JOB_EVENTS, (i + 1) * JOB_EVENTS), user=u)
        for i, u in enumerate(users)
    ]
    return SimEngine(sched, warm_users=warm_users).run(jobs)


def _ends(run: SimRun) -> list[float]:
    return [round(r.end_s, 9) for r in sorted(run.jobs, key=lambda r: r.job_id)]


def test_a_users_first_job_on_a_node_pays_the_setup_once() -> None:
    # One node, one slot, jobs in turn: a's first job 0.5 s + 1 s; a's second 1 s; b's
    # first 0.5 s + 1 s; a's third 1 s.
    run = _run(replace(COST, user_setup_s=0.5), ["a", "a", "b", "a"])
    assert _ends(run) == [1.5, 2.5, 4.0, 5.0]


def test_a_node_warm_for_a_user_at_the_start_does_not_charge_it() -> None:
    run = _run(replace(COST, user_setup_s=0.5), ["a", "a", "b", "a"], warm_users={0: ["b"]})
    assert _ends(run) == [1.5, 2.5, 3.5, 4.5]
    # Warm on another node than the one it runs on: charged.
    run = _run(replace(COST, user_setup_s=0.5), ["b"], warm_users={1: ["b"]})
    assert _ends(run) == [1.5]


def test_the_setup_is_per_node() -> None:
    # Two nodes, two jobs of one user at once: each node starts its own.
    run = _run(replace(COST, user_setup_s=0.5), ["a", "a"], nodes=2)
    assert _ends(run) == [1.5, 1.5]


@pytest.mark.parametrize("policy", ["farm", "out-of-order", "splitting"])
@pytest.mark.parametrize("file_grain", [False, True])
def test_no_setup_changes_nothing(policy: str, file_grain: bool) -> None:
    users = ["a", "b", "a", "c", "b", "a"]
    explicit = _run(
        replace(COST, user_setup_s=0.0), users, nodes=2, policy=policy, file_grain=file_grain
    )
    default = _run(COST, users, nodes=2, policy=policy, file_grain=file_grain)
    assert explicit.jobs == default.jobs
    charged = _run(
        replace(COST, user_setup_s=0.5), users, nodes=2, policy=policy, file_grain=file_grain
    )
    # Every job's events done once, every job complete; the run ends later.
    assert [(r.events_processed, r.failed) for r in charged.jobs] == [
        (JOB_EVENTS, False) for _ in users
    ]
    assert max(r.end_s for r in charged.jobs) > max(r.end_s for r in default.jobs)


def test_a_node_keeping_few_sandboxes_starts_a_pushed_out_users_again() -> None:
    # One node keeping two users warm: a, b, c push a out, so a's second job pays again;
    # then c and a are the two kept, and b (pushed out by a) pays again too.
    users = ["a", "b", "c", "a", "c", "b"]
    kept = _run(replace(COST, user_setup_s=0.5, user_sandboxes_kept=2), users)
    assert _ends(kept) == [1.5, 3.0, 4.5, 6.0, 7.0, 8.5]
    # Keeping three (or every user, the default): a is still warm, and b after it.
    for cost in (
        replace(COST, user_setup_s=0.5, user_sandboxes_kept=3),
        replace(COST, user_setup_s=0.5),
    ):
        assert _ends(_run(cost, users)) == [1.5, 3.0, 4.5, 5.5, 6.5, 7.5]
    # Warm at the start in the order given, the least recently used first: with b then a
    # warm and two kept, c's start pushes b out, not a.
    run = _run(
        replace(COST, user_setup_s=0.5, user_sandboxes_kept=2),
        ["c", "a", "b"],
        warm_users={0: ["b", "a"]},
    )
    assert _ends(run) == [1.5, 2.5, 4.0]
    # More warm at the start than the node keeps: the least recent of them is not.
    run = _run(
        replace(COST, user_setup_s=0.5, user_sandboxes_kept=2),
        ["c", "a"],
        warm_users={0: ["c", "b", "a"]},
    )
    assert _ends(run) == [1.5, 2.5]


def test_a_negative_setup_is_refused_by_name() -> None:
    with pytest.raises(ModelError, match="user_setup_s"):
        replace(COST, user_setup_s=-1.0)
    with pytest.raises(ModelError, match="user_sandboxes_kept"):
        replace(COST, user_sandboxes_kept=-1)
