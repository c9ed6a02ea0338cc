"""The scheduling core under every registered policy: conservation, single occupancy,
determinism, and hand-checked decisions of the FCFS policies (ponce-hersch Tables 1-2)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import assert_each_event_once, file_space, scheduler, space
from datasched.core.actions import JobCompleted, Preempt, Shrink, Start
from datasched.core.events import JobArrived, SubjobFinished, SubjobShrunk, SubjobStopped
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Pipelining
from datasched.core.scheduler import SchedulerError
from datasched.policies import UnknownPolicyError, available, build_policy
from datasched.sim.engine import SimEngine
from strategies import job_lists

POLICIES = sorted(available())


def run_scenario(
    policy: str,
    jobs: list[Job],
    nodes: int,
    cache_events: int,
    pipelining: Pipelining,
    file_events: int = 0,
    slots: int = 1,
    hot: int | None = None,
) -> SimEngine:
    # With files, caches hold whole files and cuts snap to file boundaries, as in the runtime.
    sched = scheduler(
        policy,
        nodes,
        cache_events,
        min_subjob=3,
        slots=slots,
        data=space(file_events),
        pipelining=pipelining,
        hot=hot,
    )
    engine = SimEngine(sched, check_conservation=True)
    engine.run(jobs)
    return engine


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60, deadline=None)
@given(
    jobs=job_lists(),
    nodes=st.integers(1, 5),
    cache_events=st.sampled_from([0, 50, 150, 1000]),
    pipelining=st.sampled_from(list(Pipelining)),
    file_events=st.sampled_from([0, 0, 7, 40]),
    slots=st.sampled_from([1, 1, 2, 3]),
    hot=st.sampled_from([None, None, 1, 2]),
)
def test_every_event_processed_exactly_once(
    policy: str,
    jobs: list[Job],
    nodes: int,
    cache_events: int,
    pipelining: Pipelining,
    file_events: int,
    slots: int,
    hot: int | None,
) -> None:
    """... with hot-file replication on beside the policy in some of the examples
    (``hot``): it moves data only, so nothing here may change."""
    engine = run_scenario(policy, jobs, nodes, cache_events, pipelining, file_events, slots, hot)
    run = engine.result
    assert_each_event_once(run.processed, jobs)
    assert all(r.end_s >= r.first_start_s >= r.submit_s for r in run.jobs)
    assert engine.scheduler.completed == len(jobs)
    assert not engine.scheduler.jobs
    assert not engine.scheduler.running
    assert sorted(engine.scheduler.idle_slots) == list(range(nodes * slots))
    # Caches never exceed their capacity and the master's directory matches them.
    for node, cache in enumerate(engine.caches):
        assert cache.used_bytes <= cache.capacity_bytes
        assert engine.scheduler.directory.content(node) == cache.content


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=20, deadline=None)
@given(
    jobs=job_lists(),
    nodes=st.integers(1, 4),
    file_events=st.sampled_from([0, 20]),
    hot=st.sampled_from([None, 1]),
)
def test_same_events_in_same_actions_out(
    policy: str, jobs: list[Job], nodes: int, file_events: int, hot: int | None
) -> None:
    def trace() -> list[str]:
        sched = scheduler(policy, nodes, 200, min_subjob=3, data=space(file_events), hot=hot)
        log: list[str] = []
        original = sched.handle

        def handle(event):  # type: ignore[no-untyped-def]
            actions = original(event)
            log.append(repr(event))
            log.extend(repr(a) for a in actions)
            return actions

        sched.handle = handle  # type: ignore[method-assign]
        SimEngine(sched).run(jobs)
        return log

    assert trace() == trace()


@pytest.mark.parametrize("policy", ["farm", "out-of-order"])
def test_by_end_heap_stays_bounded_by_the_nodes(policy: str) -> None:
    # Thousands of subjobs start and end; the master's heap by estimated end (a private
    # structure, checked here because an unbounded one leaks in a master that runs for days)
    # stays within a constant of what runs, not one entry per subjob ever started.
    nodes = 3
    jobs = [
        Job(job_id=i, submit_s=50.0 * i, data=IntervalSet.range(37 * i % 900, 37 * i % 900 + 90))
        for i in range(1500)
    ]
    sched = scheduler(policy, nodes, 300, min_subjob=3)
    # Neither policy asks for the longest subjob, so the master keeps no heap unless asked:
    # asking once, before anything runs, makes it keep one that these policies never pop.
    assert sched.longest_running() is None
    SimEngine(sched).run(jobs)
    assert sched.completed == len(jobs)
    assert sched._by_end is not None
    assert len(sched._by_end) <= 2 * nodes + 1025


def test_by_end_heap_kept_only_once_asked_for_and_then_exact() -> None:
    # Out-of-order never asks for the longest subjob: no heap is kept. Asked from the middle
    # of a run on, the heap built from what runs then answers as a scan of all nodes would,
    # at every event after.
    nodes = 4
    jobs = [
        Job(job_id=i, submit_s=30.0 * i, data=IntervalSet.range(53 * i % 700, 53 * i % 700 + 120))
        for i in range(300)
    ]
    quiet = scheduler("out-of-order", nodes, 300, min_subjob=3)
    SimEngine(quiet).run(jobs)
    assert quiet._by_end is None

    sched = scheduler("out-of-order", nodes, 300, min_subjob=3)
    handle = sched.handle
    seen = []

    def scan() -> int | None:
        due = [
            (-r.end_s, node)
            for node, r in sched.running.items()
            if r.settled and r.end_s > sched.now
        ]
        return min(due)[1] if due else None

    def asking(event):  # type: ignore[no-untyped-def]
        actions = handle(event)
        if event.time > 30.0 * 100:
            seen.append(sched.longest_running())
            assert seen[-1] == scan()
        return actions

    sched.handle = asking  # type: ignore[method-assign]
    SimEngine(sched).run(jobs)
    assert sched.completed == len(jobs)
    assert sum(node is not None for node in seen) > 100


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(UnknownPolicyError, match=r"known: .*farm"):
        build_policy("no-such-policy")


def test_registry_has_the_fcfs_policies_with_sections() -> None:
    for name in ("farm", "splitting", "cache-splitting"):
        cls = available()[name]
        assert cls.section.startswith("ponce-hersch")
        assert cls.summary


# -- hand-driven decisions ---------------------------------------------------------------------


def job(i: int, t: float, a: int, b: int) -> Job:
    return Job(job_id=i, submit_s=t, data=IntervalSet.range(a, b))


def starts(actions: Sequence[object]) -> list[Start]:
    return [a for a in actions if isinstance(a, Start)]


def test_farm_queues_when_all_nodes_are_busy() -> None:
    s = scheduler("farm", 1)
    (first,) = starts(s.handle(JobArrived(0.0, job(0, 0.0, 0, 100))))
    assert first.slot == 0
    assert first.subjob.data == IntervalSet.range(0, 100)
    assert not first.cache_fill
    assert s.handle(JobArrived(1.0, job(1, 1.0, 50, 60))) == []
    assert list(s.job_queue) == [1]
    actions = s.handle(SubjobFinished(80.0, first.subjob.subjob_id, 0))
    assert isinstance(actions[0], JobCompleted)
    assert actions[0].job_id == 0
    (second,) = starts(actions)
    assert second.subjob.job_id == 1
    assert second.slot == 0


def test_splitting_spreads_a_job_over_idle_nodes_in_equal_parts() -> None:
    s = scheduler("splitting", 4)
    got = starts(s.handle(JobArrived(0.0, job(0, 0.0, 0, 1000))))
    assert [a.slot for a in got] == [0, 1, 2, 3]
    assert [a.subjob.data.length for a in got] == [250, 250, 250, 250]
    union = IntervalSet()
    for a in got:
        union = union | a.subjob.data
    assert union == IntervalSet.range(0, 1000)


def test_splitting_respects_the_minimal_subjob_size() -> None:
    s = scheduler("splitting", 10, min_subjob=10)
    got = starts(s.handle(JobArrived(0.0, job(0, 0.0, 0, 35))))
    assert len(got) == 3
    assert all(a.subjob.data.length >= 10 for a in got)


def test_splitting_table1_scenario() -> None:
    """Newcomer takes a node from the job with most nodes per event; suspended part resumes;
    a freed node with nothing waiting splits the largest running subjob in two halves."""
    s = scheduler("splitting", 2)
    a0, a1 = starts(s.handle(JobArrived(0.0, job(0, 0.0, 0, 1000))))
    assert (a0.slot, a1.slot) == (0, 1)
    actions = s.handle(JobArrived(8.0, job(1, 8.0, 5000, 5100)))
    assert starts(actions) == []
    (pre,) = [a for a in actions if isinstance(a, Preempt)]
    assert pre.slot == 0
    # The engine stopped it after 10 events (0.8 s each).
    remaining = a0.subjob.data - a0.subjob.data.head(10)[0]
    (newcomer,) = starts(s.handle(SubjobStopped(8.0, pre.subjob_id, 0, remaining)))
    assert newcomer.slot == 0
    assert newcomer.subjob.job_id == 1
    assert s.jobs[0].suspended[0].data == remaining
    # The newcomer ends: job 0's suspended part resumes on the freed node.
    actions = s.handle(SubjobFinished(88.0, newcomer.subjob.subjob_id, 0))
    assert [a.job_id for a in actions if isinstance(a, JobCompleted)] == [1]
    (resumed,) = starts(actions)
    assert resumed.subjob.data == remaining
    assert resumed.slot == 0
    # Node 1 ends its half; nothing waits, so the largest running subjob is split.
    actions = s.handle(SubjobFinished(400.0, a1.subjob.subjob_id, 1))
    (shrink,) = [a for a in actions if isinstance(a, Shrink)]
    assert shrink.slot == 0
    assert shrink.subjob_id == resumed.subjob.subjob_id
    rest = remaining - remaining.head(390)[0]  # 312 s at 0.8 s per event
    # The running subjob keeps the first half of what is left and goes on; no restart.
    _, give = rest.head(50)
    assert shrink.release == give
    (moved,) = starts(s.handle(SubjobShrunk(400.0, shrink.subjob_id, 0, give)))
    assert moved.slot == 1
    assert moved.subjob.data == give
    assert moved.subjob.preemptible
    assert s.running[0].subjob.data == remaining - give
    assert s.running[0].subjob.subjob_id == resumed.subjob.subjob_id
    # Both halves end together: 100 events at 0.8 s, 50 each.
    assert s.running[0].end_s == s.running[1].end_s == 440.0


def test_cache_splitting_sends_cached_pieces_to_their_nodes() -> None:
    s = scheduler("cache-splitting", 3, 1000)
    s.directory.add(2, IntervalSet.range(0, 400))
    got = starts(s.handle(JobArrived(0.0, job(0, 0.0, 0, 1000))))
    by_node = {a.slot: a.subjob for a in got}
    assert by_node[2].data == IntervalSet.range(0, 400)
    assert by_node[2].cached_on == 2
    assert all(a.cache_fill for a in got)
    union = IntervalSet()
    for sj in by_node.values():
        union = union | sj.data
    assert union == IntervalSet.range(0, 1000)


def test_protocol_errors_are_caught() -> None:
    s = scheduler("farm", 1)
    with pytest.raises(SchedulerError):
        s.handle(SubjobFinished(0.0, 42, 0))
    s.handle(JobArrived(5.0, job(0, 5.0, 0, 10)))
    with pytest.raises(SchedulerError):
        s.handle(JobArrived(1.0, job(1, 1.0, 0, 10)))  # time went backwards


@settings(max_examples=40, deadline=None)
@given(jobs=job_lists(), nodes=st.integers(2, 4))
def test_no_duplicate_fill_keeps_one_copy_per_event(jobs: list[Job], nodes: int) -> None:
    sched = scheduler(
        "cache-splitting", nodes, 1000, min_subjob=3, params={"fill_duplicates": False}
    )
    engine = SimEngine(sched)
    engine.run(jobs)
    seen = IntervalSet()
    for cache in engine.caches:
        assert not (cache.content & seen)
        seen = seen | cache.content
    union = IntervalSet()
    for job in jobs:
        union = union | job.data
    assert seen == union  # the caches are large enough to hold everything once


def test_cuts_snap_to_near_boundaries_only() -> None:
    data = IntervalSet([(0, 50), (100, 150)])
    ranges = scheduler("splitting", 2, min_subjob=10)
    assert ranges.cut(data, 40) == data.head(40)  # range-grained caches: exactly head
    # Whole-file caches: files start at 0, 30, 110 and 200.
    sched = scheduler("splitting", 2, min_subjob=10, data=file_space([30, 80, 90]))
    head, rest = sched.cut(data, 55)
    assert head == IntervalSet([(0, 50), (100, 110)])  # 60 events
    assert head | rest == data
    # The nearest boundary (30) is 10 events away, more than half the smaller part (15 / 2).
    assert sched.cut(data, 15)[0].length == 15
    parts = sched.split_even(data, 2)
    assert [p.length for p in parts] == [60, 40]
    assert parts[0] | parts[1] == data


def test_validate_catches_a_by_end_order_out_of_order() -> None:
    # The by-end order is read in order by the split choice: validate checks it is sorted and
    # holds every settled running subjob.
    jobs = [Job(job_id=i, submit_s=10.0 * i, data=IntervalSet.range(0, 300)) for i in range(4)]
    sched = scheduler("splitting", 3, 300, min_subjob=3)
    assert sched.longest_running() is None  # keep the order from now on
    SimEngine(sched).run(jobs[:1], until=50.0)
    assert sched._by_end
    sched.validate()
    sched._by_end.reverse()
    if len(sched._by_end) > 1:
        with pytest.raises(SchedulerError, match="not sorted"):
            sched.validate()
    sched._by_end.clear()
    with pytest.raises(SchedulerError, match="missing from the by-end order"):
        sched.validate()
