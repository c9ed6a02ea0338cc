"""The simulated engine's answers to the core's actions, driven by a scripted scheduler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from datasched.core.actions import Action, Shrink, Start, WakeAt
from datasched.core.events import Event, JobArrived, SubjobFinished, SubjobShrunk, Tick
from datasched.core.intervals import IntervalSet
from datasched.core.model import ClusterSpec, CostModel, Job, Subjob
from datasched.core.scheduler import Policy
from datasched.sim.engine import SimEngine

EVENT_BYTES = CostModel().bytes_per_event
TERTIARY_S = 0.8  # 0.2 s CPU + 0.6 s to read 600 KB at 1 MB/s
CACHE_S = 0.26  # 0.2 s CPU + 0.06 s to read 600 KB at 10 MB/s


class Scripted:
    """Stands in for the Scheduler: answers each event with the script's actions."""

    def __init__(self, script: Callable[[Event], list[Action]]) -> None:
        self.script = script
        self.policy = Policy()
        self.seen: list[Event] = []
        self.jobs: dict[int, Any] = {}

    def handle(self, event: Event) -> list[Action]:
        self.seen.append(event)
        return self.script(event)


def run_script(
    script: Callable[[Event], list[Action]], data: IntervalSet, cached: IntervalSet
) -> Scripted:
    cluster = ClusterSpec.uniform(1, 1000 * EVENT_BYTES)
    sched = Scripted(script)
    engine = SimEngine(cluster, sched, check_conservation=True)  # type: ignore[arg-type]
    engine.caches[0].insert(cached, 0.0)
    engine.run([Job(0, 0.0, data)])
    return sched


def shrink_at(time: float, release: IntervalSet) -> Callable[[Event], list[Action]]:
    subjob = Subjob(subjob_id=7, job_id=0, data=IntervalSet.range(0, 100))

    def script(event: Event) -> list[Action]:
        if isinstance(event, JobArrived):
            return [Start(subjob, 0, cache_fill=True), WakeAt(time)]
        if isinstance(event, Tick):
            return [Shrink(subjob_id=7, node=0, release=release)]
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
