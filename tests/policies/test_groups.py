"""PROOF's resource scheduling: the normalised priority, levels, nice values and the central
scheduler's formula on hand-computed cases; usage with decay; the quota priorities; and, in
the simulator, CPU shared by weight, the round-robin fallback, and queries of N workers."""

from __future__ import annotations

import math

import pytest

from clusters import space
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.policies.proof.groups import (
    QuotaPriorities,
    UsageHistory,
    clipped,
    cpu_weight,
    nice_value,
    normalised_priorities,
    parse_groups,
    priority_levels,
    workers_for_query,
)
from datasched.policies.proof.sessions import SlotShares
from datasched.sim.engine import SimEngine, SimRun


def test_normalised_priority_by_hand() -> None:
    """Active groups a (priority 2, one user) and b (1, two users); c has nobody active.
    Mean priority of the active groups 1.5: P̄_a = 2 / 1.5 / 1, P̄_b = 1 / 1.5 / 2."""
    pbar = normalised_priorities({"a": 2.0, "b": 1.0, "c": 5.0}, {"a": 1, "b": 2, "c": 0})
    assert pbar == pytest.approx({"a": 4 / 3, "b": 1 / 3})
    assert normalised_priorities({"a": 2.0}, {}) == {}
    assert normalised_priorities({}, {"x": 1}) == {"x": 1.0}  # undeclared: priority 1


def test_levels_and_nice_values_by_hand() -> None:
    """The largest gets 40; b, a quarter of it, floor(0.25 x 39) + 1 = 10: nice -20 and 10."""
    levels = priority_levels({"a": 4 / 3, "b": 1 / 3})
    assert levels == {"a": 40, "b": 10}
    assert [nice_value(v) for v in levels.values()] == [-20, 10]
    assert priority_levels({"x": 1.0, "y": 1.0}) == {"x": 40, "y": 40}
    assert priority_levels({"a": 1.0, "b": 0.5}, 1, 20) == {"a": 20, "b": 10}
    assert clipped(1 / 50, 1.0)
    assert not clipped(1 / 39, 1.0)
    assert not clipped(1.0, 1.0)


def test_workers_for_a_query_by_hand() -> None:
    """N = N_free x f x P̄ + N_min: 10 x 0.5 x 4/3 + 2 = 8.67, 8 workers; never more than the
    slots, never none."""
    assert workers_for_query(10, 0.5, 4 / 3, 2, 16) == 8
    assert workers_for_query(100, 0.5, 4 / 3, 2, 16) == 16
    assert workers_for_query(0, 0.5, 1.0, 0, 16) == 1
    assert workers_for_query(6, 1.0, 1 / 3, 1, 16) == 3


def test_cpu_weights_of_the_two_kernels() -> None:
    """The paper's Linux: 5 ms x (20 - nice) a slice from nice 0 up, 20 ms x (20 - nice)
    below; today's: 1024 / 1.25 ** nice."""
    assert [cpu_weight(n) for n in (19, 10, 0, -1, -20)] == [5.0, 50.0, 100.0, 420.0, 800.0]
    assert cpu_weight(0, "cfs") == 1024.0
    assert cpu_weight(1, "cfs") == pytest.approx(819.2)
    assert cpu_weight(-2, "cfs") == pytest.approx(1600.0)


def test_group_lists_parse_or_name_the_parameter() -> None:
    assert parse_groups("a=10, b=2.5,", "quotas") == {"a": 10.0, "b": 2.5}
    assert parse_groups("", "quotas") == {}
    for bad in ("a", "a=x", "a=0", "=3", "a=1,a=2", "a=nan"):
        with pytest.raises(ValueError, match=r"^quotas: "):
            parse_groups(bad, "quotas")


def test_usage_decays_with_its_half_life() -> None:
    usage = UsageHistory(half_life_s=100.0)
    assert usage.shares(0.0) == {}
    usage.add("a", "u1", 100.0, 0.0)
    usage.add("b", "u2", 50.0, 100.0)  # a's 100 s count 50 by then
    assert usage.shares(100.0) == pytest.approx({"a": 0.5, "b": 0.5})
    assert usage.users[("a", "u1")] == pytest.approx(50.0)


def test_quota_priorities_feed_forward_by_hand() -> None:
    """Targets 80/20 %, one user each, the paper's Linux: a's session weighs 800 (level 40);
    b's should weigh a quarter, 200, nearest level 20 (weight 100; level 21 weighs 420), whose
    priority is (20 - 1 + 0.5) / 39 = 0.5 of a's."""
    quota = QuotaPriorities({"a": 80.0, "b": 20.0})
    prio = quota.priorities({"a": 1, "b": 1})
    assert prio == pytest.approx({"a": 1.0, "b": 0.5})
    assert priority_levels(normalised_priorities(prio, {"a": 1, "b": 1})) == {"a": 40, "b": 20}
    # Two users in b: each of its sessions should weigh 100, still level 20 (priority x 2).
    assert quota.priorities({"a": 1, "b": 2}) == pytest.approx({"a": 1.0, "b": 1.0})


def test_quota_feedback_raises_a_group_below_its_target() -> None:
    quota = QuotaPriorities({"a": 50.0, "b": 50.0}, period_s=10.0)
    usage = UsageHistory(half_life_s=1000.0)
    usage.add("a", "u", 90.0, 0.0)
    usage.add("b", "u", 10.0, 0.0)
    assert quota.update(usage, ["a", "b"], 0.0)
    assert quota.correction["b"] > 1.0 > quota.correction["a"]
    assert not quota.update(usage, ["a", "b"], 5.0)  # within the period: nothing


