"""Whole-file fetches in the simulator as the runtime's workers make them: one tertiary read
of a file for the cluster when subjobs reading from peers want it at about the same time
(a fetch in flight is waited for and copied), a fetch taken over when its fetcher stops, and
the next file fetched while the current one is read (tertiary pipelining)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from clusters import EVENT_BYTES, space
from datasched.core.actions import Action, Preempt, Start, WakeAt
from datasched.core.events import Event, JobArrived, SubjobFinished, SubjobStopped, Tick
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Pipelining, Subjob, Topology
from datasched.core.scheduler import Scheduler
from datasched.policies import build_policy
from datasched.sim.engine import SimEngine
from datasched.sim.recorder import SimRun

FILE_EVENTS = 50
FETCH_S = FILE_EVENTS * EVENT_BYTES / 1e6  # a 30 MB file at 1 MB/s: 30 s
COPY_S = FILE_EVENTS * EVENT_BYTES / 10e6  # the same from a peer's disk at 10 MB/s: 3 s
CACHE_S = 0.26  # 0.2 s CPU + 0.06 s to read 600 KB at 10 MB/s


class TwoNodes(Scheduler):
    """Two nodes of one slot over files of 50 events; the script decides (the engine's side,
    tested alone)."""

    def __init__(
        self, script: Callable[[Event], list[Action]], pipelining: Pipelining = Pipelining.NONE
    ) -> None:
        super().__init__(
            Topology.uniform(2, 1000 * EVENT_BYTES),
            space(FILE_EVENTS),
            build_policy("farm"),
            cost=CostModel(pipelining=pipelining),
        )
        self.script = script
        self.seen: list[Event] = []

    def handle(self, event: Event) -> list[Action]:
        self.seen.append(event)
        return self.script(event)

    def finished(self, subjob_id: int) -> SubjobFinished:
        (done,) = [
            e for e in self.seen if isinstance(e, SubjobFinished) and e.subjob_id == subjob_id
        ]
        return done


def run(sched: TwoNodes, data: IntervalSet) -> SimRun:
    return SimEngine(sched, check_conservation=True).run([Job(0, 0.0, data)])


def two_readers(peer_reads: bool, second_at: float = 10.0) -> Callable[[Event], list[Action]]:
    """Subjob 1 reads [0, 25) on node 0 from time 0; subjob 2 reads [25, 50), the same
    file, on node 1 from ``second_at``."""
    first = Subjob(1, 0, IntervalSet.range(0, 25))
    second = Subjob(2, 0, IntervalSet.range(25, 50))

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Start(first, 0, cache_fill=True, peer_reads=peer_reads), WakeAt(second_at)]
        if isinstance(event, Tick):
            return [Start(second, 1, cache_fill=True, peer_reads=peer_reads)]
        return []

    return script


def test_a_file_being_fetched_is_waited_for_and_copied_not_fetched_again() -> None:
    sched = TwoNodes(two_readers(peer_reads=True))
    result = run(sched, IntervalSet.range(0, 50))
    assert sched.finished(1).time == pytest.approx(FETCH_S + 25 * CACHE_S)
    # Node 1 asks at 10 s: node 0's fetch began at 0 and ends at 30; then a 3 s copy.
    assert sched.finished(2).time == pytest.approx(FETCH_S + COPY_S + 25 * CACHE_S)
    assert sched.finished(2).cache_added == IntervalSet.range(0, 50)
    assert result.events_by_source == [0, 25, 25]

    # Without peer reads, node 1 fetches the file again.
    alone = TwoNodes(two_readers(peer_reads=False))
    result = run(alone, IntervalSet.range(0, 50))
    assert alone.finished(2).time == pytest.approx(10.0 + FETCH_S + 25 * CACHE_S)
    assert result.events_by_source == [0, 0, 50]


def test_a_fetch_planned_for_later_waits_for_one_begun_sooner_elsewhere() -> None:
    # Subjob 1 reads files 0 and 1 on node 0: it would fetch file 1 at 43 s. Subjob 2 wants
    # file 1 at 0 s on node 1 and fetches it: subjob 1 copies it from there instead.
    first = Subjob(1, 0, IntervalSet.range(0, 75))
    second = Subjob(2, 0, IntervalSet.range(75, 100))

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [
                Start(first, 0, cache_fill=True, peer_reads=True),
                Start(second, 1, cache_fill=True, peer_reads=True),
            ]
        return []

    sched = TwoNodes(script)
    result = run(sched, IntervalSet.range(0, 100))
    assert sched.finished(2).time == pytest.approx(FETCH_S + 25 * CACHE_S)
    reached = FETCH_S + 50 * CACHE_S  # 43 s: file 1 was there since 30 s
    assert sched.finished(1).time == pytest.approx(reached + COPY_S + 25 * CACHE_S)
    assert sched.finished(1).cache_added == IntervalSet.range(0, 100)
    assert result.events_by_source == [0, 25, 75]


def test_a_fetch_whose_fetcher_stops_is_taken_over_by_its_reader() -> None:
    # Subjob 1 fetches file 0 and is stopped at 20 s, before the fetch ends; subjob 2, which
    # waits to copy it since 10 s, fetches it itself in the same time, and the stopped part
    # then copies it from node 1. Every event once; one tertiary read.
    first = Subjob(1, 0, IntervalSet.range(0, 25))
    second = Subjob(2, 0, IntervalSet.range(25, 50))
    again = Subjob(3, 0, IntervalSet.range(0, 25))
    ticks = iter([10.0, 20.0])

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Start(first, 0, cache_fill=True, peer_reads=True), WakeAt(next(ticks))]
        if isinstance(event, Tick) and event.time == 10.0:
            return [Start(second, 1, cache_fill=True, peer_reads=True), WakeAt(next(ticks))]
        if isinstance(event, Tick):
            return [Preempt(subjob_id=1, slot=0)]
        if isinstance(event, SubjobStopped):
            return [Start(again, 0, cache_fill=True, peer_reads=True)]
        return []

    sched = TwoNodes(script)
    result = run(sched, IntervalSet.range(0, 50))
    (stopped,) = [e for e in sched.seen if isinstance(e, SubjobStopped)]
    assert stopped.remaining == IntervalSet.range(0, 25)
    assert not stopped.cache_added
    took_over = FETCH_S + COPY_S  # subjob 2's wait, now its own fetch
    assert sched.finished(2).time == pytest.approx(took_over + 25 * CACHE_S)
    assert sched.finished(3).time == pytest.approx(took_over + COPY_S + 25 * CACHE_S)
    assert result.events_by_source == [0, 25, 25]


def test_with_tertiary_pipelining_the_next_file_is_fetched_while_one_is_read() -> None:
    whole = Subjob(1, 0, IntervalSet.range(0, 100))

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Start(whole, 0, cache_fill=True)]
        return []

    sequential = TwoNodes(script)
    run(sequential, IntervalSet.range(0, 100))
    assert sequential.finished(1).time == pytest.approx(2 * (FETCH_S + 50 * CACHE_S))
    # File 1's fetch begins when file 0's ends (one fetch at a time on the link), while
    # file 0 is read: 13 s of the 30 s overlap.
    pipelined = TwoNodes(script, Pipelining.TERTIARY)
    run(pipelined, IntervalSet.range(0, 100))
    assert pipelined.finished(1).time == pytest.approx(2 * FETCH_S + 50 * CACHE_S)
    assert pipelined.finished(1).cache_added == IntervalSet.range(0, 100)
