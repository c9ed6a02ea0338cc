"""The split index (core/splitindex.py): the candidates it hands out contain the rule's
winner, and ``Scheduler.validate`` catches an index that no longer matches what runs
(docs/performance.md, "Cost per event as the cluster grows")."""

from __future__ import annotations

import random

import pytest

from clusters import scheduler
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Subjob
from datasched.core.scheduler import SchedulerError
from datasched.core.splitindex import SplitIndex
from datasched.core.state import JobState, Running, SubjobState
from datasched.sim.engine import SimEngine


def _left(r: Running, now: float) -> int:
    return r.estimated_remaining(now)


def _scenario(rng: random.Random) -> tuple[dict[int, Running], dict[int, JobState], float]:
    """Subjobs of a few paces, many sharing a start and a size (a balanced split's parts),
    with starts on multiples of the pace so that ends coincide or nearly do."""
    paces = [rng.choice([0.1, 0.3, 0.7, 1 / 3, 0.05]) for _ in range(rng.randint(1, 3))]
    jobs = {
        j: JobState(Job(job_id=j, submit_s=0.0, data=IntervalSet.range(0, 10**6))) for j in range(3)
    }
    running: dict[int, Running] = {}
    next_event = dict.fromkeys(jobs, 0)
    for slot in range(rng.randint(1, 90)):
        job_id = rng.randrange(3)
        pace = rng.choice(paces)
        start = rng.choice([0.0, 1.0, pace * rng.randint(0, 30), rng.uniform(0, 5)])
        length = rng.choice([40, 41, 41, 60, rng.randint(20, 200)])
        if rng.random() < 0.5:
            # Ends equal on paper, apart by rounding: start = j * pace, j + length = 90.
            j = rng.randint(0, 30)
            start, length = j * pace, 90 - j
        ranges = []
        for _ in range(rng.randint(1, 3)):
            a = next_event[job_id] + rng.randint(0, 5)
            ranges.append((a, a + length))
            next_event[job_id] = a + length
        sj = Subjob(subjob_id=1000 + slot, job_id=job_id, data=IntervalSet(ranges))
        r = Running(sj, slot, start, pace)
        if rng.random() < 0.1:
            r.state = SubjobState.STOPPING
        running[slot] = r
        jobs[job_id].running_slots.add(slot)
    # On a multiple of a pace, (now - start) / pace is an integer on paper: its rounding
    # decides the count left.
    now = rng.choice([rng.uniform(0, 6), rng.choice(paces) * rng.randint(1, 60)])
    return running, jobs, now


@pytest.mark.parametrize("seed", range(100))
def test_candidates_hold_each_paces_best_and_every_cached_one(seed: int) -> None:
    rng = random.Random(seed)
    running, jobs, now = _scenario(rng)
    index = SplitIndex(running)
    content = IntervalSet(
        [(a, a + rng.randint(1, 30)) for a in range(0, 2000, rng.randint(50, 400))]
    )
    index.candidates(running, jobs, now, content)  # the larger jobs' maps are kept from now
    # Some leave (their entries go stale), one is shrunk (entered again with less data), one
    # is followed on its slot by a new subjob of the same events (a stop and a restart).
    for slot in rng.sample(sorted(running), k=len(running) // 4):
        r = running.pop(slot)
        jobs[r.subjob.job_id].running_slots.discard(slot)
    if running:
        r = running[rng.choice(sorted(running))]
        r.subjob = r.subjob._replace(data=r.subjob.data.head(r.subjob.data.length // 2)[0])
        r.end_s = r.start_s + r.subjob.data.length * r.s_per_event
        index.add(r)
        slot = rng.choice(sorted(running))
        old = running[slot].subjob
        running[slot] = Running(old._replace(subjob_id=old.subjob_id + 5000), slot, now, 0.2)
        index.add(running[slot])
    index.check(running)
    cached, leaders = index.candidates(running, jobs, now, content)

    settled = {s: r for s, r in running.items() if r.settled}
    expected_cached = sorted(s for s, r in settled.items() if r.subjob.data.overlaps(content))
    assert cached == expected_cached
    others = {s: r for s, r in settled.items() if s not in expected_cached}
    for pace in {r.s_per_event for r in others.values()}:
        group = {s: r for s, r in others.items() if r.s_per_event == pace}
        best = max(group, key=lambda s: (_left(group[s], now), group[s].end_s, -s))
        assert best in leaders, (pace, best, leaders)
    assert set(leaders) <= set(others)
    assert len(set(leaders)) == len(leaders)


def test_a_later_end_by_rounding_may_have_fewer_events_left() -> None:
    # Started at 3 * 0.1 with 87 events and at 6 * 0.1 with 84 at 0.1 s an event, they end
    # at 9.000000000000002 and 9.0; yet at 0.8 s the first has 87 - 5 = 82 events left and
    # the second 84 - 1 = 83 ((0.8 - 0.6000000000000001) / 0.1 rounds below 2): the one
    # ending last is not the one with the most left, and the index must hand out both.
    job = JobState(Job(job_id=0, submit_s=0.0, data=IntervalSet.range(0, 1000)))
    running = {}
    for slot, j in ((0, 3), (1, 6)):
        sj = Subjob(
            subjob_id=slot, job_id=0, data=IntervalSet.range(100 * slot, 100 * slot + 90 - j)
        )
        running[slot] = Running(sj, slot, j * 0.1, 0.1)
        job.running_slots.add(slot)
    now = 0.8
    assert running[0].end_s > running[1].end_s
    assert _left(running[0], now) < _left(running[1], now)
    cached, leaders = SplitIndex(running).candidates(running, {0: job}, now, IntervalSet())
    assert cached == []
    assert sorted(leaders) == [0, 1]


def test_validate_catches_an_index_that_does_not_match_what_runs() -> None:
    jobs = [Job(job_id=i, submit_s=10.0 * i, data=IntervalSet.range(0, 3000)) for i in range(3)]
    # More running subjobs of a job than 8: the index keeps the job's map.
    sched = scheduler("cache-splitting", 24, 3000)
    SimEngine(sched).run(jobs, until=40.0)
    assert sched.running
    sched.split_candidates(IntervalSet.range(0, 10))  # keep the index from now on
    index = sched._split_index
    assert index is not None
    sched.validate()
    slot, r = next((s, r) for s, r in sched.running.items() if r.settled)

    # A subjob missing from its cohort.
    key = (r.s_per_event, r.start_s, r.subjob.data.length)
    members = index._cohorts[key]
    saved = list(members)
    members.remove((slot, r.subjob.subjob_id))
    with pytest.raises(SchedulerError, match="missing from the split index"):
        sched.validate()
    members[:] = saved
    sched.validate()

    # An event of it marked as another subjob's.
    run_map = index._maps[r.subjob.job_id]
    event = r.subjob.data.start
    i = run_map.starts.index(
        next(a for a in run_map.starts if a <= event < run_map.stops[run_map.starts.index(a)])
    )
    owner = run_map.owners[i]
    run_map.owners[i] = (slot, -1)
    with pytest.raises(SchedulerError, match="not marked as its"):
        sched.validate()
    run_map.owners[i] = owner
    sched.validate()
