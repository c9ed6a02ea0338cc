"""Out-of-order scheduling (ponce-hersch Table 3): cached work first, displacement, fairness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters import scheduler
from datasched.core.actions import Preempt, Start
from datasched.core.events import JobArrived, SubjobStopped
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Subjob
from datasched.policies.ponce.outoforder import OutOfOrder
from datasched.sim.engine import SimEngine
from strategies import job_lists


def job(i: int, t: float, a: int, b: int) -> Job:
    return Job(job_id=i, submit_s=t, data=IntervalSet.range(a, b))


def test_cached_work_displaces_non_cached_work_which_goes_back_to_the_front() -> None:
    s = scheduler("out-of-order", 1, 10_000)
    policy = s.policy
    assert isinstance(policy, OutOfOrder)
    s.directory.add(0, IntervalSet.range(5000, 6000))  # node 0 caches job 1's data
    (first,) = [a for a in s.handle(JobArrived(0.0, job(0, 0.0, 0, 1000))) if isinstance(a, Start)]
    assert first.subjob.cached_on is None
    (pre,) = [
        a for a in s.handle(JobArrived(80.0, job(1, 80.0, 5000, 6000))) if isinstance(a, Preempt)
    ]
    assert pre.slot == 0
    rest = first.subjob.data - first.subjob.data.head(100)[0]
    (cached,) = [
        a for a in s.handle(SubjobStopped(80.0, pre.subjob_id, 0, rest)) if isinstance(a, Start)
    ]
    assert cached.subjob.job_id == 1
    assert cached.subjob.cached_on == 0
    assert policy.nocache[0].data == rest  # back at the front of the no-cache queue


def test_fairness_bound_runs_an_overdue_job_first_and_is_counted() -> None:
    """A job with no cached data keeps being overtaken by jobs whose data node 0 caches;
    once it has waited longer than the bound, the next free node runs it."""
    sched = scheduler("out-of-order", 1, 100_000, params={"fairness_h": 1.0})
    policy = sched.policy
    assert isinstance(policy, OutOfOrder)
    engine = SimEngine(sched)
    warm = [job(0, 0.0, 0, 500)]  # fills node 0's cache with [0, 500)
    starved = [job(1, 500.0, 10_000, 10_100)]
    # Cached jobs over [0, 500) arrive every 100 s and each takes 130 s of cached reads, so
    # node 0's own queue never empties and always goes before the no-cache queue.
    cached = [job(2 + i, 401.0 + 100.0 * i, 0, 500) for i in range(80)]
    run = engine.run(warm + starved + cached)
    times = {r.job_id: r for r in run.jobs}
    wait = times[1].first_start_s - times[1].submit_s
    assert policy.fairness_fired == 1
    assert 3600.0 < wait < 3600.0 + 130.0 + 1.0  # ran at the first node free after the bound


@settings(max_examples=40, deadline=None)
@given(jobs=job_lists(), nodes=st.integers(2, 4), after=st.integers(1, 3))
def test_replication_conserves_events_and_keeps_the_directory_true(
    jobs: list[Job], nodes: int, after: int
) -> None:
    sched = scheduler("out-of-order", nodes, 300, min_subjob=3, params={"replicate_after": after})
    engine = SimEngine(sched, check_conservation=True)
    run = engine.run(jobs)
    assert run.processed is not None
    for j in jobs:
        union = IntervalSet()
        for piece in run.processed[j.job_id]:
            assert not (piece & union)
            union = union | piece
        assert union == j.data
    for node, cache in enumerate(engine.caches):
        assert engine.scheduler.directory.content(node) == cache.content


def test_replication_fires_on_the_third_remote_read() -> None:
    sched = scheduler("out-of-order", 2, 10_000, params={"replicate_after": 3})
    policy = sched.policy
    assert isinstance(policy, OutOfOrder)
    assert policy.reads.peer_reads  # giving replicate_after turns replication on

    def replicates(sj: Subjob, slot: int) -> bool:
        return policy.read_mode(sched, sj, slot).replicate

    stolen = Subjob(subjob_id=0, job_id=0, data=IntervalSet.range(0, 500), cached_on=0)
    assert [replicates(stolen, 1) for _ in range(3)] == [False, False, True]
    assert policy.replications == 1
    assert not replicates(stolen, 0)  # reading its own cache is not remote
    # Counted per job as well (the paper's measure is a share of job arrivals).
    other = Subjob(subjob_id=1, job_id=0, data=IntervalSet.range(0, 500), cached_on=0)
    assert replicates(other, 1)
    assert policy.counters() == {"fairness_fired": 0, "replications": 2, "replicated_jobs": 1}


def test_replicate_after_with_replication_off_is_refused() -> None:
    """Giving replicate_after turns replication on: with replication=False beside it, one
    of the two would be ignored (the service and library callers are told, as the command
    line is)."""
    from datasched.core.policy import ParamError
    from datasched.policies import build_policy

    with pytest.raises(ParamError, match="sets replication=True; not with replication=False"):
        build_policy("out-of-order", replicate_after=3, replication=False)
    policy = build_policy("out-of-order", replicate_after=3, replication=True)
    assert isinstance(policy, OutOfOrder)
    assert policy.reads.peer_reads
