"""The one dispatch and the one event order of every engine (core/dispatch.py)."""

from __future__ import annotations

from typing import Any, cast, get_args

import pytest

from datasched.core.actions import (
    Action,
    Assign,
    Evict,
    Fetch,
    JobCompleted,
    JobFailed,
    JobHeld,
    JobReleased,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    Unpin,
    WakeAt,
)
from datasched.core.dispatch import EventPump, apply
from datasched.core.events import Event, Tick
from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob
from datasched.core.scheduler import Scheduler

_D = IntervalSet.range(0, 5)
_SJ = Subjob(1, 1, _D)
ONE_OF_EACH: list[tuple[Action, str]] = [
    (Start(_SJ, 0, True), "on_start"),
    (Assign(_SJ, 0, True), "on_start"),
    (Preempt(1, 0), "on_preempt"),
    (Shrink(1, 0, _D), "on_shrink"),
    (WakeAt(3.0), "on_wake_at"),
    (Fetch(0, _D), "on_fetch"),
    (Replicate(0, 1, _D), "on_replicate"),
    (Pin(0, _D, 7), "on_pin"),
    (Unpin(0, 7), "on_unpin"),
    (Evict(0, _D), "on_evict"),
    (JobCompleted(1, 2.0, 1.0), "on_job_completed"),
    (JobFailed(1, 2.0, "x", 0), "on_job_failed"),
    (JobHeld(1, 2.0, 9.0), "on_job_held"),
    (JobReleased(1, 3.0), "on_job_released"),
]


class Recorder:
    """A handler that notes which method got which action; a Preempt is answered at once
    with a follow-up (as engines do), through ``pump``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Action]] = []
        self.pump: EventPump | None = None

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("on_"):
            raise AttributeError(name)

        def note(action: Action) -> None:
            self.calls.append((name, action))
            if isinstance(action, Preempt) and self.pump is not None:
                self.pump.emit(Tick(float(action.subjob_id)))

        return note


@pytest.mark.parametrize(("action", "method"), ONE_OF_EACH)
def test_every_action_goes_to_its_method(action: Action, method: str) -> None:
    handler = Recorder()
    apply(action, cast(Any, handler))
    assert handler.calls == [(method, action)]


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(AssertionError):
        apply(cast(Any, ("not", "an action")), cast(Any, Recorder()))


class Script:
    """A scheduler that answers each Tick by its time: Tick(t) -> its actions."""

    def __init__(self, answers: dict[float, list[Action]]) -> None:
        self.answers = answers
        self.now = 0.0
        self.seen: list[float] = []

    def handle(self, event: Event) -> list[Action]:
        if event.time < self.now:
            raise AssertionError(f"event at {event.time} after {self.now}")
        self.now = event.time
        self.seen.append(event.time)
        return self.answers.get(event.time, [])


def test_follow_ups_breadth_first_before_the_next_external_event() -> None:
    # Event 1 preempts 11 then 12 (their answers are Ticks 11 and 12); 11 preempts 21.
    # Breadth first: 1, 11, 12, 21, then the next external event 30.
    sched = Script({1.0: [Preempt(11, 0), Preempt(12, 1)], 11.0: [Preempt(21, 0)]})
    handler = Recorder()
    pump = EventPump(cast(Scheduler, sched), cast(Any, handler))
    handler.pump = pump
    pump.emit(Tick(1.0))
    pump.emit(Tick(30.0))
    assert pump.pump() == 5
    assert sched.seen == [1.0, 11.0, 12.0, 21.0, 30.0]
    assert pump.handled == 5
    assert not pump.pending()


def test_a_late_external_event_is_restamped_only_when_asked() -> None:
    # Event 1's follow-up is stamped 50; the external event queued next was stamped 30.
    for restamp in (True, False):
        sched = Script({1.0: [Preempt(50, 0)]})
        handler = Recorder()
        pump = EventPump(cast(Scheduler, sched), cast(Any, handler), restamp=restamp)
        handler.pump = pump
        pump.emit(Tick(1.0))
        pump.emit(Tick(30.0))
        if restamp:
            pump.pump()
            assert sched.seen == [1.0, 50.0, 50.0]
        else:
            with pytest.raises(AssertionError, match=r"event at 30\.0 after 50\.0"):
                pump.pump()


def test_the_pump_sends_every_action_where_apply_does() -> None:
    """The pump looks each action's method up by its class (a table beside ``apply``'s
    match, for speed): the two must agree for every action, and the table must hold them
    all."""
    actions = [action for action, _ in ONE_OF_EACH]
    sched = Script({1.0: actions})
    through_pump = Recorder()
    pump = EventPump(cast(Scheduler, sched), cast(Any, through_pump))
    pump.emit(Tick(1.0))
    pump.pump()
    through_apply = Recorder()
    for action in actions:
        apply(action, cast(Any, through_apply))
    assert through_pump.calls == through_apply.calls
    assert [name for name, _ in through_pump.calls] == [method for _, method in ONE_OF_EACH]
    assert {type(action) for action in actions} == set(get_args(Action))
    assert all(type(action) in pump._on for action in actions)
