"""The view a policy gets of the scheduler: every member is implemented by the scheduler,
belongs to one group, and is used by some policy (a member nobody calls is contract to keep
for nothing: take it out); its collections are typed read-only."""

from __future__ import annotations

import re
from pathlib import Path

from clusters import EVENT_BYTES, space
from datasched.core.model import Topology
from datasched.core.policy import (
    CacheView,
    ClusterView,
    EstimatesView,
    SchedulerView,
    WorkView,
)
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy

ROOT = Path(__file__).parents[2]
GROUPS = (ClusterView, WorkView, EstimatesView, CacheView)


def members(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass.__module__ == "datasched.core.policy"
        for name in vars(klass)
        if not name.startswith("_")
    }


def test_each_member_is_in_one_group_or_a_command() -> None:
    seen: set[str] = set()
    for group in GROUPS:
        own = members(group)
        assert not own & seen, own & seen
        seen |= own
    commands = set(vars(SchedulerView)) - {n for n in vars(SchedulerView) if n.startswith("_")}
    assert not commands & seen
    assert members(SchedulerView) == seen | commands


def test_the_scheduler_implements_every_member() -> None:
    sched = Scheduler(Topology.uniform(2, 10 * EVENT_BYTES), space(), build_policy("farm"))
    missing = [m for m in members(SchedulerView) if not hasattr(sched, m)]
    assert not missing


def test_every_member_is_used_by_a_policy() -> None:
    sources = [
        *(ROOT / "src" / "datasched" / "policies").rglob("*.py"),
        ROOT / "src" / "datasched" / "core" / "hot.py",
        *(ROOT / "docs" / "examples").glob("*.py"),
    ]
    text = "\n".join(p.read_text() for p in sources)
    unused = sorted(m for m in members(SchedulerView) if not re.search(rf"\.{m}\b", text))
    assert not unused, f"no policy uses {unused}: take them out of the view"


def test_removed_members_stay_out() -> None:
    for name in ("estimated_remaining_s", "balanced_share", "take_suspended", "evict"):
        assert name not in members(SchedulerView)
