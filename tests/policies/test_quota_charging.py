"""Usage behind PROOF's quota priorities: charged when a packet is handed out (its expected
cost), corrected when it returns (its real cost), counted in CPU seconds where the engine
reports them (``SubjobFinished.cpu_s``) and in slot seconds otherwise; and a slot's sessions
starting level served heaviest first."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from clusters import space
from datasched.core.actions import Assign
from datasched.core.events import JobArrived, SubjobFinished, SubjobStopped
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.policies.proof.groups import GROUP_PARAMS
from datasched.policies.proof.sessions import GroupScheduler, SlotShares


def groups(**over: Any) -> GroupScheduler:
    params = {p.name: p.default for p in GROUP_PARAMS}
    params.update(over)
    return GroupScheduler(params)


def test_usage_is_charged_on_assignment_and_corrected_on_return_by_hand() -> None:
    """Half-life 100 s. A packet of 100 events of a's job goes out at 0 with nothing measured
    yet: a is charged the engine's estimate, 5 s. It returns at 100 s with 8 CPU s: what is
    left of the 5 s (2.5) is taken back and 8 charged, so a has 8, as charging on return
    would give. Its job now costs 8 / 100 = 0.08 s an event: a packet of 50 events is
    charged 4. b's packet, never charged ahead and reported without CPU time, counts its
    slot's 6 s. A packet never reported (a lost node) leaves nothing behind: at 200 s, a has
    8 halved, 4."""
    gs = groups(quotas="a=50,b=50", usage_half_life_s=100.0)
    gs.add(0, "a", "alice")
    gs.add(1, "b", "bob")
    gs.assigned(0, 0, 100, 5.0, 0.0)
    assert gs.usage.groups["a"] == pytest.approx(5.0)
    gs.used(0, 0, 12.0, 100.0, events=100, cpu_s=8.0)
    assert gs.usage.groups["a"] == pytest.approx(8.0)
    assert gs.expected_cost(0, 50, 99.0) == pytest.approx(4.0)
    gs.assigned(0, 1, 50, 99.0, 100.0)
    assert gs.usage.groups["a"] == pytest.approx(12.0)
    assert gs.usage.users[("a", "alice")] == pytest.approx(12.0)
    gs.used(1, 2, 6.0, 100.0, events=30)
    assert gs.usage.groups["b"] == pytest.approx(6.0)
    gs.withdraw(1, 200.0)
    assert gs.usage.shares(200.0) == pytest.approx({"a": 4.0 / 7.0, "b": 3.0 / 7.0})


def test_level_sessions_go_heaviest_first() -> None:
    """Three sessions level on a slot: the heaviest first (not the one listed first), then
    by weight; once served, the weighted time decides as before."""
    shares = SlotShares()
    weight: dict[Hashable, float] = {"light": 50.0, "heavy": 800.0, "mid": 100.0}
    assert shares.order(0, ["light", "heavy", "mid"], weight) == ["heavy", "mid", "light"]
    shares.served(0, "heavy")
    shares.used(0, "heavy", 8.0, 800.0)  # 0.01 weighted seconds
    assert shares.order(0, ["light", "heavy", "mid"], weight) == ["mid", "light", "heavy"]


def run_two_packets(cpu_s: float | None) -> tuple[float, int, int]:
    """A job of group a on one slot: its first packet finishes at 10 s, reporting
    ``cpu_s``; the usage of a just after (the second packet already charged ahead), and the
    two packets' events."""
    policy = build_policy(
        "basic-packetizer", packet_events=40, quotas="a=50,b=50", usage_half_life_s=1e12
    )
    sched = Scheduler(Topology.uniform(1, 0.0), space(0, 1000), policy)
    job = Job(0, 0.0, IntervalSet.range(0, 1000), user="alice", group="a")
    (first,) = [a for a in sched.handle(JobArrived(0.0, job)) if isinstance(a, Assign)]
    done = SubjobFinished(10.0, first.subjob.subjob_id, first.slot, cpu_s=cpu_s)
    (second,) = [a for a in sched.handle(done) if isinstance(a, Assign)]
    usage = policy.groups.usage.groups["a"]  # type: ignore[attr-defined]
    return usage, first.subjob.data.length, second.subjob.data.length


def test_the_cpu_time_a_finished_packet_reports_is_its_usage() -> None:
    """Reported: 3 CPU s for the first packet, and the second charged ahead at the same cost
    an event. Not reported: the slot's 10 s, likewise."""
    usage, n1, n2 = run_two_packets(3.0)
    assert usage == pytest.approx(3.0 + 3.0 * n2 / n1)
    usage, n1, n2 = run_two_packets(None)
    assert usage == pytest.approx(10.0 + 10.0 * n2 / n1)


def test_the_scheduler_keeps_the_cpu_time_of_what_left_each_slot() -> None:
    policy = build_policy("basic-packetizer", packet_events=40)
    sched = Scheduler(Topology.uniform(1, 0.0), space(0, 1000), policy)
    job = Job(0, 0.0, IntervalSet.range(0, 1000))
    (first,) = [a for a in sched.handle(JobArrived(0.0, job)) if isinstance(a, Assign)]
    sj = first.subjob
    rest = IntervalSet.range(sj.data.start + 10, sj.data.stop)
    out = sched.handle(SubjobStopped(1.0, sj.subjob_id, first.slot, rest, cpu_s=0.5))
    assert sched.left_cpu_s == {first.slot: 0.5}
    (second,) = [a for a in out if isinstance(a, Assign)]
    sched.handle(SubjobFinished(2.0, second.subjob.subjob_id, second.slot))
    assert sched.left_cpu_s == {}  # not measured: no stale value
