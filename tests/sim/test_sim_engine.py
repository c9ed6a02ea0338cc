"""The simulated engine's answers to the core's actions, driven by a scripted scheduler."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from clusters import EVENT_BYTES, space
from datasched.core.actions import (
    Action,
    Evict,
    Fetch,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    WakeAt,
)
from datasched.core.events import (
    CacheChanged,
    Event,
    FetchDone,
    JobArrived,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
    TransferDone,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Subjob, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine

TERTIARY_S = 0.8  # 0.2 s CPU + 0.6 s to read 600 KB at 1 MB/s
CACHE_S = 0.26  # 0.2 s CPU + 0.06 s to read 600 KB at 10 MB/s


class Scripted(Scheduler):
    """A one-node scheduler whose decisions are the script's: each event is answered with
    the script's actions (the engine's side, tested alone)."""

    def __init__(
        self, script: Callable[[Event], list[Action]], file_events: int = 0, nodes: int = 1
    ) -> None:
        super().__init__(
            Topology.uniform(nodes, 1000 * EVENT_BYTES), space(file_events), build_policy("farm")
        )
        self.script = script
        self.seen: list[Event] = []

    def handle(self, event: Event) -> list[Action]:
        self.seen.append(event)
        return self.script(event)


def run_script(
    script: Callable[[Event], list[Action]],
    data: IntervalSet,
    cached: IntervalSet,
    file_events: int = 0,
) -> Scripted:
    sched = Scripted(script, file_events)
    engine = SimEngine(sched, check_conservation=True)
    engine.caches[0].insert(cached, 0.0)
    engine.run([Job(0, 0.0, data)])
    return sched


def shrink_at(time: float, release: IntervalSet) -> Callable[[Event], list[Action]]:
    subjob = Subjob(subjob_id=7, job_id=0, data=IntervalSet.range(0, 100))

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Start(subjob, 0, cache_fill=True), WakeAt(time)]
        if isinstance(event, Tick):
            return [Shrink(subjob_id=7, slot=0, release=release)]
        return []

    return script


def test_shrink_releases_what_is_not_processed_and_moves_the_finish() -> None:
    # 30 s at 0.8 s per event: 37 events done, the 38th (event 37) in progress and kept.
    sched = run_script(
        shrink_at(30.0, IntervalSet.range(20, 100)), IntervalSet.range(0, 100), IntervalSet()
    )
    (shrunk,) = [e for e in sched.seen if isinstance(e, SubjobShrunk)]
    assert shrunk.released == IntervalSet.range(38, 100)
    (finished,) = [e for e in sched.seen if isinstance(e, SubjobFinished)]
    assert finished.time == pytest.approx(38 * TERTIARY_S)
    assert finished.cache_added == IntervalSet.range(0, 38)


def test_shrink_of_a_middle_part_keeps_both_ends_of_a_one_segment_subjob() -> None:
    # One segment, one released range inside it (the engine's short path): the subjob goes
    # on with events 0-59 and 80-99, 80 events at 0.8 s, and caches both.
    sched = run_script(
        shrink_at(30.0, IntervalSet.range(60, 80)), IntervalSet.range(0, 100), IntervalSet()
    )
    (shrunk,) = [e for e in sched.seen if isinstance(e, SubjobShrunk)]
    assert shrunk.released == IntervalSet.range(60, 80)
    (finished,) = [e for e in sched.seen if isinstance(e, SubjobFinished)]
    assert finished.time == pytest.approx(80 * TERTIARY_S)
    assert finished.cache_added == IntervalSet([(0, 60), (80, 100)])


def test_shrink_follows_the_pace_of_each_segment() -> None:
    # Events 0-49 cached (0.26 s), the rest from tertiary storage (0.8 s): at 20 s, 50
    # cached events took 13 s, and 8 tertiary ones 6.4 s; event 58 is in progress.
    sched = run_script(
        shrink_at(20.0, IntervalSet([(40, 45), (70, 100)])),
        IntervalSet.range(0, 100),
        IntervalSet.range(0, 50),
    )
    (shrunk,) = [e for e in sched.seen if isinstance(e, SubjobShrunk)]
    assert shrunk.released == IntervalSet.range(70, 100)
    (finished,) = [e for e in sched.seen if isinstance(e, SubjobFinished)]
    assert finished.time == pytest.approx(50 * CACHE_S + 20 * TERTIARY_S)
    assert finished.cache_added == IntervalSet.range(50, 70)


def test_a_shrink_after_the_end_of_the_data_releases_nothing() -> None:
    sched = run_script(
        shrink_at(79.9, IntervalSet.range(90, 100)), IntervalSet.range(0, 100), IntervalSet()
    )
    (shrunk,) = [e for e in sched.seen if isinstance(e, SubjobShrunk)]
    assert not shrunk.released
    (finished,) = [e for e in sched.seen if isinstance(e, SubjobFinished)]
    assert finished.time == pytest.approx(100 * TERTIARY_S)


# -- whole-file caches -------------------------------------------------------------------------

FILE_EVENTS = 50
FETCH_S = FILE_EVENTS * EVENT_BYTES / 1e6  # a 30 MB file at 1 MB/s


def run_until(time: float | None, data: IntervalSet, cached: IntervalSet) -> Scripted:
    """One subjob over ``data`` on files of 50 events, preempted at ``time`` if given."""
    subjob = Subjob(subjob_id=3, job_id=0, data=data)

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Start(subjob, 0, cache_fill=True), *([WakeAt(time)] if time else [])]
        if isinstance(event, Tick):
            return [Preempt(subjob_id=3, slot=0)]
        return []

    return run_script(script, data, cached, file_events=FILE_EVENTS)


def test_a_file_read_from_tertiary_storage_is_fetched_whole_then_read_from_disk() -> None:
    # Events [20, 80): the rest of file 0 and most of file 1. Each file is fetched whole
    # (30 s), then its events are read from the local disk (0.26 s each).
    sched = run_until(None, IntervalSet.range(20, 80), IntervalSet())
    (finished,) = [e for e in sched.seen if isinstance(e, SubjobFinished)]
    assert finished.time == pytest.approx(2 * FETCH_S + 60 * CACHE_S)
    assert finished.cache_added == IntervalSet.range(0, 100)  # both files, whole


def test_a_cached_file_is_not_fetched_again() -> None:
    sched = run_until(None, IntervalSet.range(20, 80), IntervalSet.range(0, 50))
    (finished,) = [e for e in sched.seen if isinstance(e, SubjobFinished)]
    assert finished.time == pytest.approx(FETCH_S + 60 * CACHE_S)
    assert finished.cache_added == IntervalSet.range(50, 100)


def test_a_subjob_stopped_after_a_fetch_keeps_the_fetched_file() -> None:
    # Stopped 5 s after the first fetch ended: 19 events of file 0 done, file 1 not fetched.
    sched = run_until(FETCH_S + 5.0, IntervalSet.range(0, 100), IntervalSet())
    (stopped,) = [e for e in sched.seen if isinstance(e, SubjobStopped)]
    assert stopped.remaining == IntervalSet.range(19, 100)
    assert stopped.cache_added == IntervalSet.range(0, 50)
    # Stopped during the first fetch: nothing processed, nothing cached.
    sched = run_until(10.0, IntervalSet.range(0, 100), IntervalSet())
    (stopped,) = [e for e in sched.seen if isinstance(e, SubjobStopped)]
    assert stopped.remaining == IntervalSet.range(0, 100)
    assert not stopped.cache_added


# -- moving data -------------------------------------------------------------------------------


def test_fetches_share_a_link_and_replicas_come_from_peers() -> None:
    # Two fetches of one file each into node 1 share its 1 MB/s link to tertiary storage:
    # both take twice as long as one alone. A replication from node 1 to node 0 then crosses
    # the two nodes' 125 MB/s network links.
    a, b = IntervalSet.range(0, 50), IntervalSet.range(50, 100)

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Fetch(1, a), Fetch(1, b)]
        if isinstance(event, FetchDone) and event.data == b:
            return [Replicate(1, 0, a | b)]
        return []

    sched = Scripted(script, file_events=FILE_EVENTS, nodes=2)
    engine = SimEngine(sched)
    engine.run([Job(0, 0.0, IntervalSet.range(0, 1))])
    done = [e for e in sched.seen if isinstance(e, FetchDone | TransferDone)]
    assert [type(e).__name__ for e in done] == ["FetchDone", "FetchDone", "TransferDone"]
    assert done[0].time == pytest.approx(2 * FETCH_S)
    assert done[1].time == done[0].time
    assert done[0].added == a
    assert done[1].added == b
    copied = done[2]
    assert isinstance(copied, TransferDone)
    assert copied.added == a | b
    assert copied.source == 1
    assert copied.node == 0
    assert copied.time == pytest.approx(2 * FETCH_S + 2 * FILE_EVENTS * EVENT_BYTES / 125e6)
    assert engine.caches[0].content == a | b
    assert engine.result.bytes_transferred == pytest.approx(4 * FILE_EVENTS * EVENT_BYTES)


def test_evict_drops_only_what_is_not_pinned() -> None:
    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Pin(0, IntervalSet.range(0, 10), token=1), Evict(0, IntervalSet.range(0, 100))]
        return []

    sched = run_script(script, IntervalSet.range(0, 1), IntervalSet.range(0, 100), FILE_EVENTS)
    (changed,) = [e for e in sched.seen if isinstance(e, CacheChanged)]
    assert changed.evicted == IntervalSet.range(50, 100)  # file 0 is pinned


def test_public_steps_resume_a_run_stopped_at_a_time() -> None:
    """``run(until=...)`` stops before the first entry after that time; stepping on with
    ``peek``/``step`` ends every job exactly when an uninterrupted run does."""
    from clusters import scheduler as small_cluster

    jobs = [Job(i, 300.0 * i, IntervalSet.range(100 * i, 100 * i + 400)) for i in range(8)]
    whole = SimEngine(small_cluster("splitting", 3, 500))
    whole.run(jobs)
    part = SimEngine(small_cluster("splitting", 3, 500))
    run = part.run(jobs, until=900.0)
    assert part.now <= 900.0 < part.peek()
    assert run.jobs_completed < len(jobs)
    while part.peek() < float("inf"):
        part.step()
    ends = {j: t.end_s for j, t in whole.rec.times.items()}
    assert {j: t.end_s for j, t in part.rec.times.items()} == ends
    assert part.handled == whole.handled
    with pytest.raises(RuntimeError, match="nothing is scheduled"):
        part.step()
