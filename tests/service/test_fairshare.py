"""Fair-share admission (the group priorities and quotas of docs/service.md): the dispatcher
keeps a bounded number of jobs in the runner and hands the next one to the group furthest
below its target share. Driven step by step by a runner that finishes one job when told (no
threads, no clock but the test's)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from datasched.service.contracts import (
    ElementaryJob,
)
from datasched.service.daemon import Dispatcher
from datasched.service.fairshare import FairShare, GroupTurn, cluster_slots, targets
from datasched.service.store import ops
from datasched.service.store.db import Store
from datasched.service.store.models import Request
from datasched.service.users import (
    UserError,
    add_user,
    list_groups,
    list_users,
    set_group,
)
from service.step_support import StepRunner, submit


class Clock:
    """The test's clock: starts now (the store stamps packets with the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _users(store: Store, groups: Mapping[str, Sequence[str]]) -> dict[str, str]:
    with store.session() as s:
        return {u: add_user(s, u, g) for g, users in groups.items() for u in users}


def _dispatcher(store: Store, runner: StepRunner, clock: Clock, **kw: Any) -> Dispatcher:
    d = Dispatcher(store, runner, clock=clock, **kw)
    d.recover()
    runner.start(d.listener)
    return d


def _run(d: Dispatcher, runner: StepRunner, clock: Clock, steps: int) -> list[ElementaryJob]:
    """Dispatch, finish the oldest job held, a second later; ``steps`` times."""
    finished = []
    for _ in range(steps):
        d.dispatch_once()
        if not runner.held:
            break
        finished.append(runner.finish())
        clock.now += 1.0
    return finished


def _shares(store: Store, jobs: Sequence[ElementaryJob]) -> dict[str, float]:
    """Each group's share of ``jobs`` (all of one size: the share of the work)."""
    with store.reading() as s:
        group_of = {u.name: u.group for u in list_users(s)}
    counts = Counter(group_of[j.user] for j in jobs)
    return {g: n / len(jobs) for g, n in counts.items()}


# -- the pure rule -----------------------------------------------------------------------------


def test_the_group_with_least_usage_per_weight_goes_first() -> None:
    fair = FairShare(half_life_s=100.0)
    fair.add("a", "x", 30.0, 3000, now=0.0)
    fair.add("b", "y", 60.0, 6000, now=0.0)
    turns = [GroupTurn("a", 1.0, ("x",)), GroupTurn("b", 3.0, ("y",))]
    assert fair.pick_group(turns, 0.0).name == "b"  # 60 / 3 < 30 / 1
    # What a group already has in the runner counts: 4000 events at 0.01 s each.
    turns[1] = GroupTurn("b", 3.0, ("y",), held_events=4000)
    assert fair.pick_group(turns, 0.0).name == "a"  # (60 + 40) / 3 > 30 / 1
    # Ties: the heavier weight, then the name.
    fresh = FairShare()
    assert fresh.pick_group([GroupTurn("b", 1.0, ("y",)), GroupTurn("a", 2.0, ("x",))], 0).name == (
        "a"
    )
    assert fresh.pick_group([GroupTurn("b", 1.0, ("y",)), GroupTurn("a", 1.0, ("x",))], 0).name == (
        "a"
    )


def test_usage_decays_with_the_half_life_and_loads_back_the_same() -> None:
    fair = FairShare(half_life_s=10.0)
    fair.add("a", "x", 8.0, 800, now=0.0)
    assert fair.usage(20.0)["a"] == pytest.approx(2.0)
    again = FairShare(half_life_s=10.0)
    again.load([("a", "x", 8.0, 800, 0.0)], now=20.0)
    assert again.usage(20.0)["a"] == pytest.approx(2.0)
    assert again.cpu_per_event("a") == pytest.approx(0.01)
    assert again.cpu_per_event("nobody") == pytest.approx(0.01)  # everyone's
    assert FairShare().cpu_per_event("a") == 1.0


def test_users_of_a_group_take_turns_by_name() -> None:
    fair = FairShare()
    picks = [fair.pick_user("g", ["bob", "ann", "cid"]) for _ in range(4)]
    assert picks == ["ann", "bob", "cid", "ann"]
    assert fair.pick_user("g", ["ann", "cid"]) == "cid"  # after ann; bob has nothing


def test_slots_targets_and_bad_values() -> None:
    assert cluster_slots({"nodes": [{"slots": 2}, {"slots": [{}, {}, {}]}]}) == 5
    assert cluster_slots({"nodes": [{"slots": [], "slots_total": 4}]}) == 4
    assert cluster_slots({"nodes": []}) == 0
    assert targets({"a": 1.0, "b": 3.0}) == {"a": 0.25, "b": 0.75}
    with pytest.raises(ValueError, match="half_life_s"):
        FairShare(half_life_s=0.0)


def test_a_group_s_priority_and_quota_are_checked(sqlite_store: Store) -> None:
    with sqlite_store.session() as s:
        info = set_group(s, "phys", priority=2.0, quota=25)
        assert (info.priority, info.quota) == (2.0, 25.0)
        assert set_group(s, "phys", quota=75).priority == 2.0
        for field, kw in (("quota", {"quota": -1.0}), ("priority", {"priority": float("nan")})):
            with pytest.raises(UserError, match=f"^{field}:"):
                set_group(s, "phys", **kw)
        with pytest.raises(UserError, match=r"^group:"):
            set_group(s, "bad name", quota=1.0)
        assert [(g.name, g.quota) for g in list_groups(s)] == [("phys", 75.0)]


# -- the dispatcher ----------------------------------------------------------------------------


def _quotas(store: Store, quotas: Mapping[str, float]) -> None:
    with store.session() as s:
        for g, q in quotas.items():
            set_group(s, g, quota=q)