def test_a_slot_serves_the_entity_furthest_behind() -> None:
    shares = SlotShares()
    assert shares.order(0, ["x", "y"]) == ["x", "y"]
    shares.used(0, "x", 10.0, 2.0)  # 5 weighted seconds
    shares.used(0, "y", 6.0, 1.0)  # 6
    assert shares.order(0, ["x", "y"]) == ["x", "y"]
    shares.served(0, "x")
    shares.used(0, "x", 4.0, 2.0)  # 7
    assert shares.order(0, ["x", "y", "z"]) == ["z", "y", "x"]  # z starts at the floor, 5


# -- in the simulator ------------------------------------------------------------------------

FILE = 500
JOB = 8_000
"""Events of a job that competes for the slots: more than the time measured."""
MEASURE_S = 2_800.0
"""Whole rounds of the weighted sharing below (a slot's sessions are served in rounds)."""


def shares_of(run: SimRun, group_of: dict[int, str], until_s: float) -> dict[str, float]:
    assert run.packets is not None
    cpu: dict[str, float] = {}
    for p in run.packets:
        if p.end_s <= until_s:
            cpu[group_of[p.job_id]] = cpu.get(group_of[p.job_id], 0.0) + (p.end_s - p.start_s)
    total = sum(cpu.values())
    return {g: c / total for g, c in sorted(cpu.items())}


def contend(users: dict[str, int], params: dict[str, object]) -> dict[str, float]:
    """Every user's job on the same two slots (data in central storage, packets of 20 s),
    CPU shares over the first 2,800 s."""
    jobs: list[Job] = []
    group_of: dict[int, str] = {}
    for group, n in users.items():
        for u in range(n):
            job_id = len(jobs)
            data = IntervalSet.range(job_id * JOB, (job_id + 1) * JOB)
            jobs.append(Job(job_id, 0.0, data, user=f"{group}{u}", group=group))
            group_of[job_id] = group
    policy = build_policy("basic-packetizer", packet_events=25, min_workers=2, **params)
    sched = Scheduler(Topology.uniform(2, 0.0), space(JOB, len(jobs) * JOB), policy)
    run = SimEngine(sched, record_packets=True).run(jobs)
    return shares_of(run, group_of, MEASURE_S)


def test_sessions_share_a_slot_by_the_weight_of_their_nice_value() -> None:
    """Priorities 3:1, one user each: levels 40 and floor(39 / 3) + 1 = 14, nice -20 and 6,
    weights 800 and 70 under the paper's Linux: 92 % and 8 % of the CPU."""
    got = contend({"hi": 1, "lo": 1}, {"priorities": "hi=3,lo=1"})
    assert got["hi"] == pytest.approx(800 / 870, abs=0.02)


def test_too_many_users_in_a_low_group_take_turns() -> None:
    """Equal priorities, a with one user, b with ten; four levels. Each b session deserves a
    tenth of a's, below the lowest level: alone, each gets that level (weight 5 against a's
    20), and b takes 50 / 70 of the CPU. Taking turns, b's sessions weigh as one of
    priority 1, level 4 like a: half each, as the priorities say."""
    users = {"a": 1, "b": 10}
    alone = contend(users, {"priorities": "a=1,b=1", "levels": 4, "round_robin": False})
    turns = contend(users, {"priorities": "a=1,b=1", "levels": 4})
    assert alone["b"] == pytest.approx(50 / 70, abs=0.02)
    assert turns["b"] == pytest.approx(0.5, abs=0.02)


def test_the_central_scheduler_gives_a_query_n_workers() -> None:
    """Eight one-slot nodes, f = 0.5, N_min = 1, one group: the first query finds 8 free
    slots, 8 x 0.5 x 1 + 1 = 5 workers; the second, 3 free, 3 x 0.5 + 1 = 2."""
    policy = build_policy("adaptive-packetizer", priorities="g=1", calibration_events=50)
    sched = Scheduler(Topology.uniform(8, 0.0), space(FILE, 2 * FILE), policy, cost=CostModel())
    jobs = [
        Job(i, float(i), IntervalSet.range(i * FILE, (i + 1) * FILE), group="g") for i in range(2)
    ]
    run = SimEngine(sched, record_packets=True).run(jobs)
    assert run.packets is not None
    slots = [{p.slot for p in run.packets if p.job_id == j} for j in range(2)]
    assert [len(s) for s in slots] == [5, 2]
    assert not slots[0] & slots[1]
    assert math.isfinite(run.end_s)


def test_the_nice_value_a_packet_runs_at_by_hand() -> None:
    """Groups a (priority 1) and b (3), one user each: P̄ = 0.5 and 1.5; levels floor(0.5 /
    1.5 x 39) + 1 = 14 and 40; nice 20 - level = 6 and -20, with ``os_nice``; without it
    (the slots' order applies the priority alone) or without priorities: None."""
    policy = build_policy("basic-packetizer", priorities="a=1,b=3", os_nice=True)
    policy.groups.add(0, "a", "alice")  # type: ignore[attr-defined]
    policy.groups.add(1, "b", "bob")  # type: ignore[attr-defined]
    assert (policy.packet_nice(0), policy.packet_nice(1)) == (6, -20)
    assert policy.packet_nice(7) is None  # not a job of the policy's
    assert build_policy("basic-packetizer").packet_nice(0) is None
    plain = build_policy("basic-packetizer", priorities="a=1,b=3")
    plain.groups.add(0, "a", "alice")  # type: ignore[attr-defined]
    assert plain.packet_nice(0) is None
    assert build_policy("out-of-order").packet_nice(0) is None