def test_admitted_work_converges_to_the_quotas(sqlite_store: Store) -> None:
    store = sqlite_store
    tokens = _users(store, {"a": ["ann"], "b": ["bob", "bea"], "c": ["cid"]})
    _quotas(store, {"a": 20, "b": 30, "c": 50})
    for user in tokens:
        submit(store, tokens[user], 30)
    runner, clock = StepRunner(slots=2), Clock()
    d = _dispatcher(store, runner, clock, half_life_s=1e6)
    finished = _run(d, runner, clock, 40)
    assert runner.most_held == 4  # twice the slots, never more
    shares = _shares(store, finished)
    for g, want in {"a": 0.2, "b": 0.3, "c": 0.5}.items():
        assert shares[g] == pytest.approx(want, abs=0.03), shares
    # The dispatcher's own view (decayed CPU) says the same.
    for g, got in d.shares().items():
        assert got == pytest.approx(shares[g], abs=0.03)


def test_a_group_without_work_blocks_nobody(sqlite_store: Store) -> None:
    store = sqlite_store
    tokens = _users(store, {"a": ["ann"], "b": ["bob"], "idle": ["ida"]})
    _quotas(store, {"a": 25, "b": 25, "idle": 50})
    submit(store, tokens["ann"], 12)
    submit(store, tokens["bob"], 4)
    runner, clock = StepRunner(slots=2), Clock()
    d = _dispatcher(store, runner, clock, max_held=3)
    finished = _run(d, runner, clock, 30)
    assert len(finished) == 16  # all of it ran
    assert runner.most_held == 3
    # While both had work they shared equally; then a had the cluster to itself.
    assert _shares(store, finished[:8]) == {"a": 0.5, "b": 0.5}


def test_priorities_order_admission_when_quotas_are_equal(sqlite_store: Store) -> None:
    store = sqlite_store
    tokens = _users(store, {"lo": ["lou"], "hi": ["hal"]})
    with store.session() as s:
        set_group(s, "hi", priority=3.0)
    submit(store, tokens["lou"], 20)
    submit(store, tokens["hal"], 20)
    runner, clock = StepRunner(slots=1), Clock()
    d = _dispatcher(store, runner, clock, half_life_s=1e6)
    d.dispatch_once()
    assert [j.user for j in runner.held] == ["hal", "lou"]  # hi first, then lo's turn
    finished = _run(d, runner, clock, 20)
    assert _shares(store, finished)["hi"] == pytest.approx(0.75, abs=0.05)


def test_a_restart_keeps_the_usage(store: Store) -> None:
    tokens = _users(store, {"a": ["ann"], "b": ["bob"]})
    submit(store, tokens["ann"], 6)
    runner, clock = StepRunner(slots=1), Clock()
    d = _dispatcher(store, runner, clock)
    assert len(_run(d, runner, clock, 6)) == 6  # a alone used the cluster
    used = d.fair.usage(clock.now)["a"]
    # A new daemon on the same store: a's use is remembered, so b's work goes first.
    submit(store, tokens["ann"], 6)
    submit(store, tokens["bob"], 6)
    runner2 = StepRunner(slots=1)
    d2 = _dispatcher(store, runner2, clock)
    assert d2.fair.usage(clock.now)["a"] == pytest.approx(used, rel=0.01)
    finished = _run(d2, runner2, clock, 5)
    assert {j.user for j in finished} == {"bob"}


def test_a_heavy_past_user_waits_only_until_its_usage_decays(sqlite_store: Store) -> None:
    store = sqlite_store
    tokens = _users(store, {"small": ["sam"], "big": ["ann"]})
    _quotas(store, {"small": 1, "big": 99})
    submit(store, tokens["sam"], 10)
    runner, clock = StepRunner(slots=1), Clock()
    d = _dispatcher(store, runner, clock, half_life_s=5.0)
    _run(d, runner, clock, 10)  # small used the cluster alone: 10 CPU seconds
    submit(store, tokens["ann"], 60)
    submit(store, tokens["sam"], 1)
    users = [j.user for j in _run(d, runner, clock, 45)]
    # At weight 1 against 99, sam's 10 s weigh what 990 s of ann's do; as they decay
    # (half-life 5 s) sam's turn comes, after some 30 of ann's jobs: late, not never.
    assert "sam" in users
    assert users.index("sam") >= 10


def test_users_of_a_group_take_turns_oldest_request_first(sqlite_store: Store) -> None:
    store = sqlite_store
    tokens = _users(store, {"g": ["ann", "bob"]})
    first = submit(store, tokens["ann"], 2)
    for _ in range(2):
        submit(store, tokens["ann"], 2)  # ann's requests all come before bob's
    submit(store, tokens["bob"], 3)
    runner, clock = StepRunner(slots=2), Clock()
    d = _dispatcher(store, runner, clock)
    d.dispatch_once()
    assert [j.user for j in runner.held] == ["ann", "bob", "ann", "bob"]
    assert [j.id for j in runner.held if j.user == "ann"] == [f"{first}.0", f"{first}.1"]


def test_a_cancelled_request_is_not_handed_over(store: Store) -> None:
    tokens = _users(store, {"a": ["ann"]})
    rid = submit(store, tokens["ann"], 10)
    runner, clock = StepRunner(slots=1), Clock()
    d = _dispatcher(store, runner, clock)
    assert d.dispatch_once() == 2
    with store.session() as s:
        req = s.get(Request, rid)
        assert req is not None
        held = ops.cancel_request(s, req)
    assert sorted(held) == sorted(j.id for j in runner.held)
    runner.held.clear()
    assert d.dispatch_once() == 0
